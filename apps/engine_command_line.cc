#include "apps/engine_command_line.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <map>
#include <optional>

#include <nlohmann/json.hpp>

#include "core/base/did_you_mean.h"
#include "core/base/text_excerpt.h"
#include "core/model/table_spec.h"

namespace engram::app {
namespace {

// How a flag takes its value: kValue always one; kSwitch an optional
// boolean (`--cpu-offload`, `--cpu-offload false`, `--cpu-offload=false`);
// the ignored kinds likewise, listed and otherwise left alone.
enum class Arg { kValue, kSwitch, kIgnoredValue, kIgnoredSwitch };

struct FlagSpec {
  std::vector<std::string_view> names;  // spellings, dashes included; "--a-b" also matches "--a_b"
  Arg arg;
  std::string_view setting;  // what it sets (empty for ignored flags)
};

// vLLM's `vllm serve` flags (vllm/engine/arg_utils.py: EngineArgs.add_cli_args;
// the short forms -tp, -dp, -dpl, -pp, -ep, -pcp are its aliases). A
// `--max-model-len` may be written 32k / 32K / 1m, as vLLM parses it
// (human_readable_int).
const std::vector<FlagSpec>& vllm_flags() {
  static const std::vector<FlagSpec> flags = {
      {{"--tensor-parallel-size", "-tp"}, Arg::kValue, "tp"},
      {{"--data-parallel-size", "-dp"}, Arg::kValue, "dp"},
      {{"--data-parallel-size-local", "-dpl"}, Arg::kValue, "dp-local"},
      {{"--pipeline-parallel-size", "-pp"}, Arg::kValue, "pp"},
      {{"--prefill-context-parallel-size", "-pcp"}, Arg::kValue, "prefill-cp"},
      {{"--enable-expert-parallel", "-ep"}, Arg::kSwitch, "enable-expert-parallel"},
      {{"--max-model-len"}, Arg::kValue, "context-length"},
      {{"--model"}, Arg::kValue, "model"},
      {{"--gpu-memory-utilization"}, Arg::kValue, "gpu-memory-fraction"},
      {{"--engram-config"}, Arg::kValue, "engram-config"},
      {{"--cpu-offload", "--engram-cpu-offload"}, Arg::kSwitch, "cpu-offload"},
      {{"--no-cpu-offload", "--no-engram-cpu-offload"}, Arg::kSwitch, "no-cpu-offload"},
      {{"--host", "--port", "--served-model-name", "--max-num-seqs", "--max-num-batched-tokens", "--kv-cache-dtype",
        "--block-size", "--dtype", "--quantization", "-q", "--tokenizer", "--seed", "--swap-space",
        "--compilation-config", "-O", "--speculative-config", "--api-key", "--uvicorn-log-level",
        "--distributed-executor-backend", "--all2all-backend", "--eplb-config", "--tool-call-parser",
        "--reasoning-parser", "--chat-template", "--load-format", "--download-dir", "--max-logprobs", "--hf-overrides",
        "--override-generation-config", "--data-parallel-address", "-dpa", "--data-parallel-rpc-port", "-dpp",
        "--data-parallel-start-rank", "-dpr", "--data-parallel-rank", "--data-parallel-backend", "-dpb",
        "--api-server-count", "--revision", "--tokenizer-mode", "--generation-config", "--max-cudagraph-capture-size",
        "--cuda-graph-sizes", "--kv-transfer-config", "--limit-mm-per-prompt", "--config", "--ssl-keyfile",
        "--ssl-certfile", "--root-path", "--lora-modules", "--max-num-partial-prefills", "--logits-processors"},
       Arg::kIgnoredValue, ""},
      {{"--trust-remote-code", "--enforce-eager", "--enable-prefix-caching", "--no-enable-prefix-caching",
        "--enable-chunked-prefill", "--no-enable-chunked-prefill", "--disable-log-requests", "--disable-log-stats",
        "--enable-eplb", "--async-scheduling", "--enable-auto-tool-choice", "--headless", "--data-parallel-hybrid-lb",
        "--data-parallel-external-lb", "--enable-dbo", "--enable-log-requests", "--disable-custom-all-reduce",
        "--enable-lora", "--skip-tokenizer-init", "--disable-uvicorn-access-log", "--enable-sleep-mode"},
       Arg::kIgnoredSwitch, ""},
  };
  return flags;
}

// SGLang's `python -m sglang.launch_server` flags
// (python/sglang/srt/server_args.py: ServerArgs.add_cli_args, with its
// aliases --tp, --dp, --ep, --pp). With --enable-dp-attention the attention
// TP of a replica is tp-size / dp-size and the job has tp-size GPUs.
const std::vector<FlagSpec>& sglang_flags() {
  static const std::vector<FlagSpec> flags = {
      {{"--tp-size", "--tp", "--tensor-parallel-size"}, Arg::kValue, "tp"},
      {{"--dp-size", "--dp", "--data-parallel-size"}, Arg::kValue, "dp"},
      {{"--ep-size", "--ep", "--expert-parallel-size"}, Arg::kValue, "ep"},
      {{"--pp-size", "--pp", "--pipeline-parallel-size"}, Arg::kValue, "pp"},
      {{"--attn-cp-size"}, Arg::kValue, "prefill-cp"},
      {{"--enable-dp-attention"}, Arg::kSwitch, "dp-attention"},
      {{"--nnodes"}, Arg::kValue, "nnodes"},
      {{"--context-length"}, Arg::kValue, "context-length"},
      {{"--model-path", "--model"}, Arg::kValue, "model"},
      {{"--mem-fraction-static"}, Arg::kValue, "gpu-memory-fraction"},
      {{"--engram-config"}, Arg::kValue, "engram-config"},
      {{"--cpu-offload", "--engram-cpu-offload"}, Arg::kSwitch, "cpu-offload"},
      {{"--no-cpu-offload", "--no-engram-cpu-offload"}, Arg::kSwitch, "no-cpu-offload"},
      {{"--host", "--port", "--node-rank", "--dist-init-addr", "--served-model-name", "--max-running-requests",
        "--chunked-prefill-size", "--kv-cache-dtype", "--attention-backend", "--cuda-graph-max-bs", "--quantization",
        "--dtype", "--log-level", "--moe-a2a-backend", "--deepep-mode", "--speculative-algorithm",
        "--speculative-num-steps", "--speculative-eagle-topk", "--speculative-num-draft-tokens", "--tool-call-parser",
        "--reasoning-parser", "--page-size", "--max-total-tokens", "--moe-dense-tp-size", "--random-seed",
        "--watchdog-timeout", "--decode-log-interval", "--tokenizer-path", "--api-key", "--load-format",
        "--chat-template", "--revision", "--max-prefill-tokens", "--schedule-policy", "--stream-interval",
        "--dist-timeout", "--cuda-graph-bs", "--ep-num-redundant-experts", "--moe-runner-backend",
        "--disaggregation-mode", "--disaggregation-transfer-backend", "--disaggregation-ib-device",
        "--tokenizer-worker-num", "--download-dir", "--schedule-conservativeness"},
       Arg::kIgnoredValue, ""},
      {{"--trust-remote-code", "--disable-cuda-graph", "--enable-metrics", "--enable-torch-compile",
        "--disable-radix-cache", "--enable-eplb", "--skip-tokenizer-init", "--enable-mixed-chunk",
        "--disable-overlap-schedule", "--enable-two-batch-overlap", "--enable-deepep-moe", "--log-requests",
        "--enable-cache-report", "--show-time-cost", "--enable-p2p-check", "--disable-custom-all-reduce"},
       Arg::kIgnoredSwitch, ""},
  };
  return flags;
}

std::string long_form(std::string_view flag) {
  std::string out(flag);
  if (out.starts_with("--"))
    std::replace(out.begin() + 2, out.end(), '_', '-');  // argparse-style engines take --max_model_len too
  return out;
}

const FlagSpec* find_flag(const std::vector<FlagSpec>& flags, std::string_view name) {
  const std::string spelled = long_form(name);
  for (const FlagSpec& f : flags)
    for (std::string_view n : f.names)
      if (n == spelled) return &f;
  return nullptr;
}

std::optional<bool> boolean_word(std::string_view w) {
  std::string lower(w);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "true" || lower == "1" || lower == "yes" || lower == "on") return true;
  if (lower == "false" || lower == "0" || lower == "no" || lower == "off") return false;
  return std::nullopt;
}

Result<int> whole(std::string_view flag, std::string_view text, int min_value) {
  int value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value < min_value)
    return invalid_argument(fmt::format("{} '{}': not a whole number of at least {}; write e.g. {} 8", flag,
                                        excerpt(text), min_value, flag));
  return value;
}

