// What `engramlab launch` settles before it starts a rank: the engine whose
// rules the job plans by (--engine, else the launcher's own
// ENGRAMLAB_ENGINE, else --file's engine.name: apps/engine_choice.h), and
// with --file the deployment planned under that engine, as `plan --file
// --engine` would, so a layout the engine refuses, or one that cannot run,
// stops the launch before any rank exists. The engine is handed to every
// rank as ENGRAMLAB_ENGINE, which the commands they run (acceptance, bench,
// doctor) plan by.
#pragma once

#include <string>
#include <vector>

#include "core/base/status.h"

namespace engram::app {

struct LaunchPlan {
  std::string engine;              // the ranks' ENGRAMLAB_ENGINE; "" leaves the environment as it is
  std::vector<std::string> lines;  // what the plan of the file says, for stderr
};

// `engine_flag` "" is not given; `file` "" is none; `world` the job's ranks
// (nodes x ranks per node). invalid_argument (exit 2): a bad engine name, a
// file that cannot be read, a world that is not the file's, a config the
// engine refuses; another error (exit 1): the file's deployment cannot run
// (the memory fit, no handle type).
Result<LaunchPlan> plan_before_launch(const std::string& engine_flag, const std::string& file, int world);

}  // namespace engram::app
