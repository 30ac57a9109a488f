// engramlab.EngramTables: one rank's tables built through the runtime
// (core/runtime/engram_runtime.h) inside a launched job (torchrun's
// environment, engramlab's own rendezvous: backends/ranks/launched_rank_backend.h),
// and its lookup on tensors taken through DLPack.
//
// A rank with a GPU looks up CUDA tensors on its GPU, enqueued on the
// caller's stream with nothing allocated or synchronised, so the call can be
// captured in a torch CUDA graph. A rank without one (no GPU visible, or a
// build without CUDA) runs the runtime's host lookup on CPU tensors: the host
// placements work there; a device placement is refused by the runtime when
// the tables are built, naming why.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <pybind11/stl.h>  // std::optional and std::vector arguments

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "backends/ipc/launch_env.h"
#include "core/deployment/shard_groups.h"
#include "core/engines/engine_profile.h"
#include "core/lookup/device_lookup.h"
#include "core/runtime/engram_runtime.h"
#include "backends/ranks/launched_rank_backend.h"
#include "python/arguments.h"
#include "python/dlpack_tensor.h"
#include "python/errors.h"
#include "python/json_objects.h"
#include "python/module_parts.h"

namespace engram::python {
namespace {

using namespace pybind11::literals;

struct TablesArguments {
  std::string model;
  std::optional<std::string> table_model;
  int tp = 0;
  int dp = 1;
  bool cpu_offload = false;
  bool peer_shards = false;
  std::optional<bool> dp_shared_memory;
  std::string shard_group = "world";
  int tokens_per_rank_max = 1024;
  uint64_t fill_seed = 1;
  int ranks_per_gpu = 1;
  std::string engine = "engramlab";
};

Result<RuntimeOptions> runtime_options(const TablesArguments& a, const ipc::LaunchEnv& env) {
  RuntimeOptions o;
  ENGRAM_ASSIGN_OR_RETURN(o.layout, ranks::launched_layout(a.tp, a.dp, env.world_size, "tp", "dp"));
  o.placement_model = a.model;
  ENGRAM_ASSIGN_OR_RETURN(const EngineChoice engine, parse_engine_choice(a.engine, "engine"));
  o.engine.profile = engine.id;
  o.engine.variant = engine.variant;
  ENGRAM_ASSIGN_OR_RETURN(o.table_model, model_preset(a.table_model.value_or(a.model)));
  o.config.cpu_offload = a.cpu_offload;
  o.config.cpu_offload_given = true;  // the argument's value, whatever the engine's default
  o.config.peer_shards = a.peer_shards;
  o.config.dp_shared_memory = a.dp_shared_memory;
  const std::optional<ShardGroup> group = shard_group_from_name(a.shard_group);
  if (!group)
    return invalid_argument(
        fmt::format("shard_group: '{}' is not a shard group; give {}", a.shard_group, shard_group_choices()));
  o.config.shard_group = *group;
  if (a.tokens_per_rank_max < 1 || a.tokens_per_rank_max > kMaxTokensPerRank)
    return invalid_argument(fmt::format("tokens_per_rank_max: {} is not a token count; give 1 to {}",
                                        a.tokens_per_rank_max, kMaxTokensPerRank));
  o.config.tokens_per_rank_max = a.tokens_per_rank_max;
  o.fill_seed = a.fill_seed;
  o.job_id = env.job_id;
  o.shm_name_part = env.shm_name_part;
  return o;
}

class EngramTables {
 public:
  explicit EngramTables(const TablesArguments& arguments) {
    if (arguments.ranks_per_gpu < 1 || arguments.ranks_per_gpu > kMaxRanksPerGpu)
      raise_status(invalid_argument(fmt::format("ranks_per_gpu: {}; give 1 (a GPU per rank) to {}",
                                                arguments.ranks_per_gpu, kMaxRanksPerGpu)));
    auto env = ipc::read_launch_env(ipc::process_env());
    if (!env.is_ok())
      raise_status(Status(env.status().code(),
                          env.status().message() +
                              "; EngramTables is one rank of a job: start the script under torchrun "
                              "(torchrun --nproc-per-node N script.py), engramlab launch, srun or mpirun, with "
                              "ENGRAMLAB_JOB_TOKEN exported"));
    env_ = env.value();
    options_ = value_or_raise(runtime_options(arguments, env_));
    Status started;
    {
      py::gil_scoped_release unlocked;  // the rendezvous waits for every rank; the table fill takes a while
      started = start(arguments.ranks_per_gpu);
    }
    ok_or_raise(started);
    facts_ = runtime_->facts();
    gpu_ordinal_ = rank_->gpu_ordinal();
    gpu_none_reason_ = rank_->gpu_none_reason();
  }

