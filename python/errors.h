// engramlab's errors as Python exceptions: engramlab.Error carries code,
// message, rank, peer and step (core/base/status.h; None where a field does
// not apply), with one subclass per code (InvalidArgumentError is also a
// ValueError). A Status never crosses into Python any other way.
#pragma once

#include <pybind11/pybind11.h>

#include <utility>

#include "core/base/status.h"

namespace engram::python {

namespace py = pybind11;

// Raises the exception of `status`'s code (an error). `document`, when not
// None, is attached as the exception's `document` (plan: the figures
// behind a deployment that cannot run).
[[noreturn]] void raise_status(const Status& status, py::object document = py::none());

inline void ok_or_raise(const Status& status) {
  if (!status.is_ok()) raise_status(status);
}

template <typename T>
T value_or_raise(Result<T> result) {
  if (!result.is_ok()) raise_status(result.status());
  return std::move(result).value();
}

}  // namespace engram::python
