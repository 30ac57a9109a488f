// The collective lookup path (all-gather ids, zero-fill, gather_owned,
// reduce-scatter) timed two ways on 2 GPUs: both GPUs driven by one process
// (ncclCommInitAll, as `engramlab bench` does) and one process per GPU
// (ncclCommInitRank, as deployed engines run). Same graphs, same timing
// (spin ahead, events around each replay, median on GPU 0). Prints a table.
#include <cuda_runtime.h>
#include <nccl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include "benchmarks/probe_support.cuh"
#include "operator_checks/bench_kernels.h"
#include "kernels/gather_kernels.h"

namespace {

int replays = 200;  // set from the command line before any child is forked
constexpr int kHeads = 24;
constexpr uint64_t kShardBytes = 8ull << 30;
constexpr int64_t kRowsPerShard = static_cast<int64_t>(kShardBytes / 264);
const int64_t kTokens[] = {1, 16, 64, 256, 1024, 8192};

#define CK(x) engram::probe::check((x), #x)
#define NK(x) check_nccl((x), #x)
void check_nccl(ncclResult_t e, const char* what) {
  if (e != ncclSuccess) { std::fprintf(stderr, "nccl_process_probe: %s: %s\n", what, ncclGetErrorString(e)); std::exit(1); }
}
void check_status(const engram::Status& s, const char* what) { engram::probe::check(s, what); }

// One GPU's buffers and its part of the lookup.
struct Rank {
  int gpu = 0;
  int rank = 0;
  int size = 2;
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  uint8_t* shard = nullptr;
  int64_t *ids = nullptr, *all_ids = nullptr;
  uint16_t *owned = nullptr, *result = nullptr;

