// The registration table: one entry per engine, each defined with its rules
// in its own file (k...Profile). A new engine is a new file, an enumerator in
// engine_id.h (and kEngineCount) and one case here. The helpers below are
// what every profile shares.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <deque>
#include <string>
#include <vector>

#include "core/base/did_you_mean.h"
#include "core/base/text_excerpt.h"
#include "core/engines/engine_profile.h"
#include "core/engines/engine_profiles.h"
#include "core/model/request_hasher.h"
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

namespace {

// Each engine's variants as whole profiles: main's, with the variant's data
// applied and its rules over main's (same key replaced, new keys added).
struct VariantProfiles {
  std::deque<EngineProfile> profiles;                 // stable addresses
  std::deque<std::vector<EngineRule>> rule_lists;     // each profile's merged rules
};

const VariantProfiles& variant_profiles() {
  static const VariantProfiles built = [] {
    VariantProfiles v;
    for (const EngineProfile& main : engine_registry()) {
      for (const EngineVariant& variant : main.variants) {
        EngineProfile p = main;
        p.variant = &variant;
        p.variants = {};
        variant.apply(p);
        std::vector<EngineRule>& rules = v.rule_lists.emplace_back(main.rules.begin(), main.rules.end());
        for (const EngineRule& r : variant.rules) {
          auto it = std::find_if(rules.begin(), rules.end(),
                                 [&](const EngineRule& m) { return std::string_view(m.key) == r.key; });
          if (it != rules.end()) *it = r;
          else rules.push_back(r);
        }
        p.rules = rules;
        v.profiles.push_back(p);
      }
    }
    return v;
  }();
  return built;
}

std::string variant_names_text(const EngineProfile& main) {
  if (main.variants.empty()) return fmt::format("engine {} has no variants", main.name);
  std::string out;
  for (const EngineVariant& v : main.variants) out += fmt::format("{}{}+{}", out.empty() ? "" : ", ", main.name, v.name);
  return fmt::format("engine {}'s variants: {}", main.name, out);
}

}  // namespace

std::string profile_label(const EngineProfile& engine) {
  return engine.variant == nullptr ? std::string(engine.name) : fmt::format("{}+{}", engine.name, engine.variant->name);
}

const EngineRule* find_rule(const EngineProfile& engine, std::string_view key) {
  for (const EngineRule& r : engine.rules)
    if (key == r.key) return &r;
  return nullptr;
}

const EngineRule& rule_of(const EngineProfile& engine, std::string_view key) {
  const EngineRule* r = find_rule(engine, key);
  ENGRAM_CHECK_MSG(r != nullptr, "a decision names a rule its engine profile does not list");
  return *r;
}

DecidedBy decided_by(const EngineProfile& engine, std::string_view key, std::string decision) {
  const EngineRule& r = rule_of(engine, key);
  return {std::move(decision), profile_label(engine), r.key, r.text, rule_source_text(r.source)};
}

EngineExtraMemory engine_extra_memory(const EngineProfile& engine) {
  EngineExtraMemory out;
  for (const EngineHolding& h : engine.holdings) {
    if (h.bytes_per_host > 0) out.bytes_per_host += h.bytes_per_host;
    else out.not_counted.push_back(fmt::format("{} ({}; {})", h.what, h.where, rule_source_text(h.source)));
  }
  return out;
}

const EngineProfile& engine_profile(EngineId id, std::string_view variant) {
  if (variant.empty()) return engine_profile(id);
  for (const EngineProfile& p : variant_profiles().profiles)
    if (p.id == id && variant == p.variant->name) return p;
  ENGRAM_CHECK_MSG(false, "an engine variant that parse_engine_choice did not check");
  return engine_profile(id);
}

const EngineProfile& engine_profile_of(const EngineMemory& engine) { return engine_profile(engine.profile, engine.variant); }

Result<EngineChoice> parse_engine_choice(std::string_view text, std::string_view field) {
  const size_t plus = text.find('+');
  ENGRAM_ASSIGN_OR_RETURN(const EngineId id, parse_engine(text.substr(0, plus), field));
  if (plus == std::string_view::npos) return EngineChoice{id, ""};
  const std::string_view variant = text.substr(plus + 1);
  const EngineProfile& main = engine_profile(id);
  for (const EngineVariant& v : main.variants)
    if (variant == v.name) return EngineChoice{id, std::string(variant)};
  // A variant of another engine is named as such.
  std::string owners;
  for (const EngineProfile& e : engine_registry())
    for (const EngineVariant& v : e.variants)
      if (e.id != id && variant == v.name) owners += fmt::format("{}{}+{}", owners.empty() ? "" : ", ", e.name, v.name);
  std::vector<std::string> names;
  for (const EngineVariant& v : main.variants) names.emplace_back(v.name);
  const std::string hint = did_you_mean(variant, names);
  return invalid_argument(fmt::format(
      "{}: '{}' is not a variant of engine {}{}; {}{}; or give {} alone for its main", field, excerpt(variant),
      main.name, owners.empty() ? "" : fmt::format(" (it is a variant of another engine: {})", owners),
      variant_names_text(main), hint.empty() ? "" : " (" + hint + ")", main.name));
}

