#include "harness/lookup_steps_yaml.h"

#include <fmt/format.h>

#include <map>
#include <charconv>
#include <set>

namespace engram::harness {
namespace {

constexpr const char* kRequestKeys[] = {"instance", "prefix"};
constexpr const char* kStepKinds[] = {"prefill", "decode", "verify", "handover", "cp_prefill"};
constexpr const char* kVerifyKeys[] = {"request", "drafts", "accepted"};
constexpr const char* kHandoverKeys[] = {"request", "to"};
constexpr const char* kCpPrefillKeys[] = {"request", "split", "tokens"};
constexpr int kMaxRequests = 256;
constexpr int kMaxStepTokens = 4096;
constexpr int kMaxDrafts = 64;

class StepReader {
 public:
  StepReader(const ScenarioReader& r, FieldErrors& e, int request_count) : r_(r), e_(e), requests_(request_count) {}

  bool number(const YAML::Node& node, const std::string& path, int64_t low, int64_t high, int& out) {
    int64_t v = 0;
    if (!e_.set(v, r_.integer(node, path, low, high))) return false;
    out = static_cast<int>(v);
    return true;
  }
  bool required(const YAML::Node& map, const char* key, const std::string& path, std::string_view example) {
    if (map[key]) return true;
    e_.add(r_.error(map, path + "." + key, fmt::format("missing; write e.g. {}", example)));
    return false;
  }
  bool request(const YAML::Node& node, const std::string& path, int& out) {
    if (requests_ == 0) {
      e_.add(r_.error(node, path, "lookup.requests lists no request; add one, e.g. requests: [{instance: 0}]"));
      return false;
    }
    // A request is named by its index in lookup.requests (0 up), said as such: "'1' is not a whole number in
    // [0, 0]" told a reader with one request nothing.
    int64_t value = -1;
    const bool whole = node.IsScalar() && std::from_chars(node.Scalar().data(), node.Scalar().data() + node.Scalar().size(),
                                                          value).ec == std::errc();
    if (whole && (value < 0 || value >= requests_)) {
      e_.add(r_.error(node, path,
                      fmt::format("request {} does not exist: lookup.requests lists {} request{}, numbered from 0{}",
                                  value, requests_, requests_ == 1 ? "" : "s",
                                  requests_ == 1 ? " (write 0)" : fmt::format(" (0 to {})", requests_ - 1))));
      return false;
    }
    return number(node, path, 0, requests_ - 1, out);
  }
  std::vector<int> list(const YAML::Node& node, const std::string& path, int64_t low, int64_t high,
                        std::string_view example) {
    std::vector<int> out;
    if (!node.IsSequence()) {
      e_.add(r_.error(node, path, fmt::format("expected a list, found {}; write e.g. {}", ScenarioReader::describe(node),
                                              example)));
      return out;
    }
    for (size_t i = 0; i < node.size(); ++i) {
      int v = 0;
      if (number(node[i], fmt::format("{}[{}]", path, i), low, high, v)) out.push_back(v);
    }
    return out;
  }
  bool section(const YAML::Node& node, const std::string& path, std::string_view example,
               std::span<const char* const> keys) {
    return open_section(r_, node, path, example, keys, e_);
  }

