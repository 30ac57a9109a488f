#include "python/arguments.h"

#include <fmt/format.h>

#include <algorithm>

namespace engram::python {
namespace {

using namespace pybind11::literals;

std::string type_name(py::handle object) { return py::type::of(object).attr("__name__").cast<std::string>(); }

std::string ndim_choices(const std::vector<int>& ndim) {
  std::string out;
  for (size_t i = 0; i < ndim.size(); ++i) out += fmt::format("{}{}", i == 0 ? "" : " or ", ndim[i]);
  return out;
}

}  // namespace

std::string str_argument(py::handle object, const std::string& name) {
  Py_ssize_t size = 0;
  const char* data = PyUnicode_AsUTF8AndSize(object.ptr(), &size);
  if (data == nullptr) {
    PyErr_Clear();
    throw py::value_error(fmt::format("{}: the str holds a lone surrogate (half of a UTF-16 pair, e.g. '\\udc80'), "
                                      "which is no text and cannot be UTF-8; give valid text",
                                      name));
  }
  return std::string(data, static_cast<size_t>(size));
}

std::string path_argument(py::handle object, const char* name) {
  // A path's str may carry undecodable bytes as surrogates (os.fsdecode's
  // surrogateescape): os.fsencode gives them back; any other lone surrogate
  // is refused naming the argument.
  auto path_of_str = [name](py::handle text) {
    Py_ssize_t size = 0;
    if (const char* data = PyUnicode_AsUTF8AndSize(text.ptr(), &size)) return std::string(data, static_cast<size_t>(size));
    PyErr_Clear();
    try {
      return py::module_::import("os").attr("fsencode")(text).cast<std::string>();
    } catch (const py::error_already_set&) {
      throw py::value_error(fmt::format("{}: the path holds a lone surrogate (half of a UTF-16 pair) that is no "
                                        "file name's byte; give the path as valid text, or as bytes",
                                        name));
    }
  };
  if (py::isinstance<py::str>(object)) return path_of_str(object);
  if (py::hasattr(object, "__fspath__")) {
    py::object path = py::module_::import("os").attr("fspath")(object);
    if (py::isinstance<py::str>(path)) return path_of_str(path);
    if (py::isinstance<py::bytes>(path)) return path.cast<std::string>();
  }
  throw py::type_error(fmt::format("{}: a {}; give a str or a pathlib.Path", name, type_name(object)));
}

HostInt64Array host_int64_array(py::handle object, const char* name, std::vector<int> ndim) {
  // A tensor on a GPU: numpy would say only that it cannot convert it.
  if (py::hasattr(object, "__dlpack_device__") && !py::isinstance<py::array>(object)) {
    const py::tuple device = object.attr("__dlpack_device__")();
    if (device[0].cast<int>() != 1)  // kDLCPU
      throw py::value_error(fmt::format("{}: a tensor on {}; this function reads {} on the CPU: pass {}.cpu()", name,
                                        py::str(object.attr("device")).cast<std::string>(), name, name));
  }
  py::array array;
  if (py::isinstance<py::array>(object) || py::hasattr(object, "__array__")) {
    array = py::module_::import("numpy").attr("asarray")(object);
  } else if (py::isinstance<py::list>(object) || py::isinstance<py::tuple>(object)) {
    // A list of Python ints has no dtype of its own: int64 is its reading.
    array = py::module_::import("numpy").attr("asarray")(object, "dtype"_a = "int64");
  } else {
    throw py::type_error(fmt::format("{}: a {}; give a numpy int64 array (numpy.asarray(..., dtype=numpy.int64))",
                                     name, type_name(object)));
  }
  if (!array.dtype().is(py::dtype::of<int64_t>()))
    throw py::type_error(fmt::format("{}: dtype {}; give int64 ids ({}.astype(numpy.int64), or .long() for a torch "
                                     "tensor)",
                                     name, py::str(array.dtype()).cast<std::string>(), name));
  if (std::find(ndim.begin(), ndim.end(), static_cast<int>(array.ndim())) == ndim.end())
    throw py::value_error(fmt::format("{}: {} dimension(s), shape {}; give {} dimension(s)", name, array.ndim(),
                                      py::str(py::object(array.attr("shape"))).cast<std::string>(),
                                      ndim_choices(ndim)));
  if (!(array.flags() & py::array::c_style))
    array = py::module_::import("numpy").attr("ascontiguousarray")(array);  // an input: a copy does no harm
  HostInt64Array out;
  out.values = {static_cast<const int64_t*>(array.data()), static_cast<size_t>(array.size())};
  for (py::ssize_t d = 0; d < array.ndim(); ++d) out.shape.push_back(static_cast<int64_t>(array.shape(d)));
  out.array = std::move(array);
  return out;
}

}  // namespace engram::python
