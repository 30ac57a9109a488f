#include <CLI/CLI.hpp>

int main(int argc, char** argv) {
  CLI::App app{"engramlab: place, share and look up Engram tables"};
  app.require_subcommand(1);
  CLI11_PARSE(app, argc, argv);
  return 0;
}
