// Generated YAML against the built `engramlab plan --file` and `scenario
// run`: deployments and scenarios mixing good fields with wrong ones --
// unknown and duplicate keys, lenient booleans, quoted numbers, huge and
// negative numbers, raw bytes, long values, anchors and aliases, deep
// nesting, a second document. Whatever the input: exit 0, 1 or 2, never a
// signal; a bad-input error under 1 KB (one that a valid deployment cannot
// work, with its per-environment fixes, under 2 KB); and under --json,
// stdout is valid UTF-8 that parses as one JSON object.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>
#include <sys/wait.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "core/base/field_errors.h"
#include "core/base/text_excerpt.h"

namespace engram {
namespace {

// --- the generator ---------------------------------------------------------

rc::Gen<std::string> gen_word() {
  return rc::gen::element<std::string>("a", "node", "gb200", "tray-1", "0", "1", "world", "host", "nvl72-a", "tiny",
                                       "deepseek-v4.1-flash", "H200", "GB200", "host_shared", "device_peer",
                                       "import", "send", "collective", "unset", "~", "null");
}

rc::Gen<std::string> gen_odd_text() {
  return rc::gen::oneOf(
      rc::gen::just(std::string("\"node\xff\xfe\"")),
      rc::gen::just(std::string("\"\\x01\\x7f tab\\t\"")),
      rc::gen::just(std::string("'quoted 1'")),
      rc::gen::map(rc::gen::inRange<int>(200, 3000), [](int n) { return std::string(static_cast<size_t>(n), 'x'); }),
      rc::gen::map(rc::gen::container<std::string>(rc::gen::inRange<char>('!', '~')), [](std::string s) {
        for (char& c : s)
          if (c == '#' || c == ':' || c == '{' || c == '}' || c == '[' || c == ']' || c == ',' || c == '&' ||
              c == '*' || c == '!' || c == '|' || c == '>' || c == '\'' || c == '"' || c == '%' || c == '@' ||
              c == '`' || c == '-' || c == '?')
            c = 'q';
        return s.empty() ? std::string("e") : s;
      }));
}

rc::Gen<std::string> gen_scalar() {
  return rc::gen::weightedOneOf<std::string>({
      {4, rc::gen::map(rc::gen::inRange<int>(0, 9), [](int n) { return std::to_string(n); })},
      {1, rc::gen::element<std::string>("-1", "-5", "2147483647", "99999999999999999999", "1e9", "0x10", "'4'")},
      {2, rc::gen::element<std::string>("true", "false", "yes", "on", "True", "off")},
      {2, rc::gen::element<std::string>("64MiB", "190GiB", "16000000TiB", "-5GiB", "1.5GiB", "12KiBs", "none")},
      {3, gen_word()},
      {1, gen_odd_text()},
  });
}

// A coherent deployment and scenario (hosts, a layout that fits them, a
// config, an expectation), then none, one or a few hostile edits.
rc::Gen<std::string> gen_document() {
  return rc::gen::exec([] {
    const int hosts = *rc::gen::inRange(1, 4);
    const int gpus = *rc::gen::element(1, 2, 4);
    const int world = hosts * gpus;
    int tp = *rc::gen::element(1, 2, 4);
    while (world % tp != 0) tp /= 2;
    std::map<std::string, std::string> host{{"name", *gen_word()},
                                            {"gpus", std::to_string(gpus)},
                                            {"count", std::to_string(hosts)},
                                            {"gpu_model", *rc::gen::element<std::string>("H200", "GB200", "B300")},
                                            {"shm_size", *rc::gen::element<std::string>("64MiB", "190GiB", "none")}};
    std::map<std::string, std::string> layout{{"tp", std::to_string(tp)}, {"dp", std::to_string(world / tp)}};
    std::map<std::string, std::string> config{
        {"cpu_offload", *rc::gen::element<std::string>("true", "false")},
        {"peer_shards", *rc::gen::element<std::string>("true", "false")},
        {"dp_shared_memory", *rc::gen::element<std::string>("unset", "true", "false")},
        {"shard_group", *rc::gen::element<std::string>("world", "host", "nvlink_domain")}};
    std::map<std::string, std::string> expect{
        {"placement", *rc::gen::element<std::string>("host_shared", "host_head_sharded", "device_collective",
                                                     "device_peer", "host_private")}};
    std::map<std::string, std::string> lookup{{"run", *rc::gen::element<std::string>("true", "false")},
                                              {"tokens", std::to_string(*rc::gen::inRange(0, 5))}};
    std::vector<std::map<std::string, std::string>*> maps{&host, &layout, &config, &expect, &lookup};
    std::string extra_top, extra_after;

    const int edits = *rc::gen::weightedElement<int>({{3, 0}, {3, 1}, {2, 2}, {1, 4}});
    for (int e = 0; e < edits; ++e) {
      switch (*rc::gen::inRange(0, 10)) {
        case 0:
        case 1:
        case 2: {  // a hostile value in place of a good one
          auto& m = *maps[static_cast<size_t>(*rc::gen::inRange<size_t>(0, maps.size()))];
          auto it = std::next(m.begin(), *rc::gen::inRange<long>(0, static_cast<long>(m.size())));
          it->second = *gen_scalar();
          break;
        }
        case 3: (*maps[static_cast<size_t>(*rc::gen::inRange<size_t>(0, maps.size()))])["bogus"] = *gen_scalar(); break;
        case 4: host["name"] = *gen_odd_text(); break;
        case 5: extra_top += "layout: {tp: 1}\n"; break;  // a duplicate key
        case 6: extra_after += "---\nhosts: []\n"; break;  // a second document
        case 7: extra_top += "deep: " + std::string(100, '[') + std::string(100, ']') + "\n"; break;
        case 8: host["count"] = "100000"; break;
        case 9: extra_top += *rc::gen::element<std::string>("hosts: [{name: a, gpus: 1\n", "anchor: &a [x, *a]\n",
                                                             "rank_hosts: ['0', 1, zz]\n", "seed: -1\n"); break;
      }
    }
    auto flow = [](const std::map<std::string, std::string>& m) {
      std::string out = "{";
      for (const auto& [k, v] : m) out += (out.size() > 1 ? ", " : "") + k + ": " + v;
      return out + "}";
    };
    return "hosts:\n  - " + flow(host) + "\nlayout: " + flow(layout) + "\nconfig: " + flow(config) +
           "\nexpect: " + flow(expect) + "\nlookup: " + flow(lookup) + "\n" + extra_top + extra_after;
  });
}

// --- running the command -----------------------------------------------------

struct Ran {
  bool signalled = false;
  int exit_code = -1;
  std::string out, err;
};

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Ran run_engramlab(const std::string& args, const std::string& dir) {
  const std::string out_path = dir + "/out", err_path = dir + "/err";
  const std::string cmd = "timeout -s KILL 120 " + std::string(ENGRAM_BINARY_DIR) + "/apps/engramlab " + args + " >" +
                          out_path + " 2>" + err_path;
  const int status = std::system(cmd.c_str());
  Ran r;
  r.signalled = !WIFEXITED(status) || WEXITSTATUS(status) >= 124;  // timeout's codes, or the shell's 128+signal
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = slurp(out_path);
  r.err = slurp(err_path);
  return r;
}

bool valid_utf8(const std::string& text) {
  for (size_t at = 0; at < text.size();) {
    const size_t n = utf8_sequence_bytes(text, at);
    if (n == 0) return false;
    at += n;
  }
  return true;
}

void check_outcome(const Ran& r, const std::string& what, const std::string& doc) {
  RC_ASSERT_FALSE(r.signalled);
  RC_ASSERT(r.exit_code == 0 || r.exit_code == 1 || r.exit_code == 2);
  // Bad input (exit 2), where values are echoed, stays under 1 KB an
  // error, and every error of the file is one line, FieldErrors::kMaxListed
  // at most and a line counting the rest. A deployment that cannot work as
  // asked (exit 1) also carries the fixes for Docker, Kubernetes and bare
  // metal (issue 14's guidance), each given once: bounded, but not by 1 KB.
  if (r.exit_code == 2) {
    std::istringstream lines(r.err);
    size_t count = 0;
    for (std::string line; std::getline(lines, line); ++count) RC_ASSERT(line.size() < 1024u);
    RC_ASSERT(count <= FieldErrors::kMaxListed + 1);
  }
  if (r.exit_code == 1) RC_ASSERT(r.err.size() < 2048u);
  RC_ASSERT(valid_utf8(r.out));
  if (!r.out.empty()) {
    YAML::Node parsed;  // JSON is YAML's flow style
    bool parses = true;
    try {
      parsed = YAML::Load(r.out);
    } catch (const YAML::Exception&) {
      parses = false;
    }
    RC_ASSERT(parses);
    RC_ASSERT(parsed.IsMap());
  }
  (void)what;
  (void)doc;
}

struct Scratch {
  Scratch() {
    char templ[] = "/tmp/engramlab-parserprop-XXXXXX";
    path = ::mkdtemp(templ);
  }
  ~Scratch() { std::filesystem::remove_all(path); }
  std::string path;
};

RC_GTEST_PROP(ParserProperty, PlanAndScenarioRunEndCleanlyOnAnyYaml, ()) {
  const std::string doc = *gen_document();
  Scratch scratch;
  const std::string file = scratch.path + "/input.yaml";
  const std::string deployment_file = scratch.path + "/deployment.yaml";
  {
    std::ofstream out(file, std::ios::binary);
    out << doc;
    // The deployment alone, for plan: the scenario's own sections dropped.
    std::ofstream deployment(deployment_file, std::ios::binary);
    std::istringstream lines(doc);
    for (std::string line; std::getline(lines, line);)
      if (line.rfind("expect:", 0) != 0 && line.rfind("lookup:", 0) != 0) deployment << line << "\n";
  }
  const Ran plan = run_engramlab("plan --json --file " + deployment_file, scratch.path);
  RC_LOG() << "plan exit " << plan.exit_code << "\n" << doc << "\n---- stderr:\n" << plan.err.substr(0, 2000) << "\n";
  check_outcome(plan, "plan", doc);
  RC_TAG("plan exit " + std::to_string(plan.exit_code));
  const Ran scenario = run_engramlab("scenario run --json " + file, scratch.path);
  RC_TAG("scenario exit " + std::to_string(scenario.exit_code));
  RC_LOG() << "scenario exit " << scenario.exit_code << "\n---- stderr:\n" << scenario.err.substr(0, 2000) << "\n";
  check_outcome(scenario, "scenario run", doc);
}

}  // namespace
}  // namespace engram
