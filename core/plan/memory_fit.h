// Whether a planned deployment fits the machines' memory, said so that the
// user knows what to change. A KV cache with nothing left is a warning (the
// engine may still start with a smaller cache budget elsewhere); tables that
// do not fit the GPU or the host at all mean the deployment cannot run, and
// that is an error naming the placement and the fix.
#pragma once

#include <optional>
#include <span>

#include "core/base/status.h"
#include "core/base/warnings.h"
#include "core/plan/deployment_plan.h"

namespace engram {

// Key "memory.hbm_exceeded": every host whose GPUs leave nothing for the KV
// cache, alike hosts together (by name, whatever order they came in), the
// figures behind it and what to change; none where every host has some left.
std::optional<Warning> kv_cache_exhausted_warning(std::span<const HostMemory> hosts, const EngineMemory& engine);

// Key "memory.no_request_fits": ranks whose KV cache left (not negative:
// that is memory.hbm_exceeded) holds no token, or, with a context length,
// not one whole request (maximum concurrency 0): the engine starts and
// serves nothing. Needs the model's kv_bytes_per_token; none otherwise.
std::optional<Warning> kv_capacity_warning(std::span<const RankPlan> ranks, const ModelSpec& spec,
                                           const EngineMemory& engine);

// Hosts whose Engram tables fit their RAM but take more than three quarters of
// it (the OS, the engine and its pinned buffers need the rest): one warning,
// key "memory.host_tables_near_ram", naming the placement and the fix.
// Appended to plan.warnings unless its key is there.
void add_host_memory_warnings(PlanResult& plan);

// The memory fit: ok, or resource_exhausted naming every way the deployment
// cannot run: a rank group whose Engram tables and buffer exceed the whole
// GPU; a host whose tables exceed its RAM; a /dev/shm copy beyond what its
// tmpfs enforces (a Kubernetes sizeLimit); a memory limit
// (plan.memory_limits) below what its ranks will hold in their own memory
// (host tables, the /dev/shm pages they write, pinned staging); nothing left
// for the KV cache, unless engine.negative_kv_allowed. Each with the number
// to set. Alike hosts and limits are named in one sentence.
//
// One function for every caller, before anything is allocated: `plan`, the
// scenario runner (after plan_deployment) and the runtime on every rank
// (after deciding from the gathered facts, with the limits the ranks found),
// so all three refuse a deployment with the same text.
Status check_memory_fits(const PlanResult& plan);

// What a host's table bytes are, for errors and the memory verdict: "1
// table copy", "2 table copies", or, with none counted there, table slices
// of copies another host counts (a replica's TP ranks over two hosts count
// its copy at TP rank 0).
std::string host_tables_text(int copies);

// plan_deployment, then check_memory_fits: the plan a runner acts on, or
// the error that refuses it (invalid_argument and failed_precondition from
// the plan, resource_exhausted from the fit). `limits`, where given, stand
// for the deployment's own (the runtime's, as the ranks found them).
Result<PlanResult> plan_that_fits(const Deployment& deployment, WarningSink& sink,
                                  const std::vector<MemoryLimitScope>* limits = nullptr);

// What `plan` shows for a deployment (the command and the Python module):
// its plan with the host-memory warnings added, and whether its tables fit
// (check_memory_fits: ok, or the error shown after the figures behind it).
// An error of planning itself (bad input, an explicit setting that cannot
// work) is the Result's.
struct FitCheckedPlan {
  PlanResult plan;
  Status fits;
};
Result<FitCheckedPlan> plan_with_memory_fit(const Deployment& deployment, WarningSink& sink);

}  // namespace engram
