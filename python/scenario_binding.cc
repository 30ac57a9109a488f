// engramlab.run_scenario and engramlab.fuzz: one scenario file, or a sweep of
// swarm seeds, on the emulator; the documents `scenario run --json` and
// `fuzz --json` print (harness/run_json.h).
#include <fmt/format.h>
#include <pybind11/stl.h>  // std::optional and std::vector arguments

#include <optional>
#include <string>

#include "python/arguments.h"
#include "python/errors.h"
#include "python/json_objects.h"
#include "python/module_parts.h"

#include "harness/scenario.h"

#ifdef ENGRAM_HAVE_EMULATOR
#include "harness/run_json.h"
#include "harness/swarm.h"
#include "harness/swarm_target.h"
#endif

namespace engram::python {
namespace {

using namespace pybind11::literals;

// What a scenario file says about itself, read without running it.
py::dict scenario_info(py::handle path) {
  const harness::Scenario s = value_or_raise(harness::load_scenario_file(path_argument(path, "path")));
  return py::dict("name"_a = text_object(s.name), "description"_a = text_object(s.description),
                  "file"_a = text_object(s.source), "seed"_a = s.seed, "faults_drawn"_a = s.faults_drawn);
}

#ifdef ENGRAM_HAVE_EMULATOR

py::object run_scenario(py::handle path, std::optional<uint64_t> seed) {
  const harness::Scenario scenario = value_or_raise(harness::load_scenario_file(path_argument(path, "path")));
  harness::ScenarioOutcome outcome;
  {
    py::gil_scoped_release unlocked;  // a run of thousands of emulated ranks takes seconds
    outcome = harness::run_scenario_or_drawn(scenario, seed);
  }
  return json_object(harness::scenario_outcome_json(outcome));
}

py::object fuzz(int seeds, uint64_t first_seed, std::optional<py::object> file, const std::string& sites,
                bool check_determinism) {
  if (seeds < 1 || seeds > harness::kMaxSwarmSeeds)
    raise_status(invalid_argument(
        fmt::format("seeds: {} is not a seed count; give 1 to {}", seeds, harness::kMaxSwarmSeeds)));
  const std::string file_path = file ? path_argument(*file, "file") : std::string();
  const harness::SwarmTarget target = value_or_raise(harness::load_swarm_target(file_path, sites));
  harness::SwarmReport report;
  {
    py::gil_scoped_release unlocked;
    report = harness::run_swarm(first_seed, seeds, check_determinism, {}, target);
  }
  return json_object(harness::swarm_report_json(report));
}

#else

[[noreturn]] void no_emulator(const char* what) {
  raise_status(failed_precondition(fmt::format(
      "{} runs on the emulator, and this engramlab is built without it (-DENGRAM_BUILD_EMULATOR=OFF); build with it "
      "(it needs libboost-context-dev)",
      what)));
}

py::object run_scenario(py::handle, std::optional<uint64_t>) { no_emulator("run_scenario"); }
py::object fuzz(int, uint64_t, std::optional<py::object>, const std::string&, bool) { no_emulator("fuzz"); }

#endif

}  // namespace

void add_scenarios(py::module_& m) {
  m.def("scenario_info", &scenario_info, py::arg("path"),
        "A scenario file's name, description, file, seed and whether its faults are drawn, read and checked without "
        "running it (InvalidArgumentError names the line and field of a bad file).");
  m.def("run_scenario", &run_scenario, py::arg("path"), py::arg("seed") = py::none(),
        R"(Runs one scenario file on the emulator, as `engramlab scenario run FILE [--seed S] --json` does.

Returns its entry of that document: name, file, seed, result ("pass" or "fail"), placement(s), warnings, error,
trace_hash, step_times (per rank: the step model's lookup step time, p50 and max, and the waiting on peers), ms,
failures (what differed), rank_table and reproduce (the command line that reruns it). A failing
scenario is a result, not an exception; a file that cannot be read or parsed raises InvalidArgumentError.)");
  m.def("fuzz", &fuzz, py::arg("seeds"), py::arg("first_seed") = 1, py::arg("file") = py::none(),
        py::arg("sites") = "", py::arg("check_determinism") = false,
        R"(Swarm mode, as `engramlab fuzz --seeds N --seed S [--file F] [--sites a,b] [--check-determinism] --json`:
each seed draws a job (around `file`'s deployment when given) and checks the invariants. Returns that document
(passed, failures with their reproduce lines, fault sites, coverage, outcomes).)");
}

}  // namespace engram::python