  const ScenarioReader& r_;
  FieldErrors& e_;
  int requests_;
};

void parse_requests(StepReader& s, const YAML::Node& node, LookupSteps& out) {
  if (!node.IsSequence() || node.size() == 0 || node.size() > static_cast<size_t>(kMaxRequests)) {
    s.e_.add(s.r_.error(node, "lookup.requests",
                        fmt::format("expected a list of 1 to {} requests, found {}; write e.g. [{{instance: 0}}, "
                                    "{{instance: 1, prefix: 5}}]",
                                    kMaxRequests, ScenarioReader::describe(node))));
    return;
  }
  for (size_t i = 0; i < node.size(); ++i) {
    const std::string path = fmt::format("lookup.requests[{}]", i);
    StepsRequest q;
    if (s.section(node[i], path, "{instance: 0, prefix: 5}", kRequestKeys)) {
      if (s.required(node[i], "instance", path, "instance: 0 (the DP replica it begins on)"))
        s.number(node[i]["instance"], path + ".instance", 0, 1 << 20, q.instance);
      if (node[i]["prefix"]) s.number(node[i]["prefix"], path + ".prefix", 0, kMaxStepTokens, q.prefix_tokens);
    }
    out.requests.push_back(q);
  }
}

// Request numbers listed once each.
void once_each(StepReader& s, const YAML::Node& node, const std::string& path, const std::vector<int>& requests) {
  std::set<int> seen;
  for (int r : requests)
    if (!seen.insert(r).second)
      s.e_.add(s.r_.error(node, path,
                          fmt::format("request {} is listed twice; a request takes one part in a step", r)));
}

bool parse_step(StepReader& s, const YAML::Node& node, const std::string& path, StepSpec& step) {
  if (!node.IsMap() || node.size() != 1) {
    s.e_.add(s.r_.error(node, path,
                        fmt::format("expected one step: a map with one of prefill, decode, verify, handover or "
                                    "cp_prefill, found {}; write e.g. {{decode: [0, 1]}}",
                                    node.IsMap() ? fmt::format("a map of {} keys", node.size())
                                                 : ScenarioReader::describe(node))));
    return false;
  }
  if (!s.e_.add(s.r_.check_keys(node, path, kStepKinds))) return false;
  const std::string kind = node.begin()->first.Scalar();
  const YAML::Node v = node.begin()->second;
  const std::string at = path + "." + kind;
  const size_t before = s.e_.count();
  if (kind == "prefill") {
    step.kind = StepKind::kPrefill;
    step.chunk_tokens = s.list(v, at, 0, kMaxStepTokens, "[6, 0, 3] (a chunk length per request)");
    if (v.IsSequence() && static_cast<int>(v.size()) != s.requests_)
      s.e_.add(s.r_.error(v, at,
                          fmt::format("{} chunk lengths for {} requests; give one per request of lookup.requests "
                                      "(0: none this step)",
                                      v.size(), s.requests_)));
  } else if (kind == "decode") {
    step.kind = StepKind::kDecode;
    if (!v.IsSequence()) {
      s.e_.add(s.r_.error(v, at, fmt::format("expected a list of requests, found {}; write e.g. [0, 1]",
                                             ScenarioReader::describe(v))));
    } else {
      for (size_t i = 0; i < v.size(); ++i) {
        int r = 0;
        if (s.request(v[i], fmt::format("{}[{}]", at, i), r)) step.requests.push_back(r);
      }
      once_each(s, v, at, step.requests);
    }
  } else if (kind == "verify") {
    step.kind = StepKind::kVerify;
    if (!v.IsSequence() || v.size() == 0) {
      s.e_.add(s.r_.error(v, at, fmt::format("expected a list of verify blocks, found {}; write e.g. [{{request: 0, "
                                             "drafts: 3, accepted: 1}}]",
                                             ScenarioReader::describe(v))));
    } else {
      std::vector<int> requests;
      for (size_t i = 0; i < v.size(); ++i) {
        const std::string p = fmt::format("{}[{}]", at, i);
        if (!s.section(v[i], p, "{request: 0, drafts: 3, accepted: 1}", kVerifyKeys)) continue;
        StepsVerify b;
        bool whole = s.required(v[i], "request", p, "request: 0") && s.request(v[i]["request"], p + ".request", b.request);
        whole = s.required(v[i], "drafts", p, "drafts: 3 (draft tokens after the anchor)") &&
                s.number(v[i]["drafts"], p + ".drafts", 0, kMaxDrafts, b.drafts) && whole;
        whole = s.required(v[i], "accepted", p, "accepted: 1 (of the drafts)") &&
                s.number(v[i]["accepted"], p + ".accepted", 0, kMaxDrafts, b.accepted) && whole;
        if (whole && b.accepted > b.drafts) {
          s.e_.add(s.r_.error(v[i]["accepted"], p + ".accepted",
                              fmt::format("{} accepted of {} drafts; accept 0..{}", b.accepted, b.drafts, b.drafts)));
          whole = false;
        }
        if (whole) {
          step.verifies.push_back(b);
          requests.push_back(b.request);
        }
      }
      once_each(s, v, at, requests);
    }
  } else if (kind == "handover") {
    step.kind = StepKind::kHandover;
    if (s.section(v, at, "{request: 0, to: 1}", kHandoverKeys)) {
      if (s.required(v, "request", at, "request: 0")) s.request(v["request"], at + ".request", step.request);
      if (s.required(v, "to", at, "to: 1 (the DP replica it goes on on)"))
        s.number(v["to"], at + ".to", 0, 1 << 20, step.to_instance);
    }
  } else {
    step.kind = StepKind::kCpPrefill;
    if (s.section(v, at, "{request: 0, split: [2, 0, 3, 1]}", kCpPrefillKeys)) {
      if (s.required(v, "request", at, "request: 0")) s.request(v["request"], at + ".request", step.request);
      const YAML::Node split = v["split"];
      if (!split) {
        s.e_.add(s.r_.error(v, at + ".split",
                            "missing; write the shard lengths, one per CP rank (split: [2, 0, 3, 1]), or split: every "
                            "with tokens: N"));
      } else if (split.IsScalar() && split.Scalar() == "every") {
        if (s.required(v, "tokens", at, "tokens: 6 (the chunk every split cuts)"))
          s.number(v["tokens"], at + ".tokens", 0, kMaxStepTokens, step.every_split_tokens);
      } else {
        step.cp_split = s.list(split, at + ".split", 0, kMaxStepTokens, "[2, 0, 3, 1] or every");
        if (v["tokens"])
          s.e_.add(s.r_.error(v["tokens"], at + ".tokens",
                              "tokens goes with split: every; with a list of shard lengths the chunk is their sum, "
                              "so remove tokens"));
      }
    }
  }
  return s.e_.count() == before;
}

}  // namespace

void parse_lookup_steps(const ScenarioReader& r, const YAML::Node& lookup, LookupSteps& out, FieldErrors& e) {
  const YAML::Node steps = lookup["steps"];
  const YAML::Node requests = lookup["requests"];
  if (!steps && !requests) return;
  for (const char* replaced : {"tokens", "batches"})
    if (lookup[replaced])
      e.add(r.error(lookup[replaced], fmt::format("lookup.{}", replaced),
                    "lookup.steps replaces tokens and batches (each step says its own tokens); remove one of them"));
  if (steps && steps.IsScalar() && steps.Scalar() == "drawn") {
    out.drawn = true;
    if (requests)
      e.add(r.error(requests, "lookup.requests",
                    "with steps: drawn the seed draws the requests too; remove requests, or write the steps"));
    return;
  }
  StepReader s(r, e, requests && requests.IsSequence() ? static_cast<int>(requests.size()) : 0);
  if (!requests)
    e.add(r.error(lookup, "lookup.requests",
                  "missing; steps act on requests: list them, e.g. requests: [{instance: 0}, {instance: 1}]"));
  else parse_requests(s, requests, out);
  if (!steps) {
    e.add(r.error(lookup, "lookup.steps", "missing; list what the requests do, e.g. steps: [{prefill: [6]}, {decode: [0]}]"));
    return;
  }
  if (!steps.IsSequence() || steps.size() == 0) {
    e.add(r.error(steps, "lookup.steps",
                  fmt::format("expected a list of steps or `drawn`, found {}; write e.g. [{{prefill: [6, 3]}}, "
                              "{{decode: [0, 1]}}], or drawn (the seed draws a schedule)",
                              ScenarioReader::describe(steps))));
    return;
  }
  for (size_t i = 0; i < steps.size(); ++i) {
    StepSpec step;
    if (parse_step(s, steps[i], fmt::format("lookup.steps[{}]", i), step)) out.steps.push_back(std::move(step));
  }
}

void check_lookup_steps(const ScenarioReader& r, const YAML::Node& lookup, const LookupSteps& steps,
                        const Deployment& d, FieldErrors& e) {
  if (steps.drawn || steps.steps.empty()) return;
  const ParallelLayout& l = d.layout;
  std::vector<int> instance_of;
  for (size_t i = 0; i < steps.requests.size(); ++i) {
    const int instance = steps.requests[i].instance;
    if (instance >= l.dp)
      e.add(r.error(lookup["requests"][i]["instance"], fmt::format("lookup.requests[{}].instance", i),
                    fmt::format("replica {} does not exist; replicas are 0..{} (layout.dp is {})", instance, l.dp - 1,
                                l.dp)));
    instance_of.push_back(instance);
  }
  if (!e.empty()) return;
  for (size_t i = 0; i < steps.steps.size(); ++i) {
    const StepSpec& s = steps.steps[i];
    const YAML::Node node = lookup["steps"][i];
    const std::string path = fmt::format("lookup.steps[{}].{}", i, step_kind_name(s.kind));
    const YAML::Node at = node[step_kind_name(s.kind)];
    // Tokens on each replica in this step: the DP slot its lookups need.
    std::map<int, int64_t> tokens_on;
    switch (s.kind) {
      case StepKind::kPrefill:
        for (size_t q = 0; q < s.chunk_tokens.size(); ++q) tokens_on[instance_of[q]] += s.chunk_tokens[q];
        break;
      case StepKind::kDecode:
        for (int q : s.requests) tokens_on[instance_of[static_cast<size_t>(q)]] += 1;
        break;
      case StepKind::kVerify:
        for (const StepsVerify& v : s.verifies) tokens_on[instance_of[static_cast<size_t>(v.request)]] += 1 + v.drafts;
        break;
      case StepKind::kHandover: {
        const int from = instance_of[static_cast<size_t>(s.request)];
        if (s.to_instance >= l.dp)
          e.add(r.error(at["to"], path + ".to",
                        fmt::format("replica {} does not exist; replicas are 0..{} (layout.dp is {})", s.to_instance,
                                    l.dp - 1, l.dp)));
        else if (s.to_instance == from)
          e.add(r.error(at["to"], path + ".to",
                        fmt::format("request {} is on replica {} already; hand it over to another replica", s.request,
                                    from)));
        else
          instance_of[static_cast<size_t>(s.request)] = s.to_instance;
        break;
      }
      case StepKind::kCpPrefill:
        if (l.prefill_cp < 2) {
          e.add(r.error(at, path,
                        "layout.prefill_cp is 1: a CP prefill needs a CP group of two or more replicas; set "
                        "layout.prefill_cp to a divisor of layout.dp above 1, or use a prefill step"));
        } else if (s.every_split_tokens >= 0) {
          if (every_split_count(s.every_split_tokens, l.prefill_cp) > kMaxEverySplits)
            e.add(r.error(at["tokens"], path + ".tokens",
                          fmt::format("{} tokens over {} CP ranks have more than {} splits; cut fewer tokens",
                                      s.every_split_tokens, l.prefill_cp, kMaxEverySplits)));
          else
            tokens_on[instance_of[static_cast<size_t>(s.request)]] = s.every_split_tokens;  // a shard holds at most the chunk
        } else if (static_cast<int>(s.cp_split.size()) != l.prefill_cp) {
          e.add(r.error(at["split"], path + ".split",
                        fmt::format("{} shard lengths for {} CP ranks (layout.prefill_cp); give one per CP rank",
                                    s.cp_split.size(), l.prefill_cp)));
        } else {
          for (int n : s.cp_split) {
            int64_t& most = tokens_on[instance_of[static_cast<size_t>(s.request)]];
            most = std::max<int64_t>(most, n);
          }
        }
        break;
    }
    for (const auto& [replica, tokens] : tokens_on)
      if (tokens > d.config.tokens_per_rank_max) {
        e.add(r.error(at, path,
                      fmt::format("{} tokens on replica {} in one step, more than config.tokens_per_rank_max = {} (the "
                                  "DP slot); cut the step or raise tokens_per_rank_max",
                                  tokens, replica, d.config.tokens_per_rank_max)));
        break;
      }
  }
}

}  // namespace engram::harness