// 32768, 32k, 32K, 1m (vLLM's human_readable_int: k = 10^3, K = 2^10, m = 10^6, M = 2^20).
Result<std::string> model_length(std::string_view flag, std::string_view text) {
  if (text.empty()) return invalid_argument(fmt::format("{}: no value; write e.g. {} 32768", flag, flag));
  uint64_t scale = 1;
  std::string_view digits = text;
  switch (text.back()) {
    case 'k': scale = 1000; break;
    case 'K': scale = 1024; break;
    case 'm': scale = 1000 * 1000; break;
    case 'M': scale = 1024 * 1024; break;
    default: break;
  }
  if (scale != 1) digits.remove_suffix(1);
  uint64_t value = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (ec != std::errc() || end != digits.data() + digits.size() || value == 0 || value > (1ull << 30) / scale)
    return invalid_argument(fmt::format("{} '{}': not a token count; write e.g. {} 32768 (or 32k)", flag,
                                        excerpt(text), flag));
  return std::to_string(value * scale);
}

// A Hugging Face id or a local path of a model engramlab ships:
// deepseek-ai/DeepSeek-V4.1-Flash -> deepseek-v4.1-flash.
Result<std::string> model_name(std::string_view flag, std::string_view text) {
  if (text.ends_with(".yaml") || text.ends_with(".yml")) return std::string(text);  // a model file of one's own
  std::string_view base = text;
  while (base.ends_with('/')) base.remove_suffix(1);
  if (const size_t slash = base.rfind('/'); slash != std::string_view::npos) base.remove_prefix(slash + 1);
  std::string lower(base);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const std::vector<std::string> presets = model_preset_names();
  if (std::find(presets.begin(), presets.end(), lower) != presets.end()) return lower;
  const std::string guess = did_you_mean(lower, presets);
  return invalid_argument(fmt::format(
      "{} '{}': not a model engramlab has the Engram tables of ({}known: {}); describe its tables in a model file "
      "and give plan --model FILE.yaml after --from",
      flag, excerpt(text), guess.empty() ? "" : guess + "; ", fmt::join(presets, ", ")));
}

