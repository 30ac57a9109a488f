// The compiled part of the `engramlab` package (python/engramlab/__init__.py
// re-exports it): thin over core/ and harness/, no rule of its own.
#include <pybind11/pybind11.h>

#include "core/base/rerun_command.h"
#include "python/module_parts.h"

namespace py = pybind11;

PYBIND11_MODULE(_engramlab, m) {
  m.doc() = "engramlab's core and harness from Python (import engramlab, not this module)";
  engram::python::add_errors(m);
  engram::python::add_plan(m);
  engram::python::add_scenarios(m);
  engram::python::add_oracle(m);
  engram::python::add_request_hasher(m);
  engram::python::add_engram_tables(m);

  // Where the `engramlab` command is, for the reproduce lines of failing
  // scenarios (core/base/rerun_command.h): the package picks the one beside
  // it (python/engramlab/__init__.py).
  m.attr("_cli_build_path") = ENGRAM_CLI_BUILD_PATH;
  m.attr("_package_build_dir") = ENGRAM_PYTHON_PACKAGE_DIR;
  m.attr("_cli_from_package") = ENGRAM_CLI_FROM_PACKAGE;
  m.def("_set_rerun_binary", [](const std::string& path) { engram::set_rerun_binary(path); },
        "the engramlab command reproduce lines name");
#ifdef ENGRAM_HAVE_EMULATOR
  m.attr("has_emulator") = true;
#else
  m.attr("has_emulator") = false;
#endif
#ifdef ENGRAM_HAVE_CUDA_BACKEND
  m.attr("has_cuda") = true;
#else
  m.attr("has_cuda") = false;
#endif
}