std::span<const EngineProfile> engine_registry() {
  static const std::array<EngineProfile, kEngineCount> table = [] {
    std::array<EngineProfile, kEngineCount> t{};
    for (size_t i = 0; i < kEngineCount; ++i) {
      t[i] = entry_of(static_cast<EngineId>(i));
      ENGRAM_CHECK(static_cast<size_t>(t[i].id) == i);
      ENGRAM_CHECK(t[i].node_local_groups && t[i].validate && t[i].placement_of && !t[i].host_layouts.empty());
      ENGRAM_CHECK_MSG(!t[i].rules.empty(), "an engine profile lists the rules it applies, each with its source");
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
  // Other engines, and variants (of this engine or another), that offer it.
  auto offers = [&](const EngineProfile& e) {
    for (const HostLayoutOption& l : e.host_layouts)
      if (config.host_layout == l.name) return true;
    return false;
  };
  for (const EngineProfile& e : engine_registry())
    if (e.id != engine.id && offers(e)) others += (others.empty() ? "" : ", ") + std::string(e.name);
  for (const EngineProfile& e : variant_profiles().profiles)
    if (offers(e) && !(e.id == engine.id && e.variant == engine.variant) &&
        (e.id == engine.id || others.find(e.name) == std::string::npos))
      others += (others.empty() ? "" : ", ") + profile_label(e);
  return invalid_argument(fmt::format(
      "config.host_layout: engine {} has no host layout '{}'; it offers {}{}", profile_label(engine), excerpt(config.host_layout),
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
  return engine.validate(engine, d, model);
}

static void apply_cpu_offload_default(const EngineProfile& engine, Deployment& d);

void apply_engine_defaults(const EngineProfile& engine, Deployment& d) {
  apply_cpu_offload_default(engine, d);
  if (engine.device_shard_group == nullptr || d.config.cpu_offload) return;
  const std::optional<ShardGroup> group = engine.device_shard_group(engine, d.config);
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
  const ScaleByteRule r = engine.scale_byte_rule;
  return fmt::format("0 -> {}, 255 -> {}", r == ScaleByteRule::kVllm ? "+0" : "2^-127",
                     r == ScaleByteRule::kSglangTorch ? "NaN" : "+inf");
}

MinusZeroRule lookup_minus_zero(const EngineProfile& engine, bool rows_summed) {
  switch (engine.minus_zero) {
    case MinusZeroRule::kWritePlusZero: return MinusZeroRule::kWritePlusZero;
    case MinusZeroRule::kKeep: return MinusZeroRule::kKeep;
    case MinusZeroRule::kKeepUnlessSummed:
      return rows_summed ? MinusZeroRule::kWritePlusZero : MinusZeroRule::kKeep;
  }
  return engine.minus_zero;
}

void apply_engine_value_rules(const EngineProfile& engine, bool rows_summed, ModelSpec& model) {
  const MinusZeroRule minus_zero = lookup_minus_zero(engine, rows_summed);
  for (TableSpec& t : model.tables) {
    t.scale_byte_rule = engine.scale_byte_rule;
    t.minus_zero = minus_zero;
  }
}

void apply_engine_hash_rules(const EngineProfile& engine, RequestHasher& hasher) {
  if (!engine.equal_verify_blocks) return;
  hasher.require_equal_verify_blocks(fmt::format(
      "engine {} asserts equal verify blocks per request ({}); give every request the same number of drafts, or "
      "plan under an engine that takes ragged blocks",
      profile_label(engine), rule_source_text(rule_of(engine, rule_key::kVerifyBlocks).source)));
}

int64_t padding_rows_read(const EngineProfile& engine, int64_t graph_padding_tokens, int64_t dp_padding_tokens,
                          int heads) {
  ENGRAM_CHECK(graph_padding_tokens >= 0 && dp_padding_tokens >= 0 && heads >= 0);
  switch (engine.padding) {
    case PaddingRule::kDead: return 0;
    case PaddingRule::kSglang: return (graph_padding_tokens + dp_padding_tokens) * heads;
  }
  return 0;
}

int64_t cp_tokens_hashed_per_rank(const EngineProfile& engine, int64_t prompt_tokens, int cp, int max_order) {
  ENGRAM_CHECK(prompt_tokens >= 0 && cp >= 1 && max_order >= 1);
  switch (engine.cp_hashing) {
    case CpHashing::kWholePromptAllGatherIds: return prompt_tokens;
    case CpHashing::kHaloExchange: {
      const int64_t shard = (prompt_tokens + cp - 1) / cp;
      return std::min(prompt_tokens, shard + (cp > 1 ? max_order - 1 : 0));
    }
  }
  return prompt_tokens;
}

}  // namespace engram