  std::string placement() const { return placement_name(facts_.placement); }
  int rank() const { return env_.rank; }
  int world_size() const { return env_.world_size; }
  std::string device() const { return gpu_ordinal_ >= 0 ? fmt::format("cuda:{}", gpu_ordinal_) : std::string("cpu"); }
  int tokens_per_rank_max() const { return options_.config.tokens_per_rank_max; }

  py::list layers() const {
    py::list out;
    for (const TableSpec& t : options_.table_model.tables) out.append(t.layer_id);
    return out;
  }

  py::tuple output_shape(int tokens, std::optional<int> layer) const {
    const TableSpec& t = options_.table_model.tables[static_cast<size_t>(table_index(layer))];
    return py::make_tuple(tokens, t.head_count(), t.dim);
  }

  py::dict facts() const {
    const RuntimeFacts& f = facts_;
    return py::dict("placement"_a = placement_name(f.placement), "reason"_a = text_object(f.reason),
                    "handle_type"_a = f.handle_type ? py::object(py::str(handle_type_name(*f.handle_type)))
                                                    : py::object(py::none()),
                    "node_local_group_size"_a = f.node_local_group_size, "host_index"_a = f.host_index,
                    "host_count"_a = f.host_count, "device_bytes"_a = f.device_bytes, "host_bytes"_a = f.host_bytes,
                    "shared_host_bytes"_a = f.shared_host_bytes, "ranks_share_gpus"_a = f.ranks_share_gpus,
                    "rows_summed"_a = f.rows_summed);
  }

  py::list warnings() const {
    py::list out;
    for (const Warning& w : sink_.warnings())
      out.append(py::dict("key"_a = text_object(w.key), "text"_a = text_object(w.text)));
    return out;
  }

  void lookup(py::handle row_ids_arg, py::handle out_arg, py::handle stream_arg, std::optional<int> layer) {
    const int t = table_index(layer);
    const TableSpec& table = options_.table_model.tables[static_cast<size_t>(t)];
    const int ordinal = gpu_ordinal_;
    const dlpack::Device want = ordinal >= 0 ? dlpack::Device{dlpack::kCuda, ordinal} : dlpack::Device{dlpack::kCpu, 0};
    std::optional<uintptr_t> stream;
    if (ordinal >= 0) {
      stream = stream_argument(stream_arg, ordinal);
    } else if (!stream_arg.is_none()) {
      throw py::value_error(fmt::format("stream: this rank has no GPU ({}), so its lookup runs on the CPU; give "
                                        "stream=None",
                                        gpu_none_reason_));
    }
    require_device(row_ids_arg, "row_ids", want);
    require_device(out_arg, "out", want);
    const DlpackTensor ids = DlpackTensor::take(row_ids_arg, "row_ids", stream);
    const DlpackTensor out = DlpackTensor::take(out_arg, "out", stream);
    ids.require_dtype({kInt64}, "int64 row ids (torch.int64: .long())");
    out.require_dtype({kBfloat16, kInt16, kUint16}, "bfloat16 (or its bits as int16 / uint16)");
    const std::vector<int64_t> ids_shape = ids.shape();
    if (ids_shape.size() != 2 || ids_shape[1] != table.head_count())
      throw py::value_error(fmt::format("row_ids: shape ({}); give [tokens, {}]: layer {} has {} heads",
                                        fmt::join(ids_shape, ", "), table.head_count(), table.layer_id,
                                        table.head_count()));
    const int64_t tokens = ids_shape[0];
    const std::vector<int64_t> out_shape = out.shape();
    const bool three_d = out_shape == std::vector<int64_t>{tokens, table.head_count(), table.dim};
    const bool two_d = out_shape == std::vector<int64_t>{tokens, int64_t{table.head_count()} * table.dim};
    if (!three_d && !two_d)
      throw py::value_error(fmt::format("out: shape ({}); give [{}, {}, {}] (tokens, heads, dim) or [{}, {}]",
                                        fmt::join(out_shape, ", "), tokens, table.head_count(), table.dim, tokens,
                                        int64_t{table.head_count()} * table.dim));
    ids.require_contiguous();
    out.require_contiguous();

    Status looked_up;
    {
      py::gil_scoped_release unlocked;  // a host lookup waits on the group's other ranks
      std::lock_guard<std::mutex> lock(mutex_);
      if (!runtime_) {
        looked_up = failed_precondition("EngramTables.lookup: the tables are closed");
      } else if (ordinal >= 0) {
        DeviceLookupRequest request;
        request.row_ids = ids.address();
        request.tokens = tokens;
        request.tokens_per_rank_max = options_.config.tokens_per_rank_max;
        request.output = out.address();
        request.stream = StreamRef{*stream};
        looked_up = runtime_->lookup_device(t, request);
      } else {
        const auto* id_values = reinterpret_cast<const int64_t*>(ids.address());
        auto* out_values = reinterpret_cast<uint16_t*>(out.address());
        looked_up = runtime_->lookup(t, {id_values, static_cast<size_t>(ids.element_count())},
                                     options_.config.tokens_per_rank_max,
                                     {out_values, static_cast<size_t>(out.element_count())});
      }
    }
    ok_or_raise(looked_up);
  }

