// The README's worked examples, run: each ```console block's `$ COMMAND`
// lines are run from the repository root (engramlab: this build's; python3
// with this build's module on PYTHONPATH) and must exit as the README says
// (`# exit N` after the command, else 0) and print the lines the README shows
// under it, in that order. A line "..." stands for lines left out; "..."
// inside a line for text left out of it (what varies, such as a time, or a
// long error's middle).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace {

struct Example {
  int line = 0;  // of the command in README.md
  std::string command;
  int exit_code = 0;
  std::vector<std::string> shown;  // the output lines shown, "..." for a gap
};

std::string rstrip(std::string s) {
  while (!s.empty() && (s.back() == ' ' || s.back() == '\r')) s.pop_back();
  return s;
}

std::vector<Example> readme_examples() {
  std::ifstream in(std::string(ENGRAM_SOURCE_DIR) + "/README.md");
  std::vector<Example> out;
  std::string line;
  bool console = false;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (line.rfind("```", 0) == 0) {
      console = !console && line == "```console";
      continue;
    }
    if (!console) continue;
    if (line.rfind("$ ", 0) == 0) {
      Example e;
      e.line = number;
      e.command = line.substr(2);
      if (const size_t mark = e.command.find("  # exit "); mark != std::string::npos) {
        e.exit_code = std::stoi(e.command.substr(mark + 9));
        e.command = e.command.substr(0, mark);
      }
      out.push_back(e);
    } else if (!out.empty()) {
      out.back().shown.push_back(rstrip(line));
    }
  }
  return out;
}

// `want`'s pieces between "..." in `line`, in order: the first at its
// start, the last at its end unless `want` ends in "...".
bool line_matches(const std::string& line, const std::string& want) {
  if (want.find("...") == std::string::npos) return line == want;
  std::vector<std::string> pieces;
  size_t start = 0;
  for (size_t dots = want.find("..."); dots != std::string::npos; dots = want.find("...", start)) {
    pieces.push_back(want.substr(start, dots - start));
    start = dots + 3;
  }
  pieces.push_back(want.substr(start));
  if (line.compare(0, pieces.front().size(), pieces.front()) != 0) return false;
  size_t at = pieces.front().size();
  for (size_t p = 1; p < pieces.size(); ++p) {
    const std::string& piece = pieces[p];
    if (piece.empty()) continue;
    if (p + 1 == pieces.size()) {  // the last piece ends the line
      return line.size() >= at + piece.size() && line.compare(line.size() - piece.size(), piece.size(), piece) == 0;
    }
    const size_t found = line.find(piece, at);
    if (found == std::string::npos) return false;
    at = found + piece.size();
  }
  return true;
}

TEST(ReadmeExamples, ALineWithDotsMatchesWhatItLeavesOut) {
  EXPECT_TRUE(line_matches("a pass 12.0", "a pass ..."));
  EXPECT_TRUE(line_matches("error: x y z. Fix: w", "error: ... z. Fix: w"));
  EXPECT_FALSE(line_matches("error: x y z. Fix: v", "error: ... z. Fix: w"));
  EXPECT_FALSE(line_matches("b pass 12.0", "a pass ..."));
  EXPECT_FALSE(line_matches("a pass", "a pass 1"));
}

struct Ran {
  int exit_code = -1;
  std::vector<std::string> lines;
  std::string text;
};

// The interpreter this build's Python module is for (<build>/python/python_env.sh),
// which a README `python3` stands for; "python3" where the build has none.
std::string module_python() {
  std::ifstream in(std::string(ENGRAM_BINARY_DIR) + "/python/python_env.sh");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("ENGRAM_PYTHON=", 0) == 0) return line.substr(14);
  return "python3";
}

Ran run_in_repo(std::string command) {
  if (command.rfind("python3 ", 0) == 0) command = module_python() + command.substr(7);
  const std::string apps = std::string(ENGRAM_BINARY_DIR) + "/apps";
  const std::string python = std::string(ENGRAM_BINARY_DIR) + "/python";
  // As a reader runs it: engramlab on PATH, the module importable, no colour, no progress.
  const std::string full = "cd '" + std::string(ENGRAM_SOURCE_DIR) + "' && PATH='" + apps + "':\"$PATH\" PYTHONPATH='" +
                           python + "' NO_COLOR=1 ENGRAMLAB_PROGRESS=0 COLUMNS=200 bash -c '" + command + "' 2>&1";
  Ran r;
  FILE* pipe = ::popen(full.c_str(), "r");
  if (pipe == nullptr) return r;
  char buffer[4096];
  size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) r.text.append(buffer, n);
  const int status = ::pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::istringstream lines(r.text);
  std::string line;
  while (std::getline(lines, line)) r.lines.push_back(rstrip(line));
  return r;
}

TEST(ReadmeExamples, TheReadmeHasAnExampleForEachQuestion) {
  const std::vector<Example> examples = readme_examples();
  ASSERT_GE(examples.size(), 5u) << "README.md's ```console blocks: one per question it answers";
  for (const Example& e : examples) {
    EXPECT_EQ(e.command.find('\''), std::string::npos) << "README.md:" << e.line << ": the test quotes commands in ''";
    size_t shown = 0;
    for (const std::string& s : e.shown) shown += s != "..." && !s.empty();
    EXPECT_GE(shown, 1u) << "README.md:" << e.line << ": an example shows what it prints";
  }
}

TEST(ReadmeExamples, EachCommandExitsAsTheReadmeSaysAndPrintsItsLines) {
  for (const Example& e : readme_examples()) {
    SCOPED_TRACE("README.md:" + std::to_string(e.line) + ": " + e.command);
    const bool python = e.command.find("pytest") != std::string::npos;
    if (python && !std::filesystem::exists(std::string(ENGRAM_BINARY_DIR) + "/python/engramlab/__init__.py")) {
      std::printf("README.md:%d: skipped, this build has no Python module: %s\n", e.line, e.command.c_str());
      continue;
    }
    const Ran r = run_in_repo(e.command);
    EXPECT_EQ(r.exit_code, e.exit_code) << r.text;
    // The shown lines, in order; "..." and blank lines may stand for anything.
    size_t at = 0;
    for (const std::string& want : e.shown) {
      if (want == "..." || want.empty()) continue;
      size_t i = at;
      while (i < r.lines.size() && !line_matches(r.lines[i], want)) ++i;
      if (i == r.lines.size()) {
        ADD_FAILURE() << "does not print, after the lines before it, the README's line\n  " << want
                      << "\noutput:\n" << r.text;
        break;
      }
      at = i + 1;
    }
  }
}

}  // namespace
