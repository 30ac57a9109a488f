// What `engramlab bench` prints and writes from rank 0's report
// (operator_checks/bench_rank.h): the table (every placement, run or with the reason
// it did not), the ratios to the one-process kernels, the host reads beside
// the pinned copy, the targets; the CSV; the log-log plot.
#pragma once

#include <string>

#include "operator_checks/latency_svg.h"
#include "operator_checks/bench_rank.h"

namespace engram::operator_checks {

std::string format_bench_table(const BenchReport& report);

// One line per (series, token count): placements that ran, the ceilings and
// the one-process figures; a placement that did not run is one line with its
// reason in `note`. Header:
// series,tokens_per_rank,latency_us_p10,latency_us_p50,latency_us_p90,latency_us_p50_slowest_rank,read_bytes,
// effective_gbps,one_process_us_p50,runtime_over_one_process,note
std::string format_bench_csv(const BenchReport& report);

// p50 (slowest rank) against tokens per rank: every placement that ran, the
// one-process kernels, the ceilings.
LogLogPlot bench_plot(const BenchReport& report);

}  // namespace engram::operator_checks
