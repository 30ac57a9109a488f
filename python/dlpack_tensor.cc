#include "python/dlpack_tensor.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

namespace engram::python {
namespace {

using namespace pybind11::literals;

std::string dtype_text(dlpack::DataType t) {
  std::string text;
  switch (t.code) {
    case dlpack::kInt: text = fmt::format("int{}", t.bits); break;
    case dlpack::kUInt: text = fmt::format("uint{}", t.bits); break;
    case dlpack::kFloat: text = fmt::format("float{}", t.bits); break;
    case dlpack::kBfloat: text = fmt::format("bfloat{}", t.bits); break;
    default: text = fmt::format("DLPack type code {} of {} bits", t.code, t.bits);
  }
  return t.lanes == 1 ? text : fmt::format("{} x {} lanes", text, t.lanes);
}

bool same(dlpack::DataType a, dlpack::DataType b) { return a.code == b.code && a.bits == b.bits && a.lanes == b.lanes; }

}  // namespace

std::string device_text(dlpack::Device device) {
  if (device.device_type == dlpack::kCpu) return "cpu";
  if (device.device_type == dlpack::kCuda) return fmt::format("cuda:{}", device.device_id);
  return fmt::format("device type {}:{}", device.device_type, device.device_id);
}

dlpack::Device tensor_device(py::handle object, const char* name) {
  if (!py::hasattr(object, "__dlpack_device__") || !py::hasattr(object, "__dlpack__"))
    throw py::type_error(fmt::format("{}: a {}, which is no tensor; give a torch tensor (or any array with "
                                     "__dlpack__)",
                                     name, py::type::of(object).attr("__name__").cast<std::string>()));
  const py::tuple device = object.attr("__dlpack_device__")();
  return {device[0].cast<int32_t>(), device[1].cast<int32_t>()};
}

DlpackTensor DlpackTensor::take(py::handle object, const char* name, std::optional<uintptr_t> cuda_stream) {
  const dlpack::Device device = tensor_device(object, name);
  py::object capsule;
  if (device.device_type == dlpack::kCuda && cuda_stream) {
    // DLPack names the legacy default stream 1 (0 is ambiguous there).
    capsule = object.attr("__dlpack__")("stream"_a = *cuda_stream == 0 ? uintptr_t{1} : *cuda_stream);
  } else {
    capsule = object.attr("__dlpack__")();
  }
  auto* managed = static_cast<dlpack::ManagedTensor*>(PyCapsule_GetPointer(capsule.ptr(), "dltensor"));
  if (managed == nullptr) throw py::error_already_set();
  // Consumed: the capsule no longer frees it; our destructor does.
  if (PyCapsule_SetName(capsule.ptr(), "used_dltensor") != 0) throw py::error_already_set();
  return DlpackTensor(managed, name);
}

DlpackTensor::~DlpackTensor() {
  if (managed_ != nullptr && managed_->deleter != nullptr) managed_->deleter(managed_);
}

std::vector<int64_t> DlpackTensor::shape() const {
  const dlpack::Tensor& t = tensor();
  return std::vector<int64_t>(t.shape, t.shape + t.ndim);
}

int64_t DlpackTensor::element_count() const {
  int64_t n = 1;
  for (int64_t d : shape()) n *= d;
  return n;
}

bool DlpackTensor::is_contiguous() const {
  const dlpack::Tensor& t = tensor();
  if (t.strides == nullptr) return true;
  // An empty tensor has no element out of place, whatever its strides say
  // (torch gives torch.zeros((0, 4)) strides (1, 1)): an idle rank's step.
  for (int32_t d = 0; d < t.ndim; ++d)
    if (t.shape[d] == 0) return true;
  int64_t expected = 1;
  for (int32_t d = t.ndim - 1; d >= 0; --d) {
    if (t.shape[d] != 1 && t.strides[d] != expected) return false;
    expected *= t.shape[d];
  }
  return true;
}

uintptr_t DlpackTensor::address() const {
  const dlpack::Tensor& t = tensor();
  return reinterpret_cast<uintptr_t>(t.data) + t.byte_offset;
}

void DlpackTensor::require_dtype(const std::vector<dlpack::DataType>& allowed, const char* what) const {
  const dlpack::DataType dtype = tensor().dtype;
  if (std::any_of(allowed.begin(), allowed.end(), [&](dlpack::DataType a) { return same(a, dtype); })) return;
  throw py::type_error(fmt::format("{}: dtype {}; give {}", name_, dtype_text(dtype), what));
}

void DlpackTensor::require_contiguous() const {
  if (is_contiguous()) return;
  const dlpack::Tensor& t = tensor();
  throw py::value_error(fmt::format("{}: not contiguous (shape ({}), strides ({})); give a contiguous tensor "
                                    "(look up into one, then copy where it must go)",
                                    name_, fmt::join(std::vector<int64_t>(t.shape, t.shape + t.ndim), ", "),
                                    fmt::join(std::vector<int64_t>(t.strides, t.strides + t.ndim), ", ")));
}

}  // namespace engram::python
