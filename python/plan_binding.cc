// engramlab.plan(deployment): `engramlab plan --json`'s document as Python
// objects, from a dict, YAML text or a deployment file.
#include <fmt/format.h>

#include <string>

#include "core/base/yaml_fields.h"
#include "core/deployment_file/deployment_yaml.h"
#include "core/plan/memory_fit.h"
#include "core/plan/step_time_plan.h"
#include "core/report/step_time_report.h"
#include "python/arguments.h"
#include "python/errors.h"
#include "python/json_objects.h"
#include "python/module_parts.h"

namespace engram::python {
namespace {

// YAML text is told from a path by what no path holds: a line break, or a
// flow map's opening brace.
bool is_yaml_text(const std::string& text) {
  const size_t first = text.find_first_not_of(" \t");
  return text.find('\n') != std::string::npos || (first != std::string::npos && text[first] == '{');
}

Result<Deployment> deployment_of(py::handle deployment) {
  if (py::isinstance<py::dict>(deployment)) {
    // JSON is YAML: the dict goes through the file format's own parser and
    // checks, so its errors name the same fields a file's would.
    const Json json = json_of(deployment, "deployment");
    return parse_deployment_text(json.dump(2), "deployment (dict, as JSON)");
  }
  if (py::isinstance<py::str>(deployment)) {
    const std::string text = str_argument(deployment, "deployment");
    if (text.empty())
      return invalid_argument("deployment: an empty str; give a dict, YAML text or the path of a deployment file");
    if (is_yaml_text(text)) return parse_deployment_text(text, "deployment (YAML text)");
  }
  if (py::isinstance<py::str>(deployment) || py::hasattr(deployment, "__fspath__")) {
    // Read here, so errors name the argument (not the command line's --file).
    const std::string path = path_argument(deployment, "deployment");
    ENGRAM_ASSIGN_OR_RETURN(std::string text, read_text_file(path, "deployment"));
    return parse_deployment_text(text, path);
  }
  throw py::type_error(fmt::format("deployment: a {}; give a dict, YAML text or the path of a deployment file",
                                   py::type::of(deployment).attr("__name__").cast<std::string>()));
}

py::object plan(py::handle deployment) {
  const Deployment d = value_or_raise(deployment_of(deployment));
  WarningSink sink;  // the document holds the warnings
  const FitCheckedPlan checked = value_or_raise(plan_with_memory_fit(d, sink));
  // `plan --json` without flags: the GPU model's built-in calibration at the
  // deployment's tokens_per_rank_max.
  const std::vector<int> tokens{d.config.tokens_per_rank_max};
  const Json document = plan_document(checked, step_constants_for(step_gpu_model(d)), tokens, Json(nullptr));
  py::object out = json_object(document);
  if (!checked.fits.is_ok()) raise_status(checked.fits, out);
  return out;
}

}  // namespace

void add_plan(py::module_& m) {
  m.def("plan", &plan, py::arg("deployment"),
        R"(The plan of a deployment: `engramlab plan --json`'s document as Python objects.

deployment: a dict (the deployment file's fields: hosts, layout, config, model, ...), YAML text, or the path of a
deployment file (str or pathlib.Path). The placement of rank r is plan(...)["ranks"][r]["placement"].
Raises InvalidArgumentError (a ValueError) for bad input, FailedPreconditionError for a setting that cannot work,
and ResourceExhaustedError when the tables do not fit the GPUs or the hosts' memory (its .document holds the plan
with the figures behind it).)");
}

}  // namespace engram::python
