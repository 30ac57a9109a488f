// Each `engramlab` subcommand lives in its own apps/<name>_command.cc and
// registers itself here at static-initialisation time, so adding a command
// touches no shared file.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <vector>

namespace engram::app {

// Adds the subcommand to `app`; the callback it installs returns through
// `exit_code` (CLI11 callbacks cannot return values).
using CommandInstaller = std::function<void(CLI::App& app, int& exit_code)>;

struct CommandRegistration {
  CommandRegistration(std::string order_key, CommandInstaller installer);
};

void install_commands(CLI::App& app, int& exit_code);

}  // namespace engram::app