  void close() {
    Status stopped;
    {
      py::gil_scoped_release unlocked;  // collective: waits for every rank
      std::lock_guard<std::mutex> lock(mutex_);
      if (runtime_) stopped = runtime_->stop();
      runtime_.reset();
      rank_.reset();
    }
    ok_or_raise(stopped);
  }

 private:
  Status start(int ranks_per_gpu) {
    ENGRAM_ASSIGN_OR_RETURN(rank_, ranks::LaunchedRankBackend::create(env_, ranks_per_gpu, sink_));
    ENGRAM_ASSIGN_OR_RETURN(runtime_, EngramRuntime::start(rank_->backend(), options_, sink_));
    return Status::ok();
  }

  int table_index(std::optional<int> layer) const {
    const ModelSpec& model = options_.table_model;
    if (layer) return value_or_raise(table_index_of_layer(model, *layer, "layer"));
    if (model.tables.size() == 1) return 0;
    std::string layers;
    for (const TableSpec& t : model.tables) layers += fmt::format("{}{}", layers.empty() ? "" : ", ", t.layer_id);
    raise_status(invalid_argument(
        fmt::format("layer: model {} has {} Engram layers ({}); say which with layer=", model.name,
                    model.tables.size(), layers)));
  }

  // The stream the lookup is enqueued on: a torch.cuda.Stream (or anything
  // with .cuda_stream), a cudaStream_t as an int, or None for torch's current
  // stream on this rank's GPU (the legacy default stream without torch).
  static uintptr_t stream_argument(py::handle stream, int ordinal) {
    if (stream.is_none()) {
      const py::dict modules = py::module_::import("sys").attr("modules");
      if (!modules.contains("torch")) return 0;
      return modules["torch"].attr("cuda").attr("current_stream")(ordinal).attr("cuda_stream").cast<uintptr_t>();
    }
    if (py::isinstance<py::int_>(stream)) {
      if (stream.cast<py::int_>() < py::int_(0)) throw py::value_error("stream: a negative number is no stream");
      return stream.cast<uintptr_t>();
    }
    if (py::hasattr(stream, "cuda_stream")) {
      if (py::hasattr(stream, "device_index") && !stream.attr("device_index").is_none() &&
          stream.attr("device_index").cast<int>() != ordinal)
        throw py::value_error(fmt::format("stream: a stream of cuda:{}, but this rank looks up on cuda:{}; give one "
                                          "of cuda:{}",
                                          stream.attr("device_index").cast<int>(), ordinal, ordinal));
      return stream.attr("cuda_stream").cast<uintptr_t>();
    }
    throw py::type_error(fmt::format("stream: a {}; give a torch.cuda.Stream, a cudaStream_t as an int, or None for "
                                     "torch's current stream",
                                     py::type::of(stream).attr("__name__").cast<std::string>()));
  }

  void require_device(py::handle tensor, const char* name, dlpack::Device want) const {
    const dlpack::Device got = tensor_device(tensor, name);
    if (got.device_type == want.device_type && got.device_id == want.device_id) return;
    if (want.device_type == dlpack::kCpu)
      throw py::value_error(fmt::format("{}: a tensor on {}, but this rank has no GPU ({}) and looks up on the CPU; "
                                        "pass {}.cpu()",
                                        name, device_text(got), gpu_none_reason_, name));
    throw py::value_error(fmt::format("{}: a tensor on {}, but this rank looks up on its GPU {}; pass "
                                      "{}.to('{}')",
                                      name, device_text(got), device_text(want), name, device_text(want)));
  }

