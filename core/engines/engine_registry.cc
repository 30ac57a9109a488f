// The registration table: one entry per engine, each defined with its rules
// in its own file (k...Profile). A new engine is a new file, an enumerator in
// engine_id.h (and kEngineCount) and one case here. The helpers below are
// what every profile shares.
#include <fmt/format.h>

#include <array>
#include <string>
#include <vector>

#include "core/base/did_you_mean.h"
#include "core/base/text_excerpt.h"
#include "core/engines/engine_profile.h"
#include "core/engines/engine_profiles.h"
#include "core/deployment/shard_groups.h"

namespace engram {
namespace {

// -Werror=switch makes an enumerator without a case here a build error.
const EngineProfile& entry_of(EngineId id) {
  switch (id) {
    case EngineId::kEngramlab: return kEngramlabProfile;
    case EngineId::kVllm: return kVllmProfile;
    case EngineId::kSglang: return kSglangProfile;
  }
  ENGRAM_CHECK_MSG(false, "not an engine enumerator");
  return kEngramlabProfile;
}

std::vector<std::string> engine_name_list() {
  std::vector<std::string> names;
  for (const EngineProfile& e : engine_registry()) names.emplace_back(e.name);
  return names;
}

}  // namespace

const char* tp_split_name(TpSplit split) {
  switch (split) {
    case TpSplit::kRows: return "rows";
    case TpSplit::kHeads: return "heads";
  }
  return "?";
}

std::span<const EngineProfile> engine_registry() {
  static const std::array<EngineProfile, kEngineCount> table = [] {
    std::array<EngineProfile, kEngineCount> t{};
    for (size_t i = 0; i < kEngineCount; ++i) {
      t[i] = entry_of(static_cast<EngineId>(i));
      ENGRAM_CHECK(static_cast<size_t>(t[i].id) == i);
      ENGRAM_CHECK(t[i].node_local_groups && t[i].validate && t[i].placement_of && !t[i].host_layouts.empty());
    }
    return t;
  }();
  return table;
}

const EngineProfile& engine_profile(EngineId id) {
  const size_t i = static_cast<size_t>(id);
  ENGRAM_CHECK(i < kEngineCount);
  return engine_registry()[i];
}

const char* engine_name(EngineId id) { return engine_profile(id).name; }

std::string engine_names_text() {
  std::string out;
  const std::vector<std::string> names = engine_name_list();
  for (size_t i = 0; i < names.size(); ++i)
    out += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
  return out;
}

Result<EngineId> parse_engine(std::string_view name, std::string_view field) {
  for (const EngineProfile& e : engine_registry())
    if (name == e.name) return e.id;
  const std::vector<std::string> names = engine_name_list();
  const std::string hint = did_you_mean(name, names);
  return invalid_argument(fmt::format("{}: '{}' is not an engine; give {}{}", field, excerpt(name), engine_names_text(),
                                      hint.empty() ? "" : " (" + hint + ")"));
}

Result<Placement> placement_named(const EngineProfile& engine, std::string_view name, std::string_view asked_by) {
  for (const PlacementOps& ops : placement_registry())
    if (name == ops.name) return ops.id;
  return failed_precondition(fmt::format(
      "engine {}: {} builds the placement '{}', which this build of engramlab does not have (its placements: {}); "
      "plan it with a build that registers {}, or plan under another engine",
      engine.name, asked_by, name,
      [] {
        std::string known;
        for (const PlacementOps& ops : placement_registry()) known += (known.empty() ? "" : ", ") + std::string(ops.name);
        return known;
      }(),
      name));
}

Result<const HostLayoutOption*> host_layout_of(const EngineProfile& engine, const EngramConfig& config) {
  if (config.host_layout.empty()) return &engine.host_layouts.front();
  for (const HostLayoutOption& l : engine.host_layouts)
    if (config.host_layout == l.name) return &l;
  std::string offered;
  for (const HostLayoutOption& l : engine.host_layouts) offered += (offered.empty() ? "" : ", ") + std::string(l.name);
  std::string others;
  for (const EngineProfile& e : engine_registry()) {
    if (e.id == engine.id) continue;
    for (const HostLayoutOption& l : e.host_layouts)
      if (config.host_layout == l.name) others += (others.empty() ? "" : ", ") + std::string(e.name);
  }
  return invalid_argument(fmt::format(
      "config.host_layout: engine {} has no host layout '{}'; it offers {}{}", engine.name, excerpt(config.host_layout),
      offered, others.empty() ? "" : fmt::format(" ('{}' is a layout of {}: --engine {})", config.host_layout, others, others)));
}

Result<Placement> host_layout_placement(const EngineProfile& engine, const EngramConfig& config, Placement decided) {
  ENGRAM_ASSIGN_OR_RETURN(const HostLayoutOption* layout, host_layout_of(engine, config));
  if (layout->placement[0] == '\0') return decided;
  return placement_named(engine, layout->placement, fmt::format("host layout '{}'", layout->name));
}

Status engine_refuses(const EngineProfile& engine, std::string_view field, std::string_view value,
                      std::string_view why, std::string_view fix) {
  return invalid_argument(fmt::format("{} ({}): engine {} refuses it: {}; {}", field, value, engine.name, why, fix));
}

namespace {

// The engines that have a setting, for the refusal's fix.
template <class Has>
std::string engines_with(Has has) {
  std::string out;
  for (const EngineProfile& e : engine_registry())
    if (has(e.settings)) out += (out.empty() ? "" : ", ") + std::string(e.name);
  return out;
}

Status refuse_setting(const EngineProfile& engine, std::string_view field, std::string_view value,
                      std::string_view owners) {
  return engine_refuses(engine, field, value, fmt::format("{} has no such setting (it is {}'s)", engine.name, owners),
                        fmt::format("leave it out, or plan with --engine {}", owners));
}

}  // namespace

Status validate_for_engine(const EngineProfile& engine, const Deployment& d, const ModelSpec& model) {
  const EngramConfig& c = d.config;
  const EngineSettings& has = engine.settings;
  if (c.dp_shared_memory && !has.dp_shared_memory)
    return refuse_setting(engine, "config.dp_shared_memory", *c.dp_shared_memory ? "true" : "false",
                          engines_with([](const EngineSettings& s) { return s.dp_shared_memory; }));
  if (c.peer_shards && !has.peer_shards)
    return refuse_setting(engine, "config.peer_shards", "true",
                          engines_with([](const EngineSettings& s) { return s.peer_shards; }));
  if (c.embedding_across_dp && !has.embedding_across_dp)
    return refuse_setting(engine, "config.embedding_across_dp", "true",
                          engines_with([](const EngineSettings& s) { return s.embedding_across_dp; }));
  if (c.thp_packing && !has.thp_packing)
    return refuse_setting(engine, "config.thp_packing", "true",
                          engines_with([](const EngineSettings& s) { return s.thp_packing; }));
  ENGRAM_RETURN_IF_ERROR(host_layout_of(engine, c).status());
  return engine.validate(d, model);
}

static void apply_cpu_offload_default(const EngineProfile& engine, Deployment& d);

void apply_engine_defaults(const EngineProfile& engine, Deployment& d) {
  apply_cpu_offload_default(engine, d);
  if (engine.device_shard_group == nullptr || d.config.cpu_offload) return;
  const std::optional<ShardGroup> group = engine.device_shard_group(d.config);
  if (!group || *group == d.config.shard_group) return;
  d.config.shard_group = *group;
  d.defaults_used.push_back({"config.shard_group", shard_group_name(*group),
                             fmt::format("engine {} cuts its device tables over {}", engine.name,
                                         shard_group_meaning(*group))});
}

static void apply_cpu_offload_default(const EngineProfile& engine, Deployment& d) {
  // Only ever turns offload on: a deployment built in code that sets
  // cpu_offload without marking it written keeps it under an engine whose
  // default is off. A host layout written asks for host tables.
  if (d.config.cpu_offload_given || d.config.cpu_offload) return;
  if (!engine.cpu_offload_default && d.config.host_layout.empty()) return;
  d.config.cpu_offload = true;
  d.defaults_used.push_back({"config.cpu_offload", "true",
                             d.config.host_layout.empty()
                                 ? fmt::format("engine {}'s default ({}); write config.cpu_offload: false "
                                               "(--cpu-offload=false) for device tables",
                                               engine.name, engine.cpu_offload_default_source)
                                 : fmt::format("config.host_layout '{}' asks for host tables", d.config.host_layout)});
}

std::string scale_bytes_text(const EngineProfile& engine) {
  const bool exponent_bits = engine.scale_byte_rule == ScaleByteRule::kVllm;
  return fmt::format("0 -> {}, 255 -> {}", exponent_bits ? "+0" : "2^-127", exponent_bits ? "+inf" : "NaN");
}

void apply_engine_scale_rule(const EngineProfile& engine, ModelSpec& model) {
  for (TableSpec& t : model.tables) t.scale_byte_rule = engine.scale_byte_rule;
}

}  // namespace engram
