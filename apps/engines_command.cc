// `engramlab engines show ENGINE[+VARIANT] [--json]`: the rules an engine
// profile applies (core/engines/), each with its source (repository, path,
// commit or PR, merged / open / fork / the stored reading), the engine
// version it models, its named variants and what the engine holds beside
// the tables. Exit codes: 0 shown; 2 bad input (an unknown engine or
// variant, named with the ones that exist).
#include <fmt/format.h>

#include <cstdio>
#include <iostream>
#include <string>

#include "apps/command_registry.h"
#include "core/base/json_output.h"
#include "core/engines/engine_profile.h"

namespace engram::app {
namespace {

struct EnginesFlags {
  std::string engine;
  bool json = false;
};

Json source_json(const RuleSource& s) {
  return {{"repo", s.repo}, {"path", s.path}, {"ref", s.ref}, {"state", source_state_name(s.state)}};
}

Json profile_json(const EngineProfile& e) {
  Json j = json_document("engines show");
  j["engine"] = profile_label(e);
  j["version"] = {{"ref", e.version.ref}, {"date", e.version.date}, {"note", e.version.note}};
  if (e.variant != nullptr) j["variant"] = {{"name", e.variant->name}, {"what", e.variant->what},
                                            {"source", source_json(e.variant->source)}};
  Json rules = Json::array();
  for (const EngineRule& r : e.rules)
    rules.push_back({{"key", r.key}, {"text", r.text}, {"source", source_json(r.source)}});
  j["rules"] = std::move(rules);
  Json variants = Json::array();
  for (const EngineVariant& v : engine_profile(e.id).variants)
    variants.push_back({{"name", fmt::format("{}+{}", e.name, v.name)}, {"what", v.what}, {"source", source_json(v.source)}});
  j["variants"] = std::move(variants);
  Json layouts = Json::array();
  for (const HostLayoutOption& l : e.host_layouts) layouts.push_back({{"name", l.name}, {"what", l.what}});
  j["host_layouts"] = std::move(layouts);
  const EngineExtraMemory extra = engine_extra_memory(e);
  j["engine_extra_bytes"] = extra.bytes_per_host;
  j["not_counted"] = extra.not_counted;
  j["warnings"] = Json::array();
  j["error"] = nullptr;
  return j;
}

std::string profile_text(const EngineProfile& e) {
  std::string out = fmt::format("engine {}: version {} ({}; {})\n", profile_label(e), e.version.ref,
                                e.version.date[0] == '\0' ? "this tree" : e.version.date, e.version.note);
  if (e.variant != nullptr)
    out += fmt::format("variant {}: {} ({})\n", e.variant->name, e.variant->what, rule_source_text(e.variant->source));
  out += "rules:\n";
  for (const EngineRule& r : e.rules)
    out += fmt::format("  {}: {}\n    source: {}\n", r.key, r.text, rule_source_text(r.source));
  out += "host layouts:";
  for (const HostLayoutOption& l : e.host_layouts) out += fmt::format(" {}", l.name);
  out += fmt::format(" (default {})\n", e.host_layouts.front().name);
  const EngineProfile& main = engine_profile(e.id);
  if (!main.variants.empty()) {
    out += "variants (--engine NAME+VARIANT; never applied unless named):\n";
    for (const EngineVariant& v : main.variants)
      out += fmt::format("  {}+{}: {} ({})\n", e.name, v.name, v.what, rule_source_text(v.source));
  }
  const EngineExtraMemory extra = engine_extra_memory(e);
  out += "beside the tables (not counted in a fit):\n";
  for (const std::string& n : extra.not_counted) out += "  " + n + "\n";
  return out;
}

int show(const EnginesFlags& f) {
  const Result<EngineChoice> choice = parse_engine_choice(f.engine, "engines show");
  if (!choice.is_ok()) {
    std::fputs(fmt::format("engramlab engines show: error: {}\n", choice.status().to_string()).c_str(), stderr);
    if (f.json) std::cout << dump_json(error_document("engines show", choice.status())) << "\n";
    return 2;
  }
  const EngineProfile& e = engine_profile(choice->id, choice->variant);
  if (f.json) std::cout << dump_json(profile_json(e)) << "\n";
  else std::cout << profile_text(e);
  return 0;
}

CommandRegistration engines_registration("25-engines", [](CLI::App& app, int& exit_code) {
  auto flags = std::make_shared<EnginesFlags>();
  CLI::App* cmd = app.add_subcommand("engines", "The engine profiles plan and launch predict by, with their sources");
  cmd->require_subcommand(1);
  CLI::App* sub = cmd->add_subcommand(
      "show", fmt::format("an engine's rules, each with its source, its version and its named variants ({})",
                          engine_names_text()));
  sub->add_option("engine", flags->engine, "ENGINE or ENGINE+VARIANT")->required();
  sub->add_flag("--json", flags->json, "print a machine-readable JSON document");
  sub->callback([flags, &exit_code] { exit_code = show(*flags); });
});

}  // namespace
}  // namespace engram::app