  std::mutex mutex_;  // lookup and close from several threads: guards runtime_ and rank_
  ipc::LaunchEnv env_;
  RuntimeFacts facts_;    // what start decided, kept past close()
  int gpu_ordinal_ = -1;  // the rank's GPU (-1: none)
  std::string gpu_none_reason_;
  RuntimeOptions options_;
  WarningSink sink_;
  std::unique_ptr<ranks::LaunchedRankBackend> rank_;
  std::unique_ptr<EngramRuntime> runtime_;  // declared last: stopped before the rank it runs on goes
};

}  // namespace

void add_engram_tables(py::module_& m) {
  py::class_<EngramTables>(m, "EngramTables", R"(One rank's Engram tables, built through the runtime inside a
launched job: torchrun (or engramlab launch, srun, mpirun) starts one process per rank; each reads RANK,
WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT and meets the others at engramlab's own rendezvous (torchrun:
MASTER_PORT + 1), every rank presenting ENGRAMLAB_JOB_TOKEN. Building is collective: every rank constructs it.

model: the model whose tables are placed (a preset name or a model file), as `engramlab plan` decides;
table_model: a smaller model of the same structure whose tables are really built (e.g. "tiny"); tp x dp must be
WORLD_SIZE (0 for one: WORLD_SIZE divided by the other); cpu_offload, peer_shards, dp_shared_memory and
shard_group as in a deployment's config; tokens_per_rank_max sizes the lookup buffers; fill_seed fills the tables
as reference_lookup reads them; ranks_per_gpu > 1 lets ranks share a GPU (LOCAL_RANK r opens GPU r / N); engine:
whose rules place and decode the tables ("engramlab", "vllm", "sglang" or a variant such as "vllm+replica-copy"), as
`engramlab plan --engine`: lookups give reference_lookup(..., engine=engine, summed=facts["rows_summed"]).

A rank with a GPU looks up CUDA tensors on it; a rank without one runs the host lookup on CPU tensors (host
placements only: a device placement is refused when the tables are built).)")
      .def(py::init([](py::handle model, py::handle table_model, int tp, int dp, bool cpu_offload, bool peer_shards,
                       std::optional<bool> dp_shared_memory, const std::string& shard_group, int tokens_per_rank_max,
                       uint64_t fill_seed, int ranks_per_gpu, const std::string& engine) {
             TablesArguments a;
             a.model = path_argument(model, "model");
             if (!table_model.is_none()) a.table_model = path_argument(table_model, "table_model");
             a.tp = tp;
             a.dp = dp;
             a.cpu_offload = cpu_offload;
             a.peer_shards = peer_shards;
             a.dp_shared_memory = dp_shared_memory;
             a.shard_group = shard_group;
             a.tokens_per_rank_max = tokens_per_rank_max;
             a.fill_seed = fill_seed;
             a.ranks_per_gpu = ranks_per_gpu;
             a.engine = engine;
             return std::make_unique<EngramTables>(a);
           }),
           py::arg("model") = "deepseek-v4.1-flash", py::kw_only(), py::arg("table_model") = py::none(),
           py::arg("tp") = 0, py::arg("dp") = 1, py::arg("cpu_offload") = false, py::arg("peer_shards") = false,
           py::arg("dp_shared_memory") = py::none(), py::arg("shard_group") = "world",
           py::arg("tokens_per_rank_max") = 1024, py::arg("fill_seed") = 1, py::arg("ranks_per_gpu") = 1,
           py::arg("engine") = "engramlab")
      .def_property_readonly("placement", &EngramTables::placement)
      .def_property_readonly("rank", &EngramTables::rank)
      .def_property_readonly("world_size", &EngramTables::world_size)
      .def_property_readonly("device", &EngramTables::device, "'cuda:N' where the rank looks up on its GPU, else 'cpu'")
      .def_property_readonly("layers", &EngramTables::layers)
      .def_property_readonly("tokens_per_rank_max", &EngramTables::tokens_per_rank_max)
      .def_property_readonly("facts", &EngramTables::facts,
                             "what the runtime decided: placement and reason, handle type, memory held, hosts, and "
                             "whether its lookup sums its group's rows (rows_summed)")
      .def_property_readonly("warnings", &EngramTables::warnings)
      .def("output_shape", &EngramTables::output_shape, py::arg("tokens"), py::arg("layer") = py::none(),
           "(tokens, heads, dim): the shape lookup writes")
      .def("lookup", &EngramTables::lookup, py::arg("row_ids"), py::arg("out"), py::arg("stream") = py::none(),
           py::kw_only(), py::arg("layer") = py::none(),
           R"(Looks up row_ids (int64 [tokens, heads], contiguous) into out (bfloat16, or its bits as int16/uint16,
[tokens, heads, dim] or [tokens, heads * dim], contiguous), bitwise as reference_lookup gives them under the
tables' engine. On a GPU rank
both are CUDA tensors on its GPU and the lookup is enqueued on `stream` (None: torch's current stream) with nothing
allocated or synchronised, so it can be captured in a torch.cuda.CUDAGraph; a collective placement's lookup is
collective over its group. layer: which Engram layer (needed when the model has several).)")
      .def("close", &EngramTables::close, "Releases every table, mapping and segment (collective: every rank calls it).")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](EngramTables& t, py::args) { t.close(); });
}

}  // namespace engram::python