// --engram-config '{"cpu_offload": true, ...}': the engine's Engram settings
// by their config names, each as plan's flag of the same name.
Status read_engram_config(std::string_view text, std::vector<std::pair<std::string, std::string>>& out) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return invalid_argument(fmt::format("--engram-config '{}': not a JSON object; write e.g. --engram-config "
                                        "'{{\"cpu_offload\": true, \"dp_shared_memory\": true}}'",
                                        excerpt(text)));
  static const std::vector<std::string> bool_keys = {"cpu_offload", "dp_shared_memory", "peer_shards",
                                                     "thp_packing", "embedding_across_dp", "sequence_parallel"};
  static const std::vector<std::string> text_keys = {"host_layout", "shard_group"};
  std::vector<std::string> known = bool_keys;
  known.insert(known.end(), text_keys.begin(), text_keys.end());
  for (const auto& [key, value] : j.items()) {
    std::string flag = key;
    std::replace(flag.begin(), flag.end(), '_', '-');
    if (std::find(bool_keys.begin(), bool_keys.end(), key) != bool_keys.end()) {
      if (key == "dp_shared_memory" && value.is_null()) {
        out.emplace_back(flag, "unset");
        continue;
      }
      if (!value.is_boolean())
        return invalid_argument(fmt::format("--engram-config: \"{}\" is {}; write true or false", key,
                                            excerpt(value.dump())));
      out.emplace_back(flag, value.get<bool>() ? "true" : "false");
    } else if (std::find(text_keys.begin(), text_keys.end(), key) != text_keys.end()) {
      if (!value.is_string())
        return invalid_argument(fmt::format("--engram-config: \"{}\" is {}; write a name in quotes", key,
                                            excerpt(value.dump())));
      out.emplace_back(flag, value.get<std::string>());
    } else {
      const std::string guess = did_you_mean(key, known);
      return invalid_argument(fmt::format("--engram-config: \"{}\" is not an Engram setting engramlab reads; {}known: {}",
                                          excerpt(key), guess.empty() ? "" : guess + "; ", fmt::join(known, ", ")));
    }
  }
  return Status::ok();
}

