// Tensor arguments read through DLPack (the __dlpack__ / __dlpack_device__
// protocol): torch, CuPy, JAX and numpy tensors alike, without linking any of
// them. The ABI below is DLPack's (dmlc/dlpack include/dlpack/dlpack.h,
// DLManagedTensor in the "dltensor" capsule every producer hands out by
// default): declared here rather than taken from a package because the GPU
// machines have none, and it cannot change without breaking every producer.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace engram::python {

namespace py = pybind11;

namespace dlpack {
inline constexpr int32_t kCpu = 1;   // kDLCPU
inline constexpr int32_t kCuda = 2;  // kDLCUDA
inline constexpr uint8_t kInt = 0, kUInt = 1, kFloat = 2, kBfloat = 4;  // DLDataTypeCode
struct Device {
  int32_t device_type;
  int32_t device_id;
};
struct DataType {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
};
struct Tensor {
  void* data;
  Device device;
  int32_t ndim;
  DataType dtype;
  int64_t* shape;
  int64_t* strides;  // in elements; null: compact row-major
  uint64_t byte_offset;
};
struct ManagedTensor {
  Tensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(ManagedTensor* self);
};
}  // namespace dlpack

// "cpu", "cuda:1", or "device type 7:0".
std::string device_text(dlpack::Device device);

// The device `object` lives on (its __dlpack_device__); TypeError naming
// `name` when it is no tensor.
dlpack::Device tensor_device(py::handle object, const char* name);

// A tensor taken through its capsule and given back (the producer's
// deleter) when this goes. For a CUDA tensor `cuda_stream` is the stream it
// is used on: the producer orders its pending work on the tensor before it
// (DLPack's stream argument: 1 stands for the legacy default stream).
class DlpackTensor {
 public:
  static DlpackTensor take(py::handle object, const char* name, std::optional<uintptr_t> cuda_stream);
  DlpackTensor(DlpackTensor&& other) noexcept : managed_(other.managed_), name_(std::move(other.name_)) {
    other.managed_ = nullptr;
  }
  DlpackTensor& operator=(DlpackTensor&&) = delete;
  DlpackTensor(const DlpackTensor&) = delete;
  ~DlpackTensor();

  const dlpack::Tensor& tensor() const { return managed_->dl_tensor; }
  std::vector<int64_t> shape() const;
  // Row-major and dense (dimensions of extent 1 may have any stride; an empty tensor is always contiguous).
  bool is_contiguous() const;
  uintptr_t address() const;
  int64_t element_count() const;

  // TypeError naming the argument unless the dtype is one of `allowed`
  // (`what` names them: "int64").
  void require_dtype(const std::vector<dlpack::DataType>& allowed, const char* what) const;
  // ValueError naming the argument unless it is contiguous.
  void require_contiguous() const;

 private:
  DlpackTensor(dlpack::ManagedTensor* managed, std::string name) : managed_(managed), name_(std::move(name)) {}
  dlpack::ManagedTensor* managed_;
  std::string name_;
};

inline constexpr dlpack::DataType kInt64{dlpack::kInt, 64, 1};
inline constexpr dlpack::DataType kBfloat16{dlpack::kBfloat, 16, 1};
inline constexpr dlpack::DataType kInt16{dlpack::kInt, 16, 1};
inline constexpr dlpack::DataType kUint16{dlpack::kUInt, 16, 1};

}  // namespace engram::python
