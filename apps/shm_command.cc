// `engramlab shm list|clean [--job-id ID] [--dir DIR]`: the /dev/shm segments
// engramlab jobs left, and removal of the stale ones (our header, ours, and
// provably unused: no process holds its lock). A segment in use, one whose
// use cannot be proven either way, a file without our
// header, another user's file, or anything that is not a regular file is
// listed and never removed. `clean` also sweeps the socket directories of
// jobs nobody listens for any more (--socket-root, default the one jobs use).
// Exit codes: 0 done; 1 a removal failed; 2 bad input (a missing --dir).
#include <fmt/format.h>

#include <iostream>
#include <memory>
#include <string>

#include "apps/command_registry.h"
#include "backends/ipc/launch_env.h"
#include "backends/ipc/socket_dir.h"
#include "backends/shm/posix_shared_memory.h"
#include "backends/shm/stale_segments.h"
#include "core/base/json_output.h"

namespace engram::app {
namespace {

struct ShmFlags {
  std::string job_id;  // empty: every engramlab job
  std::string dir = "/dev/shm";
  std::string socket_root;  // empty: ipc::default_socket_root()
  bool json = false;
};

Json segment_json(const shm::SegmentRecord& s) {
  return {{"name", s.name},
          {"path", s.path},
          {"kind", s.kind},
          {"file_bytes", s.file_bytes},
          {"owner_uid", s.owner_uid},
          {"header_valid", s.header_valid},
          {"creator_pid", s.creator_pid >= 0 ? Json(s.creator_pid) : Json(nullptr)},
          {"creator_alive", s.creator_alive},
          {"liveness", s.liveness},
          {"stale", s.stale()}};
}

// Under --json every outcome, an error too, is one document on stdout.
int fail(const ShmFlags& flags, const char* verb, const Status& status) {
  const int exit_code = status.code() == ErrorCode::kInvalidArgument ? 2 : 1;
  std::cerr << "error: " << status.to_string() << "\n";
  if (flags.json) std::cout << dump_json(error_document(std::string("shm ") + verb, status)) << "\n";
  return exit_code;
}

shm::SegmentScope scope_of(const ShmFlags& flags) {
  return flags.job_id.empty() ? shm::SegmentScope::every_job() : shm::SegmentScope::of_job(flags.job_id);
}

// The segments, or bad input when --dir or --job-id is wrong.
Result<std::vector<shm::SegmentRecord>> segments_of(const ShmFlags& flags, bool remove) {
  if (!flags.job_id.empty()) ENGRAM_RETURN_IF_ERROR(ipc::check_job_id(flags.job_id, "--job-id"));
  auto r = remove ? shm::remove_stale_segments(flags.dir, scope_of(flags))
                  : shm::list_segments(flags.dir, scope_of(flags));
  if (!r.is_ok() && r.status().code() == ErrorCode::kNotFound) {
    return invalid_argument(fmt::format("--dir {}: no such directory; give the tmpfs directory, e.g. --dir /dev/shm",
                                        flags.dir));
  }
  return r;
}

int list(const ShmFlags& flags) {
  auto segments = segments_of(flags, /*remove=*/false);
  if (!segments.is_ok()) return fail(flags, "list", segments.status());
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
  auto removed = segments_of(flags, /*remove=*/true);
  if (!removed.is_ok()) return fail(flags, "clean", removed.status());
  const std::string root = flags.socket_root.empty() ? ipc::default_socket_root() : flags.socket_root;
  auto swept = ipc::sweep_stale_socket_dirs(root, flags.job_id);
  if (!swept.is_ok()) return fail(flags, "clean", swept.status());
  int dirs_removed = 0;
  for (const auto& d : swept.value()) dirs_removed += d.removed ? 1 : 0;
  // What stays, each with its reason (in use, unprovable, not ours).
  auto kept = segments_of(flags, /*remove=*/false);
  if (!kept.is_ok()) return fail(flags, "clean", kept.status());
  if (flags.json) {
    Json j = json_document("shm clean");
    j["dir"] = flags.dir;
    j["job_id"] = flags.job_id.empty() ? Json(nullptr) : Json(flags.job_id);
    j["removed"] = Json::array();
    for (const auto& seg : removed.value()) j["removed"].push_back(segment_json(seg));
    j["kept"] = Json::array();
    for (const auto& seg : kept.value()) j["kept"].push_back(segment_json(seg));
    j["socket_root"] = root;
    j["socket_dirs"] = Json::array();
    for (const auto& d : swept.value())
      j["socket_dirs"].push_back({{"path", d.path}, {"removed", d.removed}, {"outcome", d.outcome}});
    j["warnings"] = Json::array();
    j["error"] = nullptr;
    std::cout << dump_json(j) << "\n";
    return 0;
  }
  for (const auto& s : removed.value()) std::cout << "removed: " << s.describe() << "\n";
  for (const auto& s : kept.value()) std::cout << "kept: " << s.describe() << "\n";
  std::cout << fmt::format("{} stale segment(s) removed under {}; {} kept (in use, not provably unused, or not "
                           "engramlab's)\n",
                           removed->size(), flags.dir, kept->size());
  for (const auto& d : swept.value()) std::cout << fmt::format("{}: {}\n", d.path, d.outcome);
  std::cout << fmt::format("{} socket director{} of ended jobs removed under {}\n", dirs_removed,
                           dirs_removed == 1 ? "y" : "ies", root);
  return 0;
}

CommandRegistration shm_registration("65-shm", [](CLI::App& app, int& exit_code) {
  auto flags = std::make_shared<ShmFlags>();
  CLI::App* cmd = app.add_subcommand("shm", "The /dev/shm segments engramlab jobs left: list them, remove stale ones");
  cmd->require_subcommand(1);
  for (const char* verb : {"list", "clean"}) {
    const bool is_clean = std::string(verb) == "clean";
    CLI::App* sub = cmd->add_subcommand(
        verb, is_clean ? "remove segments whose creating process is gone (never one still in use), and the socket "
                         "directories of jobs that ended"
                       : "list segments with their creator and whether it still runs");
    sub->add_option("--job-id", flags->job_id, "only this job's segments (default: every engramlab job)");
    sub->add_option("--dir", flags->dir, "the tmpfs directory (default /dev/shm)");
    if (is_clean) {
      sub->add_option("--socket-root", flags->socket_root,
                      "where the jobs' socket directories are (default: $XDG_RUNTIME_DIR/engramlab, /run/engramlab "
                      "for root, else /tmp/engramlab-<uid>)");
    }
    sub->add_flag("--json", flags->json, "print a machine-readable JSON document");
    sub->callback([flags, is_clean, &exit_code] { exit_code = is_clean ? clean(*flags) : list(*flags); });
  }
});

}  // namespace
}  // namespace engram::app
