// The spellings of our flags that users bring from the engines and torchrun,
// declared as aliases where they mean the same as ours (CLI11 names: ours
// first, the others after), with the words --help adds to say who spells it
// so. Every command that takes one of these flags declares it with these.
//
// Not aliased, because it does not mean the same: vLLM's
// --enable-expert-parallel is a switch (EP over every rank, tp x dp), not a
// size; `plan` takes it as that switch.
#pragma once

#include <string>
#include <string_view>

namespace engram::app {

struct FlagSpelling {
  const char* names;  // for CLI11's add_option
  const char* who;    // appended to the help text
};

// SGLang's --tp-size and --dp-size count as ours without
// --enable-dp-attention; with it SGLang's tp is every GPU of the replica set
// (our tp x dp), which help says.
inline constexpr FlagSpelling kTpSpelling{
    "--tp,--tensor-parallel-size,--tp-size",
    " (also --tensor-parallel-size, vLLM's and SGLang's; -tp, vLLM's; --tp-size, SGLang's without "
    "--enable-dp-attention)"};
inline constexpr FlagSpelling kDpSpelling{
    "--dp,--data-parallel-size,--dp-size",
    " (also --data-parallel-size, vLLM's and SGLang's; -dp, vLLM's; --dp-size, SGLang's)"};
inline constexpr FlagSpelling kEpSpelling{"--ep,--expert-parallel-size,--ep-size",
                                          " (also --expert-parallel-size and --ep-size, SGLang's)"};
inline constexpr FlagSpelling kGpuMemoryFractionSpelling{
    "--gpu-memory-fraction,--gpu-memory-utilization,--mem-fraction-static",
    " (also --gpu-memory-utilization, vLLM's; --mem-fraction-static, SGLang's)"};

// torchrun's spellings for `launch`: underscores (its older form) beside
// dashes.
inline constexpr FlagSpelling kNprocPerNodeSpelling{"--nproc-per-node,-n,--nproc,--nproc_per_node",
                                                    " (also -n, --nproc and --nproc_per_node, torchrun's)"};
inline constexpr FlagSpelling kNodeRankSpelling{"--node-rank,--node_rank", " (also --node_rank, torchrun's)"};
inline constexpr FlagSpelling kMasterAddrSpelling{"--master-addr,--master_addr", " (also --master_addr, torchrun's)"};
inline constexpr FlagSpelling kMasterPortSpelling{"--master-port,--master_port", " (also --master_port, torchrun's)"};

// The help text with who else spells the flag so.
inline std::string spelled(std::string_view help, const FlagSpelling& s) { return std::string(help) + s.who; }

// Spellings with one dash and several letters, which CLI11 cannot declare
// (it reads -tp as -t -p): main() rewrites them to our flag before parsing,
// on a command that has that flag (apps/flag_check.h).
struct SingleDashSpelling {
  const char* typed;  // "-tp"
  const char* ours;   // "--tp"
};
inline constexpr SingleDashSpelling kSingleDashSpellings[] = {{"-tp", "--tp"}, {"-dp", "--dp"}};

}  // namespace engram::app
