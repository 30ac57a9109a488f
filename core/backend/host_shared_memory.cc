#include "core/backend/host_shared_memory.h"

namespace engram {

std::string shm_segment_prefix(const std::string& job_id) { return "engramlab-" + job_id + "-"; }

}  // namespace engram
