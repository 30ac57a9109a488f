// Where an engine profile's rules come from, as data beside each rule: the
// repository, the file, the commit or PR, and whether that source is merged
// on the engine's main, an open PR, a fork, or only the stored reading of
// docs/design.md section 9 (the search index did not give its commit).
// `engramlab engines show` lists them; `plan --explain` names the rule behind
// each decision; a test fails where a rule has no source.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace engram {

enum class SourceState : uint8_t {
  kMerged,         // on the engine's main at `ref`
  kOpen,           // an open PR or issue: only a named variant applies it
  kFork,           // exists only in forks: only a named variant applies it
  kStoredReading,  // docs/design.md section 9's reading of a stored snapshot; commit not found by the search tools
  kEngramlab,      // engramlab's own rule (docs/design.md), not an engine's
};
const char* source_state_name(SourceState state);  // "merged", "open", "fork", "stored reading", "engramlab"

struct RuleSource {
  const char* repo = "";  // "vllm-project/vllm"
  const char* path = "";  // file(s) in it, or the design section for kEngramlab
  const char* ref = "";   // a commit, "PR 56435", "issue 39173", or "" where unknown (kStoredReading)
  SourceState state = SourceState::kMerged;
};
// "vllm-project/vllm vllm/models/deepseek_v4_1/nvidia/engram.py @ 1c0e50e5 (merged)".
std::string rule_source_text(const RuleSource& source);
// A source is complete when it names a repository and a path, and a ref
// unless it is the stored reading (whose caveat is that the ref is unknown).
bool rule_source_complete(const RuleSource& source);

// Stable keys: plan --explain and the tests name rules by them.
namespace rule_key {
inline constexpr char kCpuOffloadDefault[] = "cpu_offload_default";
inline constexpr char kDeviceTpSplit[] = "device_tp_split";
inline constexpr char kHostTpSplit[] = "host_tp_split";
inline constexpr char kNodeLocalGroup[] = "node_local_group";
inline constexpr char kHostLayouts[] = "host_layouts";
inline constexpr char kDevicePlacement[] = "device_placement";
inline constexpr char kDeviceShardGroup[] = "device_shard_group";
inline constexpr char kHostPlacement[] = "host_placement";
inline constexpr char kRowsBack[] = "rows_back";
inline constexpr char kSequenceParallel[] = "sequence_parallel";
inline constexpr char kMinusZero[] = "minus_zero";
inline constexpr char kScaleBytes[] = "scale_bytes";
inline constexpr char kShmAtCreation[] = "shm_at_creation";
inline constexpr char kVerifyBlocks[] = "verify_blocks";
inline constexpr char kContextParallel[] = "context_parallel";
inline constexpr char kPadding[] = "padding";
inline constexpr char kFallbackWarnings[] = "fallback_warnings";
inline constexpr char kRefusals[] = "refusals";
inline constexpr char kExtraMemory[] = "extra_memory";
}  // namespace rule_key

struct EngineRule {
  const char* key;   // rule_key::...
  const char* text;  // the rule, one sentence
  RuleSource source;
};

// The engine version a profile models: a release, or a commit of main with its date.
struct EngineVersion {
  const char* ref;   // "main @ 1c0e50e5" or "v0.11.0"
  const char* date;  // "2026-..." or "not in the search index" where the tools gave none
  const char* note;  // what the reading rests on
};

// Shared memory the engine holds beside the Engram tables: counted where a
// number is known, else named "not counted" so a fit is never said without it.
struct EngineHolding {
  const char* what;      // "NCCL's /dev/shm segments (SHM transport, proxy)"
  uint64_t bytes_per_host;  // 0: not counted (no number known)
  const char* where;     // "/dev/shm", "host RAM", ...
  RuleSource source;
};

}  // namespace engram
