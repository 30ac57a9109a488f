// `engramlab shm list|clean [--job-id ID] [--dir DIR]`: the /dev/shm segments
// engramlab jobs left, and removal of the stale ones (creator gone). A
// segment whose creator still runs is listed as in use and never removed.
#include <fmt/format.h>

#include <iostream>
#include <memory>
#include <string>

#include "apps/command_registry.h"
#include "backends/shm/posix_shared_memory.h"
#include "backends/shm/stale_segments.h"
#include "core/base/json_output.h"

namespace engram::app {
namespace {

struct ShmFlags {
  std::string job_id;  // empty: every engramlab job
  std::string dir = "/dev/shm";
  bool json = false;
};

Json segment_json(const shm::SegmentRecord& s) {
  return {{"name", s.name},
          {"path", s.path},
          {"file_bytes", s.file_bytes},
          {"header_valid", s.header_valid},
          {"creator_pid", s.creator_pid >= 0 ? Json(s.creator_pid) : Json(nullptr)},
          {"creator_alive", s.creator_alive},
          {"stale", s.stale()}};
}

// Under --json every outcome, an error too, is one document on stdout.
int fail(const ShmFlags& flags, const char* verb, const Status& status, int exit_code) {
  std::cerr << "error: " << status.to_string() << "\n";
  if (flags.json) std::cout << dump_json(error_document(std::string("shm ") + verb, status)) << "\n";
  return exit_code;
}

std::string prefix_of(const ShmFlags& flags) {
  return flags.job_id.empty() ? std::string("engramlab-") : shm::job_segment_prefix(flags.job_id);
}

int list(const ShmFlags& flags) {
  auto segments = shm::list_segments(flags.dir, prefix_of(flags));
  if (!segments.is_ok()) return fail(flags, "list", segments.status(), 2);
  if (flags.json) {
    Json j = json_document("shm list");
    j["dir"] = flags.dir;
    j["job_id"] = flags.job_id.empty() ? Json(nullptr) : Json(flags.job_id);
    j["segments"] = Json::array();
    for (const auto& seg : segments.value()) j["segments"].push_back(segment_json(seg));
    j["warnings"] = Json::array();
    j["error"] = nullptr;
    std::cout << dump_json(j) << "\n";
    return 0;
  }
  if (segments->empty()) std::cout << fmt::format("no engramlab segments under {}\n", flags.dir);
  for (const auto& s : segments.value()) std::cout << s.describe() << "\n";
  return 0;
}

int clean(const ShmFlags& flags) {
  auto removed = shm::remove_stale_segments(flags.dir, prefix_of(flags));
  if (!removed.is_ok()) return fail(flags, "clean", removed.status(), 1);
  if (flags.json) {
    Json j = json_document("shm clean");
    j["dir"] = flags.dir;
    j["job_id"] = flags.job_id.empty() ? Json(nullptr) : Json(flags.job_id);
    j["removed"] = Json::array();
    for (const auto& seg : removed.value()) j["removed"].push_back(segment_json(seg));
    j["warnings"] = Json::array();
    j["error"] = nullptr;
    std::cout << dump_json(j) << "\n";
    return 0;
  }
  for (const auto& s : removed.value()) std::cout << "removed: " << s.describe() << "\n";
  std::cout << fmt::format("{} stale segment(s) removed under {}; segments in use were kept\n", removed->size(),
                           flags.dir);
  return 0;
}

CommandRegistration reg("65-shm", [](CLI::App& app, int& exit_code) {
  auto flags = std::make_shared<ShmFlags>();
  CLI::App* cmd = app.add_subcommand("shm", "The /dev/shm segments engramlab jobs left: list them, remove stale ones");
  cmd->require_subcommand(1);
  for (const char* verb : {"list", "clean"}) {
    const bool is_clean = std::string(verb) == "clean";
    CLI::App* sub = cmd->add_subcommand(
        verb, is_clean ? "remove segments whose creating process is gone (never one still in use)"
                       : "list segments with their creator and whether it still runs");
    sub->add_option("--job-id", flags->job_id, "only this job's segments (default: every engramlab job)");
    sub->add_option("--dir", flags->dir, "the tmpfs directory (default /dev/shm)");
    sub->add_flag("--json", flags->json, "print a machine-readable JSON document");
    sub->callback([flags, is_clean, &exit_code] { exit_code = is_clean ? clean(*flags) : list(*flags); });
  }
});

}  // namespace
}  // namespace engram::app
