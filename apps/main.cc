#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cstring>
#include <iostream>
#include <map>
#include <string>

#include "apps/command_registry.h"
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

// How sizes are read everywhere a size is given (flags and YAML).
constexpr const char* kUnitsHelp =
    "Sizes take a unit (a bare number is refused):\n"
    "  B              bytes\n"
    "  KiB MiB GiB TiB  powers of 1024 (G and g alone mean GiB, as docker --shm-size, tmpfs and\n"
    "                   Kubernetes' Gi read them)\n"
    "  KB MB GB TB      powers of 1000 (190GB = 176.95 GiB)\n"
    "  Fractions are rounded to the nearest byte: 189.9GiB, 0.5MiB.\n";

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
  app.set_version_flag("--version", engram::app::version_text());
  app.footer(engram::app::kUnitsHelp);
  int exit_code = 0;
  engram::app::install_commands(app, exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0; any other parse error (unknown flag,
    // missing value) is bad input: exit 2, like our own validation. Under
    // --json the error is a JSON document on stdout too.
    const int cli_code = app.exit(e);
    if (cli_code == 0) return 0;
    bool json = false;
    std::string command;
    for (int i = 1; i < argc; ++i) {
      if (std::strcmp(argv[i], "--") == 0) break;
      if (std::strcmp(argv[i], "--json") == 0) json = true;
      else if (argv[i][0] != '-' && command.empty()) command = argv[i];
    }
    if (json) {
      std::cout << engram::dump_json(engram::error_document(command, engram::invalid_argument(e.what()))) << "\n";
    }
    return 2;
  }
  return exit_code;
}
