#include "operator_checks/bench_table.h"

#include "core/model/gpu_models.h"

#include <fmt/format.h>

#include <optional>
#include <string>
#include <vector>

#include "core/base/units.h"

namespace engram::operator_checks {
namespace {

// Whether the reference's figure of size i was timed over this rank's ids
// (both sides' fingerprints of every draw agree).
bool same_ids(const BenchReport& r, const std::optional<OneProcessFigures>& reference, size_t i) {
  return reference && i < reference->points.size() && i < r.ids_fingerprints.size() &&
         reference->points[i].ids_fingerprint == r.ids_fingerprints[i];
}
bool same_ids(const BenchReport& r, size_t i) {
  return same_ids(r, r.reference, i) && (!r.reference_after || same_ids(r, r.reference_after, i));
}

std::optional<LatencyPercentiles> reference_figure(const OneProcessPoint& point, BenchReference reference) {
  switch (reference) {
    case BenchReference::kNone: return std::nullopt;
    case BenchReference::kPeerKernel: return point.peer_kernel;
    case BenchReference::kNcclPath:
      if (point.nccl_path_ran) return point.nccl_path;
      return std::nullopt;
  }
  return std::nullopt;
}

// The one-process figure a placement's runtime lookup is held against (its
// registration says which); none for the host placements (their ceiling is
// the pinned copy), and none where the reference timed other ids (a ratio
// of two row draws is not one of two lookups). With a reference before and
// after the placements (ReferenceOrder::kBoth), the mean of the two: a
// process's later large tables read slower than its first
// (docs/perf_notes.md, "The order of the tables"), and the two bracket the
// runtime's, allocated between them.
std::optional<LatencyPercentiles> one_process_for(const BenchReport& r, Placement p, size_t i) {
  if (!same_ids(r, i)) return std::nullopt;
  const BenchReference kind = placement_ops(p).bench_reference;
  const std::optional<LatencyPercentiles> before = reference_figure(r.reference->points[i], kind);
  if (!before || !r.reference_after) return before;
  const std::optional<LatencyPercentiles> after = reference_figure(r.reference_after->points[i], kind);
  if (!after) return before;
  return LatencyPercentiles{(before->p10_us + after->p10_us) / 2, (before->p50_us + after->p50_us) / 2,
                            (before->p90_us + after->p90_us) / 2};
}

// The reference kernels' names, as the tables write them ("peer kernel").
const char* reference_name(BenchReference reference) {
  switch (reference) {
    case BenchReference::kNone: return "none";
    case BenchReference::kPeerKernel: return "peer kernel";
    case BenchReference::kNcclPath: return "NCCL path";
  }
  return "?";
}

// The placements held against a one-process kernel, in reference order
// (the ratio columns and targets), then registry order.
std::vector<const PlacementOps*> referenced_placements() {
  std::vector<const PlacementOps*> out;
  for (BenchReference ref : {BenchReference::kPeerKernel, BenchReference::kNcclPath})
    for (const PlacementOps& ops : placement_registry())
      if (ops.bench_reference == ref) out.push_back(&ops);
  return out;
}

double gbps(uint64_t bytes, double us) { return us > 0 ? static_cast<double>(bytes) / us / 1e3 : 0; }

std::string us_text(const BenchCell& c) {
  return c.ran ? fmt::format("{:.1f} ({:.1f})", c.latency.p50_us, c.latency_us_p50_slowest_rank) : "n/a";
}

std::string three(const LatencyPercentiles& l) { return fmt::format("{:.1f} / {:.1f} / {:.1f}", l.p10_us, l.p50_us, l.p90_us); }

const BenchPlacementRow* find_row(const BenchReport& r, Placement p) {
  for (const BenchPlacementRow& row : r.placements)
    if (row.placement == p) return &row;
  return nullptr;
}

size_t index_of(const BenchReport& r, int tokens) {
  for (size_t i = 0; i < r.token_counts.size(); ++i)
    if (r.token_counts[i] == tokens) return i;
  return r.token_counts.size();
}

}  // namespace

std::string format_bench_table(const BenchReport& r) {
  std::string out;
  auto line = [&](const std::string& text) { out += text + "\n"; };
  line(fmt::format("engramlab bench: {} rank(s), one process per GPU, tp {} x dp {}; table {} layer {}: {} rows x {} B, "
                   "{} heads, dim {}", r.world_size, r.layout.tp, r.layout.dp, r.table_model, r.layer_id,
                   r.table_rows, r.row_bytes, r.heads, r.dim));
  line(fmt::format("each figure: one device lookup through the runtime per captured graph (DeviceGraph::time), {} "
                   "replays spread over {} draws of ids, {} warm-up before each, every rank at once; the same ids for "
                   "every placement and for the one-process kernels", r.timed_replays, r.id_draws, r.warmup_replays));
  line("");
  line("| placement | asked with | result |");
  line("| --- | --- | --- |");
  for (const BenchPlacementRow& row : r.placements) {
    line(fmt::format("| {} | {} | {} |", placement_name(row.placement), row.asked_with,
                     row.ran ? fmt::format("ran; tables built in {:.1f} s; {} slots equal the CPU reference",
                                           row.build_seconds, row.slots_checked)
                             : "not run: " + row.not_run_reason));
  }

  line("");
  line(r.reference_after ? "p50 us on rank 0 (slowest rank in brackets; one-process figures before / after the "
                           "placements):"
                         : "p50 us on rank 0 (slowest rank in brackets):");
  std::string head = "| tokens |", rule = "| ---: |";
  for (const BenchPlacementRow& row : r.placements) {
    head += fmt::format(" {} |", placement_name(row.placement));
    rule += " ---: |";
  }
  head += " one-process peer kernel | one-process NCCL path | one-process plain kernel | HBM copy | NVLink copy | "
          "pinned host copy |";
  rule += " ---: | ---: | ---: | ---: | ---: | ---: |";
  line(head);
  line(rule);
  for (size_t i = 0; i < r.token_counts.size(); ++i) {
    std::string text = fmt::format("| {} |", r.token_counts[i]);
    for (const BenchPlacementRow& row : r.placements) text += " " + us_text(row.cells[i]) + " |";
    const OneProcessPoint* ref = r.reference && i < r.reference->points.size() ? &r.reference->points[i] : nullptr;
    const OneProcessPoint* after =
        r.reference_after && i < r.reference_after->points.size() ? &r.reference_after->points[i] : nullptr;
    // "before / after" where the reference ran on both sides of the placements.
    auto both = [&](const LatencyPercentiles& b, const LatencyPercentiles* a) {
      return a ? fmt::format(" {:.1f} / {:.1f} |", b.p50_us, a->p50_us) : fmt::format(" {:.1f} |", b.p50_us);
    };
    text += ref ? both(ref->peer_kernel, after ? &after->peer_kernel : nullptr) : " n/a |";
    text += ref && ref->nccl_path_ran ? both(ref->nccl_path, after && after->nccl_path_ran ? &after->nccl_path : nullptr)
                                      : " n/a |";
    text += ref ? both(ref->plain_kernel, after ? &after->plain_kernel : nullptr) : " n/a |";
    const BenchCeilings& c = r.ceilings[i];
    text += " " + us_text(c.hbm_copy) + " |";
    text += ref && ref->nvlink_copy_ran ? fmt::format(" {:.1f} |", ref->nvlink_copy.p50_us) : " n/a |";
    text += " " + us_text(c.pinned_host_copy) + " |";
    line(text);
  }

  line("");
  const std::vector<const PlacementOps*> referenced = referenced_placements();
  std::string versus, ratio_head = "| tokens |", ratio_rule = "| ---: |";
  for (const PlacementOps* ops : referenced) {
    versus +=
        fmt::format("{}{} vs the {}", versus.empty() ? "" : ", ", ops->name, reference_name(ops->bench_reference));
    ratio_head += fmt::format(" {} |", ops->name);
    ratio_rule += " ---: |";
  }
  // Like with like only where the reference read a table of the runtime's
  // rows and row size (bench --reference-gib table, the default).
  std::string tables = "same table";
  if (r.reference && (r.reference->table_rows != r.table_rows || r.reference->row_bytes != r.row_bytes))
    tables = fmt::format("UNLIKE tables: the reference's {} rows x {} B, the runtime's {} rows x {} B",
                         r.reference->table_rows, r.reference->row_bytes, r.table_rows, r.row_bytes);
  std::string other_ids;
  for (size_t i = 0; r.reference && i < r.token_counts.size(); ++i)
    if (!same_ids(r, i)) other_ids += fmt::format(" {}", r.token_counts[i]);
  tables += other_ids.empty() ? ", same ids" : "; OTHER ids (no ratio) at tokens" + other_ids;
  if (r.reference_after) tables += "; the one-process figure is the mean of the runs before and after the placements";
  line(fmt::format("runtime / one-process, p50 on rank 0's GPU ({}; {}):", versus, tables));
  line(ratio_head);
  line(ratio_rule);
  for (size_t i = 0; i < r.token_counts.size(); ++i) {
    std::string text = fmt::format("| {} |", r.token_counts[i]);
    for (const PlacementOps* ops : referenced) {
      const BenchPlacementRow* row = find_row(r, ops->id);
      const auto ref = one_process_for(r, ops->id, i);
      text += row && row->cells[i].ran && ref ? fmt::format(" {:.2f}x |", row->cells[i].latency.p50_us / ref->p50_us)
                                              : " n/a |";
    }
    line(text);
  }

  line("");
  line("host reads beside the pinned host-to-device copy (effective GB/s = rows read / slowest rank's p50):");
  std::string host_head = "| tokens | read bytes |", host_rule = "| ---: | ---: |";
  for (const PlacementOps& ops : placement_registry()) {
    if (ops.needs_device) continue;
    host_head += fmt::format(" {} GB/s |", ops.name);
    host_rule += " ---: |";
  }
  line(host_head + " pinned copy GB/s |");
  line(host_rule + " ---: |");
  for (size_t i = 0; i < r.token_counts.size(); ++i) {
    const BenchCeilings& c = r.ceilings[i];
    std::string text = fmt::format("| {} | {} |", r.token_counts[i], format_bytes(c.read_bytes));
    for (const PlacementOps& ops : placement_registry()) {
      if (ops.needs_device) continue;
      const BenchPlacementRow* row = find_row(r, ops.id);
      text += row && row->cells[i].ran
                  ? fmt::format(" {:.1f} |", gbps(c.read_bytes, row->cells[i].latency_us_p50_slowest_rank))
                  : " n/a |";
    }
    text += c.pinned_host_copy.ran ? fmt::format(" {:.1f} |", gbps(c.read_bytes, c.pinned_host_copy.latency_us_p50_slowest_rank))
                                   : " n/a |";
    line(text);
  }

  line("");
  line("p10 / p50 / p90 us on rank 0:");
  line("| placement | tokens | p10 / p50 / p90 | slowest rank p50 |");
  line("| --- | ---: | ---: | ---: |");
  for (const BenchPlacementRow& row : r.placements) {
    if (!row.ran) continue;
    for (size_t i = 0; i < r.token_counts.size(); ++i)
      line(fmt::format("| {} | {} | {} | {:.1f} |", placement_name(row.placement), r.token_counts[i],
                       three(row.cells[i].latency), row.cells[i].latency_us_p50_slowest_rank));
  }

  // The acceptance targets (2 x H200), as measured in this run.
  line("");
  line("targets (2 x H200 acceptance):");
  auto ratio_target = [&](Placement p, const std::string& what) {
    std::string measured;
    bool any = false, met = true;
    for (int t : {1, 64, 1024, 8192}) {
      const size_t i = index_of(r, t);
      const BenchPlacementRow* row = find_row(r, p);
      if (i >= r.token_counts.size() || row == nullptr || !row->cells[i].ran) continue;
      const auto ref = one_process_for(r, p, i);
      if (!ref) continue;
      const double x = row->cells[i].latency.p50_us / ref->p50_us;
      any = true;
      met = met && x <= 1.05;
      measured += fmt::format(" {}: {:.2f}x;", t, x);
    }
    line(fmt::format("  {} within 1.05x of {} at 1, 64, 1024, 8192 tokens: {}", placement_name(p), what,
                     !any ? "not measured" : (met ? "MET (" : "NOT MET (") + measured + ")"));
  };
  for (const PlacementOps* ops : referenced)
    ratio_target(ops->id, fmt::format("the one-process {}", reference_name(ops->bench_reference)));
  for (const PlacementOps& ops : placement_registry()) {
    if (ops.bench_pinned_copy_share_min <= 0) continue;
    const std::string target = fmt::format("  {} at 8192 tokens >= {:.0f}% of the pinned copy's rate:", ops.name,
                                           100 * ops.bench_pinned_copy_share_min);
    const size_t i = index_of(r, 8192);
    const BenchPlacementRow* row = find_row(r, ops.id);
    if (i < r.token_counts.size() && row && row->cells[i].ran && r.ceilings[i].pinned_host_copy.ran) {
      const double share = r.ceilings[i].pinned_host_copy.latency_us_p50_slowest_rank /
                           row->cells[i].latency_us_p50_slowest_rank;
      line(fmt::format("{} {} ({:.0f}%)", target, share >= ops.bench_pinned_copy_share_min ? "MET" : "NOT MET",
                       100 * share));
    } else {
      line(target + " not measured");
    }
  }

  if (r.reference) {
    line("");
    line(fmt::format("one-process reference: rank 0's GPU ({}) alone, the kernels timed straight over one local "
                     "table of {} rows x {} B (V4.1 rows, {} heads); the NVLink copy reads the next visible GPU",
                     r.reference->device_name, r.reference->table_rows, r.reference->row_bytes, r.heads));
    for (const std::string& n : r.reference->notes) line("note: " + n);
  }
  for (const std::string& n : r.notes) line("note: " + n);
  return out;
}

std::string format_bench_csv(const BenchReport& r) {
  std::string csv =
      "series,tokens_per_rank,latency_us_p10,latency_us_p50,latency_us_p90,latency_us_p50_slowest_rank,read_bytes,"
      "effective_gbps,one_process_us_p50,runtime_over_one_process,note,gpu_model,ranks,group_size,table_bytes,heads\n";
  // What the step model's calibration needs of the run (plan --calibration,
  // core/plan/step_calibration.h): the GPU model (from rank 0's device name,
  // where the reference ran), the ranks (the placements' group), the table.
  const std::string gpu = r.reference ? gpu_model_of_device_name(r.reference->device_name) : std::string("unknown");
  const std::string run = fmt::format(",{},{},{},{},{}", gpu, r.world_size, r.world_size,
                                      static_cast<uint64_t>(r.table_rows) * r.row_bytes, r.heads);
  // The one-process kernels and copies run on rank 0's GPU alone over one local table.
  const std::string alone = r.reference ? fmt::format(",{},1,1,{},{}", gpu,
                                                      static_cast<uint64_t>(r.reference->table_rows) *
                                                          r.reference->row_bytes,
                                                      r.heads)
                                        : run;
  auto quoted = [](std::string text) {
    std::string q = "\"";
    for (char c : text) q += c == '"' ? std::string("\"\"") : std::string(1, c);
    return q + "\"";
  };
  auto add = [&](const std::string& series, size_t i, const LatencyPercentiles& l, double slowest,
                 std::optional<LatencyPercentiles> ref, const std::string& where) {
    const uint64_t bytes = r.ceilings[i].read_bytes;
    csv += fmt::format("{},{},{:.3f},{:.3f},{:.3f},{:.3f},{},{:.3f},{},{},{}\n", series, r.token_counts[i], l.p10_us,
                       l.p50_us, l.p90_us, slowest, bytes, gbps(bytes, slowest),
                       ref ? fmt::format("{:.3f}", ref->p50_us) : "",
                       ref ? fmt::format("{:.4f}", l.p50_us / ref->p50_us) : "", where);
  };
  for (const BenchPlacementRow& row : r.placements) {
    if (!row.ran) {
      csv += fmt::format("{},,,,,,,,,,{}{}\n", placement_name(row.placement), quoted("not run: " + row.not_run_reason),
                         run);
      continue;
    }
    for (size_t i = 0; i < r.token_counts.size(); ++i)
      add(placement_name(row.placement), i, row.cells[i].latency, row.cells[i].latency_us_p50_slowest_rank,
          one_process_for(r, row.placement, i), run);
  }
  for (size_t i = 0; i < r.token_counts.size(); ++i) {
    const BenchCeilings& c = r.ceilings[i];
    if (c.hbm_copy.ran)
      add("ceiling_hbm_copy", i, c.hbm_copy.latency, c.hbm_copy.latency_us_p50_slowest_rank, {}, alone);
    if (c.pinned_host_copy.ran)
      add("ceiling_pinned_host_copy", i, c.pinned_host_copy.latency, c.pinned_host_copy.latency_us_p50_slowest_rank, {},
          alone);
    if (!r.reference || i >= r.reference->points.size()) continue;
    const OneProcessPoint& p = r.reference->points[i];
    if (p.nvlink_copy_ran) add("ceiling_nvlink_copy", i, p.nvlink_copy, p.nvlink_copy.p50_us, {}, alone);
    add("one_process_peer_kernel", i, p.peer_kernel, p.peer_kernel.p50_us, {}, alone);
    add("one_process_plain_kernel", i, p.plain_kernel, p.plain_kernel.p50_us, {}, alone);
    if (p.nccl_path_ran) add("one_process_nccl_path", i, p.nccl_path, p.nccl_path.p50_us, {}, alone);
    if (!r.reference_after || i >= r.reference_after->points.size()) continue;
    const OneProcessPoint& after = r.reference_after->points[i];
    add("one_process_peer_kernel_after", i, after.peer_kernel, after.peer_kernel.p50_us, {}, alone);
    add("one_process_plain_kernel_after", i, after.plain_kernel, after.plain_kernel.p50_us, {}, alone);
    if (after.nccl_path_ran)
      add("one_process_nccl_path_after", i, after.nccl_path, after.nccl_path.p50_us, {}, alone);
  }
  return csv;
}

LogLogPlot bench_plot(const BenchReport& r) {
  LogLogPlot plot;
  plot.title = fmt::format("Engram lookup through the runtime, {} rank(s), tp {} x dp {}", r.world_size, r.layout.tp,
                           r.layout.dp);
  plot.x_label = "tokens per rank";
  plot.y_label = "median latency per lookup, slowest rank (us)";
  const char* colors[] = {"#d62728", "#1f77b4", "#9467bd", "#8c564b", "#e377c2"};
  size_t color = 0;
  for (const BenchPlacementRow& row : r.placements) {
    const char* c = colors[color++ % std::size(colors)];
    if (!row.ran) continue;
    PlotSeries s{placement_name(row.placement), c, false, {}};
    for (size_t i = 0; i < r.token_counts.size(); ++i)
      if (row.cells[i].ran && row.cells[i].latency_us_p50_slowest_rank > 0)
        s.points.emplace_back(r.token_counts[i], row.cells[i].latency_us_p50_slowest_rank);
    if (!s.points.empty()) plot.series.push_back(std::move(s));
  }
  auto dashed = [&](const char* name, const char* c, auto value) {
    PlotSeries s{name, c, true, {}};
    for (size_t i = 0; i < r.token_counts.size(); ++i)
      if (const std::optional<double> v = value(i); v && *v > 0) s.points.emplace_back(r.token_counts[i], *v);
    if (!s.points.empty()) plot.series.push_back(std::move(s));
  };
  auto ref = [&](size_t i) -> const OneProcessPoint* {
    return r.reference && i < r.reference->points.size() ? &r.reference->points[i] : nullptr;
  };
  dashed("one-process peer kernel", "#1f77b4", [&](size_t i) -> std::optional<double> {
    if (const auto* p = ref(i)) return p->peer_kernel.p50_us;
    return std::nullopt;
  });
  dashed("one-process NCCL path", "#d62728", [&](size_t i) -> std::optional<double> {
    if (const auto* p = ref(i); p && p->nccl_path_ran) return p->nccl_path.p50_us;
    return std::nullopt;
  });
  dashed("HBM copy", "#555555", [&](size_t i) -> std::optional<double> {
    if (r.ceilings[i].hbm_copy.ran) return r.ceilings[i].hbm_copy.latency_us_p50_slowest_rank;
    return std::nullopt;
  });
  dashed("NVLink copy", "#2ca02c", [&](size_t i) -> std::optional<double> {
    if (const auto* p = ref(i); p && p->nvlink_copy_ran) return p->nvlink_copy.p50_us;
    return std::nullopt;
  });
  dashed("pinned host-to-device copy", "#ff7f0e", [&](size_t i) -> std::optional<double> {
    if (r.ceilings[i].pinned_host_copy.ran) return r.ceilings[i].pinned_host_copy.latency_us_p50_slowest_rank;
    return std::nullopt;
  });
  return plot;
}

}  // namespace engram::operator_checks
