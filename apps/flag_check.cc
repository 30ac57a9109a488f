#include "apps/flag_check.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>

#include "apps/flag_spellings.h"
#include "core/base/did_you_mean.h"
#include "core/base/text_excerpt.h"

namespace engram::app {
namespace {

const CLI::Option* long_option(const CLI::App& app, const std::string& name) {
  for (const CLI::Option* opt : app.get_options())
    if (opt->check_lname(name)) return opt;
  return nullptr;
}

const CLI::Option* short_option(const CLI::App& app, char letter) {
  for (const CLI::Option* opt : app.get_options())
    if (opt->check_sname(std::string(1, letter))) return opt;
  return nullptr;
}

// The next word is this option's value ("--tp 4"), not a flag or a command.
bool takes_next_word(const CLI::Option* opt, const std::string& typed, size_t name_end) {
  return opt != nullptr && opt->get_items_expected_max() > 0 && name_end >= typed.size();
}

bool has_positional(const CLI::App& app) {
  const auto options = app.get_options();
  return std::any_of(options.begin(), options.end(), [](const CLI::Option* o) { return o->get_positional(); });
}

const CLI::App* subcommand(const CLI::App& app, const std::string& word) {
  for (const CLI::App* sub : const_cast<CLI::App&>(app).get_subcommands([](CLI::App*) { return true; }))
    if (sub->check_name(word)) return sub;
  return nullptr;
}

// "engramlab plan", "engramlab scenario run".
std::string command_words(const CLI::App* app) {
  std::string words;
  for (; app != nullptr; app = app->get_parent()) {
    const std::string name = app->get_parent() == nullptr ? "engramlab" : app->get_name();
    words = name + (words.empty() ? "" : " ") + words;
  }
  return words;
}

// "--tp-size (the same as --tp)": the option's first long name is ours.
std::string shown(const CLI::Option& opt, const std::string& name) {
  const std::string ours = opt.get_lnames().empty() ? "-" + opt.get_snames().front() : "--" + opt.get_lnames().front();
  const std::string written = (name.size() == 1 ? "-" : "--") + name;
  return written == ours ? written : fmt::format("{} (the same as {})", written, ours);
}

Status unknown_flag(const CLI::App& app, const std::string& typed, bool after_words) {
  // Every long name of every flag the user can see, bare (tp-size); a
  // one-letter name is never a useful guess.
  std::vector<std::string> names;
  std::vector<const CLI::Option*> owner;
  for (const CLI::Option* opt : app.get_options()) {
    if (opt->get_group().empty() || opt->get_positional()) continue;  // hidden, or not a flag
    for (const std::string& n : opt->get_lnames()) names.push_back(n), owner.push_back(opt);
  }
  std::string bare = typed.substr(0, typed.find('='));
  bare.erase(0, bare.find_first_not_of('-'));
  std::string fix;
  // One name a flag: --nproc-per-node and --nproc_per_node are as close to
  // --nproc-per-nod; the one written as the user writes (with '_' or not) is shown.
  const bool underscores = bare.find('_') != std::string::npos;
  std::vector<std::pair<const CLI::Option*, std::string>> offered;
  for (const std::string& name : bare.size() < 2 ? std::vector<std::string>{} : closest_names(bare, names)) {
    const CLI::Option* opt = owner[std::find(names.begin(), names.end(), name) - names.begin()];
    auto same = std::find_if(offered.begin(), offered.end(), [&](const auto& o) { return o.first == opt; });
    if (same == offered.end()) offered.emplace_back(opt, name);
    else if ((name.find('_') != std::string::npos) == underscores) same->second = name;
  }
  for (size_t i = 0; i < offered.size(); ++i) {
    fix += (i == 0 ? "did you mean " : i + 1 == offered.size() ? " or " : ", ") +
           shown(*offered[i].first, offered[i].second);
  }
  const std::string command = command_words(&app);
  const CLI::App* root = &app;
  while (root->get_parent() != nullptr) root = root->get_parent();
  if (fix.empty() && root != &app && typed.rfind("--", 0) == 0 && long_option(*root, bare) != nullptr) {
    fix = fmt::format("--{} is engramlab's own: engramlab --{}", bare, bare);
  } else {
    fix = fix.empty() ? fmt::format("`{} --help` lists the flags it takes", command) : fix + "?";
  }
  if (after_words) fix += "; if it is the command's own flag, put `--` before the command";
  return invalid_argument(fmt::format("{}: unknown flag {}; {}", command, excerpt(typed.substr(0, typed.find('='))), fix));
}

// A word where only a subcommand can stand ("engramlab pln").
Status unknown_command(const CLI::App& app, const std::string& word) {
  std::vector<std::string> names;
  for (const CLI::App* sub : const_cast<CLI::App&>(app).get_subcommands([](CLI::App*) { return true; }))
    names.push_back(sub->get_name());
  const std::string guess = did_you_mean(word, names, false);
  return invalid_argument(fmt::format("{}: unknown command '{}'; {}{} takes: {}", command_words(&app), excerpt(word),
                                      guess.empty() ? "" : guess + " ", command_words(&app), fmt::join(names, ", ")));
}

bool is_number(const std::string& a) {
  return a.size() > 1 && (std::isdigit(static_cast<unsigned char>(a[1])) || a[1] == '.');
}

}  // namespace

Status check_flags(const CLI::App& root, std::vector<std::string>& args) {
  const CLI::App* app = &root;
  bool value_next = false;   // the word before was a flag that takes a value
  bool after_words = false;  // a positional word came first: a command given without `--`
  for (std::string& a : args) {
    if (a == "--") break;
    const bool is_value = value_next;
    value_next = false;
    if (a.size() > 2 && a.compare(0, 2, "--") == 0) {
      const size_t name_end = std::min(a.find('='), a.size());
      const CLI::Option* opt = long_option(*app, a.substr(2, name_end - 2));
      if (opt == nullptr) return unknown_flag(*app, a, after_words && has_positional(*app));
      value_next = takes_next_word(opt, a, name_end);
    } else if (a.size() > 1 && a[0] == '-' && !is_number(a)) {
      const size_t name_end = std::min(a.find('='), a.size());
      const std::string head = a.substr(0, name_end);
      const auto spelling = std::find_if(std::begin(kSingleDashSpellings), std::end(kSingleDashSpellings),
                                         [&](const SingleDashSpelling& s) { return head == s.typed; });
      const CLI::Option* ours = spelling == std::end(kSingleDashSpellings) ? nullptr : long_option(*app, spelling->ours + 2);
      if (ours != nullptr) {
        a = spelling->ours + a.substr(head.size());
        value_next = takes_next_word(ours, a, std::min(a.find('='), a.size()));
      } else if (const CLI::Option* letter = short_option(*app, a[1])) {
        value_next = takes_next_word(letter, a, 2);  // -n2 holds its value
      } else {
        return unknown_flag(*app, a, after_words && has_positional(*app));
      }
    } else if (is_value) {
      continue;
    } else if (const CLI::App* sub = subcommand(*app, a)) {
      app = sub;
      after_words = false;
      // A command that takes whatever follows (no_emulator_commands.cc's,
      // which only say what this build lacks) reads the rest itself.
      if (app->get_allow_extras()) break;
    } else if (!has_positional(*app) && app->get_require_subcommand_min() > 0) {
      return unknown_command(*app, a);
    } else {
      after_words = true;
    }
  }
  return Status::ok();
}

}  // namespace engram::app
