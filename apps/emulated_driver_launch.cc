#include "apps/emulated_driver_launch.h"

#include <fmt/format.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <system_error>

#ifdef ENGRAM_HAVE_EMULATED_DRIVER
#include "backends/emulated_driver/emulated_world.h"
#include "backends/emulated_driver/world_file.h"
#endif

namespace engram::app {

Result<EmulatedDriverJob> prepare_emulated_driver(const std::string& deployment_path) {
#ifndef ENGRAM_HAVE_EMULATED_DRIVER
  return failed_precondition(fmt::format(
      "--emulate-driver {}: this build has no emulated CUDA driver (cuda.h was not found at configure time); "
      "install the CUDA toolkit headers and reconfigure",
      deployment_path));
#else
  EmulatedDriverJob job;
  const char* lib = std::getenv("ENGRAMLAB_EMULATED_DRIVER_LIB");
  job.lib_dir = lib != nullptr && *lib != '\0' ? lib : ENGRAM_EMULATED_DRIVER_LIB_DIR;
  if (::access((job.lib_dir + "/libcuda.so.1").c_str(), R_OK) != 0 ||
      ::access((job.lib_dir + "/libnvidia-ml.so.1").c_str(), R_OK) != 0)
    return failed_precondition(fmt::format(
        "--emulate-driver: no emulated libcuda.so.1 / libnvidia-ml.so.1 in {}: build them (cmake --build build "
        "--target engram_emulated_cuda engram_emulated_nvml) or point ENGRAMLAB_EMULATED_DRIVER_LIB at them",
        job.lib_dir));
  std::string templ = "/tmp/engramlab-emulated-XXXXXX";
  if (::mkdtemp(templ.data()) == nullptr)
    return failed_precondition(fmt::format("--emulate-driver: cannot make a directory under /tmp for the world file"));
  job.dir = templ;
  job.world_path = job.dir + "/world";
  if (Status s = emulated::write_world_file(deployment_path, job.world_path); !s.is_ok()) {
    remove_emulated_driver_job(job);
    return Status(s.code(), fmt::format("--emulate-driver {}: {}", deployment_path, s.message()));
  }
  emulated::World world;
  std::string why;
  std::string text;
  {
    FILE* in = std::fopen(job.world_path.c_str(), "r");
    char buf[4096];
    for (size_t n; in != nullptr && (n = std::fread(buf, 1, sizeof buf, in)) > 0;) text.append(buf, n);
    if (in != nullptr) std::fclose(in);
  }
  ENGRAM_CHECK(emulated::parse_world(text, world, why));
  for (const emulated::LocalPlace& p : emulated::local_places(world.rank_hosts))
    job.local.push_back({p.local_rank, p.local_world_size});
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
