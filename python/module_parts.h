// The parts of the engramlab module, one file each (python/module.cc calls
// them in this order): errors, plan, scenarios and the swarm, the oracle
// (hashing, reference rows), the request-state hasher, EngramTables.
#pragma once

#include <pybind11/pybind11.h>

namespace engram::python {

namespace py = pybind11;

void add_errors(py::module_& m);        // python/errors.cc
void add_plan(py::module_& m);          // python/plan_binding.cc
void add_scenarios(py::module_& m);     // python/scenario_binding.cc
void add_oracle(py::module_& m);        // python/oracle_binding.cc
void add_request_hasher(py::module_& m);  // python/request_hasher_binding.cc
void add_engram_tables(py::module_& m);   // python/engram_tables_binding.cc

}  // namespace engram::python