  void setup() {
    CK(cudaSetDevice(gpu));
    CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    CK(cudaMalloc(&shard, kShardBytes));
    engram::operator_checks::ShardFillArgs fill;
    fill.shard = shard;
    fill.first_row = rank * kRowsPerShard;
    fill.rows = kRowsPerShard;
    fill.row_bytes = 264;
    fill.dim = 256;
    fill.seed = 7;
    check_status(engram::operator_checks::fill_shard(fill, stream), "fill");
    const int64_t max_slots = 8192 * kHeads;
    CK(cudaMalloc(&ids, max_slots * 8));
    CK(cudaMalloc(&all_ids, max_slots * 8 * size));
    CK(cudaMalloc(&owned, max_slots * 512 * size));
    CK(cudaMalloc(&result, max_slots * 512));
    CK(cudaStreamSynchronize(stream));
  }
  void set_ids(int64_t tokens) {
    std::vector<int64_t> host(tokens * kHeads);
    uint64_t x = 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(tokens + 7 * rank);
    for (auto& id : host) {
      x ^= x << 13; x ^= x >> 7; x ^= x << 17;
      id = static_cast<int64_t>(x % static_cast<uint64_t>(size * kRowsPerShard));
    }
    CK(cudaSetDevice(gpu));
    CK(cudaMemcpy(ids, host.data(), host.size() * 8, cudaMemcpyHostToDevice));
  }
  // Enqueues on `stream`; for several ranks in one process, call inside a
  // ncclGroupStart/End per collective (enqueue_group below).
  void all_gather(int64_t slots) { NK(ncclAllGather(ids, all_ids, slots, ncclInt64, comm, stream)); }
  void gather(int64_t tokens) {
    CK(cudaSetDevice(gpu));
    const int64_t slots = tokens * kHeads;
    check_status(engram::kernels::zero_fill(owned, slots * 256 * size, stream), "zero");
    engram::kernels::GatherOwnedArgs a;
    a.ids = all_ids;
    a.tokens = tokens * size;
    a.heads = kHeads;
    a.shard_begin = rank * kRowsPerShard;
    a.shard_end = (rank + 1) * kRowsPerShard;
    a.shard_base = shard;
    a.layout.format = engram::RowFormat::kFp8E4M3Ue8m0;
    a.layout.dim = 256;
    a.layout.row_bytes = 264;
    a.out = owned;
    check_status(engram::kernels::gather_owned(a, stream), "gather_owned");
  }
  void reduce_scatter(int64_t slots) {
    NK(ncclReduceScatter(owned, result, slots * 256, ncclBfloat16, ncclSum, comm, stream));
  }
};

void enqueue(std::vector<Rank*>& ranks, int64_t tokens) {
  const int64_t slots = tokens * kHeads;
  NK(ncclGroupStart());
  for (Rank* r : ranks) { CK(cudaSetDevice(r->gpu)); r->all_gather(slots); }
  NK(ncclGroupEnd());
  for (Rank* r : ranks) r->gather(tokens);
  NK(ncclGroupStart());
  for (Rank* r : ranks) { CK(cudaSetDevice(r->gpu)); r->reduce_scatter(slots); }
  NK(ncclGroupEnd());
}

// Captures one lookup per rank of this process, times `replays` replays on
// ranks[0]'s GPU (if it is GPU 0, prints), for every size.
void run(std::vector<Rank*>& ranks, const char* mode) {
  std::vector<int> devices;
  std::vector<cudaStream_t> streams;
  for (Rank* r : ranks) {
    devices.push_back(r->gpu);
    streams.push_back(r->stream);
  }
  for (int64_t tokens : kTokens) {
    for (Rank* r : ranks) r->set_ids(tokens);
    std::vector<cudaGraph_t> graphs(ranks.size());
    std::vector<cudaGraphExec_t> execs(ranks.size());
    // All captures open together, so the NCCL groups spanning this process's
    // GPUs are captured too.
    for (Rank* r : ranks) { CK(cudaSetDevice(r->gpu)); CK(cudaStreamBeginCapture(r->stream, cudaStreamCaptureModeRelaxed)); }
    enqueue(ranks, tokens);
    for (size_t i = 0; i < ranks.size(); ++i) {
      CK(cudaSetDevice(ranks[i]->gpu));
      CK(cudaStreamEndCapture(ranks[i]->stream, &graphs[i]));
      CK(cudaGraphInstantiate(&execs[i], graphs[i], 0));
    }
    const std::vector<double> us = engram::probe::time_replays(
        devices, streams, replays, [&](size_t i) { CK(cudaGraphLaunch(execs[i], streams[i])); });
    if (ranks[0]->gpu == 0) {
      std::printf("| %s | %lld | %.1f / %.1f / %.1f |\n", mode, static_cast<long long>(tokens), us[us.size() / 10],
                  us[us.size() / 2], us[us.size() * 9 / 10]);
      std::fflush(stdout);
    }
    for (size_t i = 0; i < ranks.size(); ++i) {
      CK(cudaSetDevice(ranks[i]->gpu));
      cudaGraphExecDestroy(execs[i]);
      cudaGraphDestroy(graphs[i]);
    }
  }
}

int one_process() {
  int devices[2] = {0, 1};
  ncclComm_t comms[2];
  NK(ncclCommInitAll(comms, 2, devices));
  Rank r0, r1;
  r0.gpu = 0; r0.rank = 0; r0.comm = comms[0];
  r1.gpu = 1; r1.rank = 1; r1.comm = comms[1];
  r0.setup();
  r1.setup();
  std::vector<Rank*> ranks{&r0, &r1};
  run(ranks, "one process, both GPUs");
  ncclCommDestroy(comms[0]);
  ncclCommDestroy(comms[1]);
  return 0;
}

int process_rank(int rank, int id_pipe[2]) {
  ncclUniqueId id;
  if (rank == 0) {
    NK(ncclGetUniqueId(&id));
    if (write(id_pipe[1], &id, sizeof(id)) != static_cast<ssize_t>(sizeof(id))) return 1;
  } else {
    if (read(id_pipe[0], &id, sizeof(id)) != static_cast<ssize_t>(sizeof(id))) return 1;
  }
  Rank r;
  r.gpu = rank;
  r.rank = rank;
  CK(cudaSetDevice(rank));
  NK(ncclCommInitRank(&r.comm, 2, id, rank));
  r.setup();
  std::vector<Rank*> ranks{&r};
  run(ranks, "one process per GPU");
  ncclCommDestroy(r.comm);
  return 0;
}

int wait_all(const std::vector<pid_t>& pids) {
  int failed = 0;
  for (pid_t p : pids) {
    int status = 0;
    waitpid(p, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) failed = 1;
  }
  return failed;
}

}  // namespace

int main(int argc, char** argv) {
  engram::probe::probe_name() = "nccl_process_probe";
  replays = engram::probe::replays_from_args(argc, argv, 200);
  // No CUDA in this process: every measurement runs in children.
  setenv("NCCL_NVLS_ENABLE", "0", 0);
  std::printf("| mode | tokens | collective p10 / p50 / p90 us |\n| --- | ---: | ---: |\n");
  std::fflush(stdout);
  int failed = 0;
  {
    pid_t p = fork();
    if (p == 0) _exit(one_process());
    failed |= wait_all({p});
  }
  {
    int id_pipe[2];
    if (pipe(id_pipe) != 0) return 1;
    std::vector<pid_t> pids;
    for (int rank = 0; rank < 2; ++rank) {
      pid_t p = fork();
      if (p == 0) _exit(process_rank(rank, id_pipe));
      pids.push_back(p);
    }
    failed |= wait_all(pids);
  }
  return failed;
}