std::vector<std::string> flag_names(const std::vector<FlagSpec>& flags) {
  std::vector<std::string> names;
  for (const FlagSpec& f : flags)
    for (std::string_view n : f.names) names.emplace_back(n);
  return names;
}

// Where the engine's name starts the line: the words after it, and which.
struct Program {
  std::string engine;
  size_t first_flag = 0;
};

Result<Program> program_of(const std::vector<std::string>& words, std::string_view engine_hint) {
  auto is = [&](size_t i, std::string_view w) { return i < words.size() && words[i] == w; };
  size_t i = 0;
  while (i < words.size() && words[i].find('=') != std::string::npos && !words[i].starts_with("-")) ++i;  // VAR=x
  if (is(i, "vllm") && is(i + 1, "serve")) return Program{"vllm", i + 2};
  const bool python = i < words.size() && (words[i] == "python" || words[i] == "python3" ||
                                           words[i].ends_with("/python") || words[i].ends_with("/python3"));
  if (python && is(i + 1, "-m") && is(i + 2, "sglang.launch_server")) return Program{"sglang", i + 3};
  if (python && is(i + 1, "-m") && is(i + 2, "vllm.entrypoints.openai.api_server")) return Program{"vllm", i + 3};
  if (is(i, "sglang") && is(i + 1, "serve")) return Program{"sglang", i + 2};
  if (i < words.size() && words[i].starts_with("-")) {
    if (engine_hint == "vllm" || engine_hint == "sglang") return Program{std::string(engine_hint), i};
    return invalid_argument(
        "--from: flags alone, and no engine to read them by; start with `vllm serve MODEL` or `python -m "
        "sglang.launch_server`, or give --engine vllm|sglang");
  }
  return invalid_argument(fmt::format(
      "--from: '{}' is not an engine's command line engramlab reads; paste `vllm serve MODEL ...` or `python -m "
      "sglang.launch_server ...`",
      excerpt(words.empty() ? std::string() : words[i < words.size() ? i : 0])));
}

}  // namespace

Result<std::vector<std::string>> split_command_words(std::string_view text) {
  std::vector<std::string> words;
  std::string word;
  bool in_word = false;
  char quote = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quote == '\'') {
      if (c == '\'') quote = 0;
      else word += c;
      continue;
    }
    if (quote == '"') {
      if (c == '"') quote = 0;
      else if (c == '\\' && i + 1 < text.size() && (text[i + 1] == '"' || text[i + 1] == '\\')) word += text[++i];
      else word += c;
      continue;
    }
    if (c == '\\' && i + 1 < text.size()) {
      if (text[i + 1] != '\n') {
        word += text[i + 1];
        in_word = true;
      }
      ++i;
      continue;
    }
    if (c == '\'' || c == '"') {
      quote = c;
      in_word = true;
      continue;
    }
    if (std::isspace(static_cast<unsigned char>(c))) {
      if (in_word) words.push_back(std::move(word));
      word.clear();
      in_word = false;
      continue;
    }
    word += c;
    in_word = true;
  }
  if (quote != 0)
    return invalid_argument(fmt::format("--from: a {} quote is not closed; close it, or quote the whole command line "
                                        "with the other kind",
                                        quote == '\'' ? "single" : "double"));
  if (in_word) words.push_back(std::move(word));
  return words;
}

