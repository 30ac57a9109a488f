// Host arguments of the module's functions: paths, and int64 arrays read on
// the CPU (the oracle's ids and tokens). A wrong type or dtype is a
// TypeError, a wrong shape or device a ValueError, each naming the argument
// and the fix.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace engram::python {

namespace py = pybind11;

// A str or os.PathLike, as a path. A lone surrogate is a ValueError naming
// `name` (not pybind11's cast error), but for os.fsdecode's escaped bytes.
std::string path_argument(py::handle object, const char* name);

// A str as UTF-8; a lone surrogate is a ValueError naming `name`.
std::string str_argument(py::handle object, const std::string& name);

// The ids of a host argument: a numpy array, a CPU tensor or a list of ints,
// of dtype int64 exactly (int32 is refused, not widened: it is the dtype a
// caller who meant int64 gets by mistake). `ndim`: the dimensions allowed
// (e.g. {1} or {1, 2}). Reads it in place when it is C-contiguous.
struct HostInt64Array {
  py::array array;                 // keeps the values alive
  std::span<const int64_t> values;
  std::vector<int64_t> shape;
};
HostInt64Array host_int64_array(py::handle object, const char* name, std::vector<int> ndim);

// A new C-contiguous numpy array of `shape`.
template <typename T>
py::array_t<T> new_array(const std::vector<int64_t>& shape) {
  std::vector<py::ssize_t> dims(shape.begin(), shape.end());
  return py::array_t<T>(dims);
}

// Its writable values, for filling a new_array.
template <typename T>
std::span<T> values_of(py::array_t<T>& array) {
  return {array.mutable_data(), static_cast<size_t>(array.size())};
}

}  // namespace engram::python
