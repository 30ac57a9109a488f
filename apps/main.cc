#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cstdio>
#include <cstring>
#include <iostream>
#include <map>
#include <string>
#include <system_error>
#include <vector>

#include "apps/command_registry.h"
#include "core/base/units.h"
#include "apps/flag_check.h"
#include "apps/stdout_check.h"
#include "backends/ipc/fd_limit.h"
#include "core/base/json_output.h"

#ifndef ENGRAM_VERSION
#define ENGRAM_VERSION "unknown"
#define ENGRAM_BUILD_TYPE "unknown"
#define ENGRAM_CUDA_VERSION "unknown"
#define ENGRAM_NCCL_VERSION "unknown"
#endif

namespace engram::app {
namespace {
std::map<std::string, CommandInstaller>& registry() {
  static std::map<std::string, CommandInstaller> commands;
  return commands;
}

std::string version_text() {
#ifdef ENGRAM_HAVE_CUDA_BACKEND
  const char* cuda_backend = "built";
#else
  const char* cuda_backend = "not built";
#endif
  return fmt::format("engramlab {} ({} build; CUDA backend {}: CUDA toolkit {}, NCCL {} at build time)",
                     ENGRAM_VERSION, ENGRAM_BUILD_TYPE, cuda_backend, ENGRAM_CUDA_VERSION, ENGRAM_NCCL_VERSION);
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
  // A launcher and its ranks need an fd per peer: take what the hard limit
  // allows before anything opens one (the children inherit it).
  engram::ipc::raise_fd_limit();
  CLI::App app{"engramlab: place, share and look up Engram hash-embedding tables across GPU ranks"};
  app.require_subcommand(1);
  app.set_version_flag("--version", engram::app::version_text());
  app.footer(std::string(engram::kSizeUnitsHelp));  // how sizes are read everywhere one is given (flags and YAML)
  int exit_code = 0;
  engram::app::install_commands(app, exit_code);
  // Bad input on the command line (an unknown flag, a missing value) exits
  // 2, like our own validation; under --json the error is a JSON document on
  // stdout too.
  auto bad_input = [&](const std::string& message) {
    bool json = false;
    std::string command;
    for (int i = 1; i < argc; ++i) {
      if (std::strcmp(argv[i], "--") == 0) break;
      if (std::strcmp(argv[i], "--json") == 0) json = true;
      else if (argv[i][0] != '-' && command.empty()) command = argv[i];
    }
    if (json) {
      std::cout << engram::dump_json(engram::error_document(command, engram::invalid_argument(message))) << "\n";
    }
    return engram::app::finish_stdout(2, command);
  };
  // Other tools' spellings made ours, and unknown flags refused with the
  // closest known ones, before CLI11 reads the line.
  std::vector<std::string> args(argv + 1, argv + argc);
  if (const engram::Status flags = engram::app::check_flags(app, args); !flags.is_ok()) {
    std::cerr << flags.message() << "\n";
    return bad_input(flags.message());
  }
  std::vector<char*> checked_argv{argv[0]};
  for (std::string& a : args) checked_argv.push_back(a.data());
  try {
    app.parse(static_cast<int>(checked_argv.size()), checked_argv.data());
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0.
    const int cli_code = app.exit(e);
    if (cli_code == 0) return engram::app::finish_stdout(0, argc > 1 ? argv[1] : "");
    return bad_input(e.what());
  } catch (const std::system_error& e) {
    // fmt's print throws when a write to stdout fails mid-output (a buffer's
    // worth written, then ENOSPC or EPIPE): the same missing output
    // finish_stdout reports at the end, reported the same way. Anything
    // else is not ours to swallow.
    if (std::ferror(stdout) == 0) throw;
    const auto ran = app.get_subcommands();
    return engram::app::finish_stdout(1, ran.empty() ? std::string_view() : std::string_view(ran[0]->get_name()));
  }
  const auto ran = app.get_subcommands();
  return engram::app::finish_stdout(exit_code, ran.empty() ? std::string_view() : std::string_view(ran[0]->get_name()));
}
