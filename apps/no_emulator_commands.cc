// A build without the emulator (ENGRAM_BUILD_EMULATOR=OFF, as GPU machines
// build it): `engramlab scenario` and `engramlab fuzz` run on the emulator,
// so in their place are commands that say so and exit 2. Built instead of
// scenario_command.cc and fuzz_command.cc (apps/CMakeLists.txt).
#include <iostream>
#include <string>

#include "apps/command_registry.h"

namespace engram::app {
namespace {

void install_absent(CLI::App& app, int& exit_code, const std::string& name, const std::string& what) {
  CLI::App* cmd = app.add_subcommand(name, what + " (not in this build: it has no emulator)");
  cmd->allow_extras();
  cmd->callback([&exit_code, name]() {
    std::cerr << "error: `engramlab " << name << "` needs the emulator, and this build has none (configured with "
              << "-DENGRAM_BUILD_EMULATOR=OFF). Build with -DENGRAM_BUILD_EMULATOR=ON (needs Boost.Context) for it.\n";
    exit_code = 2;
  });
}

CommandRegistration scenario_reg("30-scenario", [](CLI::App& app, int& exit_code) {
  install_absent(app, exit_code, "scenario", "Scenario files: a topology, a config, faults and expectations");
});
CommandRegistration fuzz_reg("40-fuzz", [](CLI::App& app, int& exit_code) {
  install_absent(app, exit_code, "fuzz", "Swarm mode: seeded topologies, configs and faults on the emulator");
});

}  // namespace
}  // namespace engram::app
