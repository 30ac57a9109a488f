#include "apps/emulated_driver_launch.h"

#include <fmt/format.h>
#include <stdlib.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <system_error>

#ifdef ENGRAM_HAVE_EMULATED_DRIVER
#include "backends/emulated_driver/emulated_world.h"
#include "backends/emulated_driver/world_file.h"
#endif

namespace engram::app {

#ifdef ENGRAM_HAVE_EMULATED_DRIVER
namespace {

// The emulated libraries' folder, or failed_precondition saying how to build them.
Result<std::string> emulated_driver_lib_dir(const std::string& flag) {
  const char* lib = std::getenv("ENGRAMLAB_EMULATED_DRIVER_LIB");
  const std::string dir = lib != nullptr && *lib != '\0' ? lib : ENGRAM_EMULATED_DRIVER_LIB_DIR;
  if (::access((dir + "/libcuda.so.1").c_str(), R_OK) != 0 || ::access((dir + "/libnvidia-ml.so.1").c_str(), R_OK) != 0)
    return failed_precondition(fmt::format(
        "{}: no emulated libcuda.so.1 / libnvidia-ml.so.1 in {}: build them (cmake --build build "
        "--target engram_emulated_cuda engram_emulated_nvml) or point ENGRAMLAB_EMULATED_DRIVER_LIB at them",
        flag, dir));
  return dir;
}

}  // namespace
#endif

Result<EmulatedDriverJob> emulated_driver_job_for_world(const std::string& world_path) {
#ifndef ENGRAM_HAVE_EMULATED_DRIVER
  return failed_precondition(fmt::format(
      "--emulated-world {}: this build has no emulated CUDA driver (cuda.h was not found at configure time, "
      "or it is a sanitizer build); "
      "install the CUDA toolkit headers and reconfigure",
      world_path));
#else
  EmulatedDriverJob job;
  ENGRAM_ASSIGN_OR_RETURN(job.lib_dir, emulated_driver_lib_dir("--emulated-world"));
  job.world_path = world_path;
  std::string text;
  FILE* in = std::fopen(world_path.c_str(), "r");
  if (in == nullptr)
    return failed_precondition(fmt::format("--emulated-world {}: cannot read it: {}", world_path, std::strerror(errno)));
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, in)) > 0;) text.append(buf, n);
  std::fclose(in);
  emulated::World world;
  std::string why;
  if (!emulated::parse_world(text, world, why))
    return invalid_argument(fmt::format("--emulated-world {}: {}", world_path, why));
  for (const emulated::LocalPlace& p : emulated::local_places(world.rank_hosts))
    job.local.push_back({p.local_rank, p.local_world_size});
  return job;
#endif
}

Result<EmulatedDriverJob> prepare_emulated_driver(const std::string& deployment_path) {
#ifndef ENGRAM_HAVE_EMULATED_DRIVER
  return failed_precondition(fmt::format(
      "--emulate-driver {}: this build has no emulated CUDA driver (cuda.h was not found at configure time, "
      "or it is a sanitizer build); "
      "install the CUDA toolkit headers and reconfigure",
      deployment_path));
#else
  // The libraries first: nothing is made for a job that cannot start.
  ENGRAM_RETURN_IF_ERROR(emulated_driver_lib_dir("--emulate-driver").status());
  std::string templ = "/tmp/engramlab-emulated-XXXXXX";
  if (::mkdtemp(templ.data()) == nullptr)
    return failed_precondition(fmt::format("--emulate-driver: cannot make a directory under /tmp for the world file"));
  EmulatedDriverJob made;
  made.dir = templ;
  const std::string world_path = made.dir + "/world";
  Status written = emulated::write_world_file(deployment_path, world_path);
  if (!written.is_ok()) {
    remove_emulated_driver_job(made);
    return Status(written.code(), fmt::format("--emulate-driver {}: {}", deployment_path, written.message()));
  }
  auto job = emulated_driver_job_for_world(world_path);
  ENGRAM_CHECK(job.is_ok());  // the file was just written from a valid deployment
  job->dir = made.dir;
  return job;
#endif
}

std::vector<std::pair<std::string, std::string>> emulated_driver_environment(const EmulatedDriverJob& job, int rank) {
  const char* path = std::getenv("LD_LIBRARY_PATH");
  const std::string library_path = path != nullptr && *path != '\0' ? job.lib_dir + ":" + path : job.lib_dir;
  const auto& [local_rank, local_world] = job.local.at(static_cast<size_t>(rank));
  return {{"LD_LIBRARY_PATH", library_path},
          {"ENGRAMLAB_EMULATED_WORLD", job.world_path},
          {"LOCAL_RANK", std::to_string(local_rank)},
          {"LOCAL_WORLD_SIZE", std::to_string(local_world)}};
}

void remove_emulated_driver_job(const EmulatedDriverJob& job) {
  std::error_code ignored;
  if (!job.dir.empty()) std::filesystem::remove_all(job.dir, ignored);
}

}  // namespace engram::app
