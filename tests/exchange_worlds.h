// The emulated worlds the handle-exchange tests run on: one host whose
// ranks share POSIX fds, and two hosts of one NVLink/IMEX domain that share
// FABRIC handles.
#pragma once

#include <cstdint>
#include <string>

#include "sim/faults.h"
#include "sim/world.h"
#include "tests/deployment_fixtures.h"

namespace engram::testing {

inline sim::WorldSpec one_b300_host(int gpus = 8) {
  sim::WorldSpec spec;
  spec.hosts.push_back(host("b300-0", gpus, "B300"));
  return spec;
}

inline sim::WorldSpec two_gb300_hosts_one_domain(int gpus_per_host = 4) {
  sim::WorldSpec spec;
  for (int i = 0; i < 2; ++i) {
    HostSpec h = host("gb300-" + std::to_string(i), gpus_per_host, "GB300");
    h.nvlink_domain = "nvl72-a";
    h.imex_channel = true;
    h.fabric_attribute = true;
    spec.hosts.push_back(h);
  }
  return spec;
}

// Seed `seed`'s world for the random-fault sweeps: POSIX on odd seeds,
// FABRIC on even, faults at every exchange site at `rate`, rank deaths at
// `death_rate`.
inline sim::WorldSpec random_exchange_faults(uint64_t seed, double rate, double death_rate) {
  sim::WorldSpec spec = seed % 2 ? one_b300_host() : two_gb300_hosts_one_domain();
  spec.seed = seed;
  for (sim::FaultSite s : {sim::FaultSite::kExport, sim::FaultSite::kSend, sim::FaultSite::kImport,
                           sim::FaultSite::kMap, sim::FaultSite::kAccess})
    spec.faults.with_rate(s, rate);
  spec.faults.with_rate(sim::FaultSite::kRankDeath, death_rate);
  return spec;
}

}  // namespace engram::testing
