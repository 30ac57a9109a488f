#include "python/json_objects.h"

#include <fmt/format.h>

#include <cmath>
#include <string>

#include "python/arguments.h"

namespace engram::python {
namespace {

Json json_at(py::handle object, const std::string& path, int depth) {
  // Deployments are a few levels deep; a cycle (a list holding itself) ends here.
  if (depth > 64) throw py::type_error(fmt::format("{}: nested deeper than 64 levels", path));
  if (object.is_none()) return nullptr;
  if (py::isinstance<py::bool_>(object)) return object.cast<bool>();
  if (py::isinstance<py::int_>(object)) {
    int overflow = 0;
    const long long value = PyLong_AsLongLongAndOverflow(object.ptr(), &overflow);
    if (overflow != 0)
      throw py::value_error(fmt::format("{}: {} does not fit in 64 bits", path, py::str(object).cast<std::string>()));
    return static_cast<int64_t>(value);
  }
  if (py::isinstance<py::float_>(object)) {
    // JSON has no NaN or infinity: written, either would read back as null
    // ("found nothing"), naming neither the value nor the fix.
    const double value = object.cast<double>();
    if (!std::isfinite(value))
      throw py::value_error(fmt::format("{}: {} is not a number this field can hold; give a finite number (a count: "
                                        "a whole number)",
                                        path, py::repr(object).cast<std::string>()));
    return value;
  }
  if (py::isinstance<py::str>(object)) return str_argument(object, path);
  if (py::isinstance<py::dict>(object)) {
    Json out = Json::object();
    for (auto [key, value] : object.cast<py::dict>()) {
      if (!py::isinstance<py::str>(key))
        throw py::type_error(fmt::format("{}: key {} is a {}; keys are strings", path, py::repr(key).cast<std::string>(),
                                         py::type::of(key).attr("__name__").cast<std::string>()));
      const std::string name = str_argument(key, path + " key");
      out[name] = json_at(value, path + "." + name, depth + 1);
    }
    return out;
  }
  if (py::isinstance<py::list>(object) || py::isinstance<py::tuple>(object)) {
    Json out = Json::array();
    size_t i = 0;
    for (py::handle item : object) out.push_back(json_at(item, fmt::format("{}[{}]", path, i++), depth + 1));
    return out;
  }
  throw py::type_error(fmt::format("{}: a {} ({}); give a dict, list, str, bool, int, float or None", path,
                                   py::type::of(object).attr("__name__").cast<std::string>(),
                                   py::repr(object).cast<std::string>().substr(0, 80)));
}

}  // namespace

py::str text_object(std::string_view text) {
  PyObject* s = PyUnicode_DecodeUTF8(text.data(), static_cast<Py_ssize_t>(text.size()), "replace");
  if (s == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::str>(s);
}

py::object json_object(const Json& json) {
  switch (json.type()) {
    case Json::value_t::null:
    case Json::value_t::discarded: return py::none();
    case Json::value_t::boolean: return py::bool_(json.get<bool>());
    case Json::value_t::number_integer: return py::int_(json.get<int64_t>());
    case Json::value_t::number_unsigned: return py::int_(json.get<uint64_t>());
    case Json::value_t::number_float: return py::float_(json.get<double>());
    case Json::value_t::string: return text_object(json.get_ref<const std::string&>());
    case Json::value_t::array: {
      py::list out;
      for (const Json& item : json) out.append(json_object(item));
      return out;
    }
    case Json::value_t::object: {
      py::dict out;
      for (const auto& [key, value] : json.items()) out[text_object(key)] = json_object(value);
      return out;
    }
    case Json::value_t::binary: break;
  }
  throw py::type_error("a JSON value of a kind engramlab never writes (binary)");
}

Json json_of(py::handle object, std::string_view where) { return json_at(object, std::string(where), 0); }

}  // namespace engram::python
