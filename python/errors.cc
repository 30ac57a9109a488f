#include "python/errors.h"

#include <array>
#include <string>

#include "python/json_objects.h"
#include "python/module_parts.h"

namespace engram::python {
namespace {

constexpr ErrorCode kFirstErrorCode = ErrorCode::kInvalidArgument;
constexpr ErrorCode kLastErrorCode = ErrorCode::kInternal;
constexpr size_t kCodeCount = static_cast<size_t>(kLastErrorCode) + 1;

// The types, by code (index 0: Error itself). Owned by the module for the
// life of the process, as every extension's exception types are.
std::array<PyObject*, kCodeCount>& error_types() {
  static std::array<PyObject*, kCodeCount> types{};
  return types;
}

// "invalid_argument" -> "InvalidArgumentError".
std::string class_name(ErrorCode code) {
  std::string name;
  bool upper = true;
  for (const char* c = error_code_name(code); *c != '\0'; ++c) {
    if (*c == '_') {
      upper = true;
      continue;
    }
    name += upper ? static_cast<char>(*c - 'a' + 'A') : *c;
    upper = false;
  }
  return name + "Error";
}

PyObject* new_type(py::module_& m, const std::string& name, const char* doc, PyObject* bases) {
  const std::string qualified = "engramlab." + name;
  PyObject* type = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, bases, nullptr);
  if (type == nullptr) throw py::error_already_set();
  m.add_object(name.c_str(), py::handle(type));  // the module keeps its own reference
  return type;
}

}  // namespace

void add_errors(py::module_& m) {
  auto& types = error_types();
  types[0] = new_type(m, "Error",
                      "An engramlab error: code (e.g. 'invalid_argument'), message, and where it happened: rank, "
                      "peer and step (None where they do not apply).",
                      PyExc_Exception);
  for (auto code = static_cast<size_t>(kFirstErrorCode); code < kCodeCount; ++code) {
    const auto error_code = static_cast<ErrorCode>(code);
    // Bad input is also a ValueError, so code that catches ValueError sees it.
    // (Assigned apart: pybind11 3's make_tuple gives a typed tuple per arity.)
    py::tuple bases;
    if (error_code == ErrorCode::kInvalidArgument)
      bases = py::make_tuple(py::handle(types[0]), py::handle(PyExc_ValueError));
    else
      bases = py::make_tuple(py::handle(types[0]));
    types[code] = new_type(m, class_name(error_code), "An engramlab error of this code (see engramlab.Error).",
                           bases.ptr());
  }
}

void raise_status(const Status& status, py::object document) {
  ENGRAM_CHECK_MSG(!status.is_ok(), "raise_status needs an error");
  PyObject* type = error_types()[static_cast<size_t>(status.code())];
  ENGRAM_CHECK_MSG(type != nullptr, "engramlab's error types are made when the module is imported");
  const ErrorContext& where = status.context();
  py::object error = py::reinterpret_borrow<py::object>(type)(text_object(status.to_string()));
  error.attr("code") = error_code_name(status.code());
  error.attr("message") = text_object(status.message());
  error.attr("rank") = where.rank >= 0 ? py::object(py::int_(where.rank)) : py::none();
  error.attr("peer") = where.peer >= 0 ? py::object(py::int_(where.peer)) : py::none();
  error.attr("step") = where.step.empty() ? py::none() : py::object(text_object(where.step));
  error.attr("document") = std::move(document);
  PyErr_SetObject(type, error.ptr());
  throw py::error_already_set();
}

}  // namespace engram::python