Result<EngineCommandLine> read_engine_command_line(std::string_view text, std::string_view engine_hint) {
  ENGRAM_ASSIGN_OR_RETURN(const std::vector<std::string> words, split_command_words(text));
  if (words.empty()) return invalid_argument("--from: empty; paste the engine's command line, e.g. --from \"vllm serve "
                                             "deepseek-ai/DeepSeek-V4.1-Flash -tp 1 -dp 8\"");
  ENGRAM_ASSIGN_OR_RETURN(const Program program, program_of(words, engine_hint));
  const bool vllm = program.engine == "vllm";
  const std::vector<FlagSpec>& flags = vllm ? vllm_flags() : sglang_flags();
  const std::vector<FlagSpec>& others = vllm ? sglang_flags() : vllm_flags();

  EngineCommandLine out;
  out.engine = program.engine;
  std::map<std::string, std::string, std::less<>> set;  // setting -> value
  bool model_positional_taken = false;
  for (size_t i = program.first_flag; i < words.size(); ++i) {
    const std::string& w = words[i];
    if (!w.starts_with("-") || w == "-") {
      if (vllm && !model_positional_taken && !set.count("model")) {  // `vllm serve MODEL`
        ENGRAM_ASSIGN_OR_RETURN(set["model"], model_name("the model", w));
        model_positional_taken = true;
        continue;
      }
      return invalid_argument(fmt::format("--from: '{}' follows no flag that takes a value; check the command line "
                                          "(quote a JSON value: --engram-config '{{...}}')",
                                          excerpt(w)));
    }
    const size_t eq = w.find('=');
    const std::string name = w.substr(0, eq);
    std::optional<std::string> inline_value;
    if (eq != std::string::npos) inline_value = w.substr(eq + 1);
    const FlagSpec* spec = find_flag(flags, name);
    if (spec == nullptr) {
      const FlagSpec* theirs = find_flag(others, name);
      const std::vector<std::string> names = flag_names(flags);
      const std::string guess = did_you_mean(long_form(name), names, /*quote=*/false);
      return invalid_argument(fmt::format(
          "--from: {} is not a flag of {}{}{}; correct it, or drop it if it has no bearing on Engram",
          excerpt(name), vllm ? "vllm serve" : "sglang.launch_server",
          theirs != nullptr ? fmt::format(" (it is {}'s)", vllm ? "SGLang" : "vLLM") : "",
          guess.empty() ? "" : "; " + guess));
    }
    auto take_value = [&]() -> Result<std::string> {
      if (inline_value) return *inline_value;
      if (i + 1 >= words.size())
        return invalid_argument(fmt::format("--from: {} needs a value; write {} VALUE", name, name));
      return words[++i];
    };
    auto take_switch = [&]() -> Result<bool> {
      if (inline_value) {
        const std::optional<bool> b = boolean_word(*inline_value);
        if (!b) return invalid_argument(fmt::format("--from: {}='{}' is not a boolean; write {}=true or {}=false", name,
                                                    excerpt(*inline_value), name, name));
        return *b;
      }
      if (i + 1 < words.size())
        if (const std::optional<bool> b = boolean_word(words[i + 1])) {
          ++i;
          return *b;
        }
      return true;
    };
    switch (spec->arg) {
      case Arg::kIgnoredValue: {
        ENGRAM_ASSIGN_OR_RETURN(const std::string v, take_value());
        out.ignored.push_back(fmt::format("{} {}", name, excerpt(v, 40)));
        break;
      }
      case Arg::kIgnoredSwitch:
        if (inline_value) out.ignored.push_back(fmt::format("{}={}", name, excerpt(*inline_value, 40)));
        else out.ignored.push_back(name);
        break;
      case Arg::kSwitch: {
        ENGRAM_ASSIGN_OR_RETURN(const bool b, take_switch());
        if (spec->setting == "no-cpu-offload") set["cpu-offload"] = b ? "false" : "true";
        else set[std::string(spec->setting)] = b ? "true" : "false";
        break;
      }
      case Arg::kValue: {
        ENGRAM_ASSIGN_OR_RETURN(const std::string v, take_value());
        if (spec->setting == "model") {
          ENGRAM_ASSIGN_OR_RETURN(set["model"], model_name(name, v));
        } else if (spec->setting == "context-length") {
          ENGRAM_ASSIGN_OR_RETURN(set["context-length"], model_length(name, v));
        } else if (spec->setting == "engram-config") {
          std::vector<std::pair<std::string, std::string>> config;
          ENGRAM_RETURN_IF_ERROR(read_engram_config(v, config));
          for (auto& [k, value] : config) set[k] = value;
        } else {
          set[std::string(spec->setting)] = v;
        }
        break;
      }
    }
  }

  // The layout: plan's TP (attention TP of a replica), DP, hosts and GPUs a host.
  auto number = [&](std::string_view key, std::string_view flag, int fallback) -> Result<int> {
    auto it = set.find(key);
    if (it == set.end()) return fallback;
    return whole(flag, it->second, 1);
  };
  int tp = 0, dp = 0, world = 0, hosts = 1;
  ENGRAM_ASSIGN_OR_RETURN(const int pp, number("pp", vllm ? "-pp" : "--pp-size", 1));
  if (vllm) {
    ENGRAM_ASSIGN_OR_RETURN(tp, number("tp", "-tp", 1));
    ENGRAM_ASSIGN_OR_RETURN(dp, number("dp", "-dp", 1));
    ENGRAM_ASSIGN_OR_RETURN(const int dp_local, number("dp-local", "--data-parallel-size-local", dp));
    if (dp % dp_local != 0)
      return invalid_argument(fmt::format("--from: --data-parallel-size-local {} does not divide -dp {}: the replicas "
                                          "would not fill whole nodes; give a divisor of {}",
                                          dp_local, dp, dp));
    hosts = dp / dp_local;
    world = tp * dp * pp;
    if (set.count("dp-local"))
      out.notes.push_back(fmt::format("-dp {} with --data-parallel-size-local {}: {} node{} of {} GPUs", dp, dp_local,
                                      hosts, hosts == 1 ? "" : "s", world / hosts));
  } else {
    ENGRAM_ASSIGN_OR_RETURN(const int tp_size, number("tp", "--tp-size", 1));
    ENGRAM_ASSIGN_OR_RETURN(dp, number("dp", "--dp-size", 1));
    ENGRAM_ASSIGN_OR_RETURN(hosts, number("nnodes", "--nnodes", 1));
    if (set.count("dp-attention") && set["dp-attention"] == "true") {
      // SGLang's DP attention: tp-size GPUs, dp-size replicas of attention TP tp-size / dp-size.
      if (tp_size % dp != 0)
        return invalid_argument(fmt::format("--from: --enable-dp-attention with --dp-size {} needs it to divide "
                                            "--tp-size {}; give a divisor",
                                            dp, tp_size));
      tp = tp_size / dp;
      world = tp_size * pp;
      out.notes.push_back(fmt::format("--tp-size {} --dp-size {} --enable-dp-attention: {} replicas of attention TP {}",
                                      tp_size, dp, dp, tp));
    } else {
      tp = tp_size;
      world = tp * dp * pp;
    }
    if (world % hosts != 0)
      return invalid_argument(fmt::format("--from: --nnodes {} does not divide the job's {} GPUs; give a divisor",
                                          hosts, world));
  }
  out.plan_flags.emplace_back("engine", program.engine);
  out.plan_flags.emplace_back("tp", std::to_string(tp));
  out.plan_flags.emplace_back("dp", std::to_string(dp));
  out.plan_flags.emplace_back("hosts", std::to_string(hosts));
  out.plan_flags.emplace_back("gpus-per-host", std::to_string(world / hosts));
  if (pp > 1) {
    // The Engram layers sit in the first pipeline stage (layers 1 and 14 of
    // V4.1); the other stages' ranks hold none, but share the nodes (and
    // vLLM's node-local group counts them).
    out.plan_flags.emplace_back("extra-ranks", std::to_string(tp * dp * (pp - 1)));
    out.notes.push_back(fmt::format("pipeline parallel {}: the first stage's {} ranks hold the Engram tables, the "
                                    "other {} are counted as extra ranks on the nodes",
                                    pp, tp * dp, tp * dp * (pp - 1)));
  }
  if (set.count("enable-expert-parallel") && set["enable-expert-parallel"] == "true")
    out.plan_flags.emplace_back("enable-expert-parallel", "true");
  for (const char* key : {"ep", "prefill-cp", "model", "context-length", "gpu-memory-fraction", "cpu-offload",
                          "dp-shared-memory", "peer-shards", "thp-packing", "embedding-across-dp",
                          "sequence-parallel", "host-layout", "shard-group"}) {
    if (auto it = set.find(key); it != set.end()) out.plan_flags.emplace_back(key, it->second);
  }
  return out;
}

}  // namespace engram::app
