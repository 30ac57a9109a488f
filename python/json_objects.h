// JSON documents (core/base/json_output.h) as Python objects and back:
// objects are dicts (keys in the document's order), arrays lists, null None.
// Text that is not valid UTF-8 becomes U+FFFD, as the --json output does.
#pragma once

#include <pybind11/pybind11.h>

#include <string_view>

#include "core/base/json_output.h"

namespace engram::python {

namespace py = pybind11;

py::str text_object(std::string_view text);
py::object json_object(const Json& json);
// dicts with str keys, lists and tuples, str, bool, int, float and None;
// TypeError naming `where` and the path inside it for anything else.
Json json_of(py::handle object, std::string_view where);

}  // namespace engram::python
