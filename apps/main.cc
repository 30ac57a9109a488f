#include <CLI/CLI.hpp>

#include <map>

#include "apps/command_registry.h"

namespace engram::app {
namespace {
std::map<std::string, CommandInstaller>& registry() {
  static std::map<std::string, CommandInstaller> commands;
  return commands;
}
}  // namespace

CommandRegistration::CommandRegistration(std::string order_key, CommandInstaller installer) {
  registry().emplace(std::move(order_key), std::move(installer));
}

void install_commands(CLI::App& app, int& exit_code) {
  for (auto& [key, install] : registry()) install(app, exit_code);
}

}  // namespace engram::app

int main(int argc, char** argv) {
  CLI::App app{"engramlab: place, share and look up Engram hash-embedding tables across GPU ranks"};
  app.require_subcommand(1);
  int exit_code = 0;
  engram::app::install_commands(app, exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0; any other parse error (unknown flag,
    // missing value) is bad input: exit 2, like our own validation.
    const int cli_code = app.exit(e);
    return cli_code == 0 ? 0 : 2;
  }
  return exit_code;
}
