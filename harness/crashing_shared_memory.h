// For crash tests: a HostSharedMemory that forwards to another and SIGKILLs
// this process at the n-th call of one operation ("shm_create:2" dies at the
// second create, before making it: after the first table was created and
// filled), so a rank can die mid-load inside the unchanged runtime.
#pragma once

#include <string>

#include "core/backend/host_shared_memory.h"
#include "core/base/status.h"

namespace engram::harness {

struct CrashPoint {
  enum class Operation { kCreate, kOpenReadOnly } operation = Operation::kCreate;
  int occurrence = 1;
};

// "shm_create:N" or "shm_open:N" (N >= 1); errors name the text and the forms.
Result<CrashPoint> parse_crash_point(const std::string& text);

class CrashingSharedMemory final : public HostSharedMemory {
 public:
  CrashingSharedMemory(HostSharedMemory& inner, CrashPoint point) : inner_(inner), point_(point) {}

  Result<ShmInfo> info() override { return inner_.info(); }
  Result<std::unique_ptr<ShmMapping>> create(const std::string& name, uint64_t bytes) override;
  Result<std::unique_ptr<ShmMapping>> open_read_only(const std::string& name, uint64_t bytes) override;
  Status unlink(const std::string& name) override { return inner_.unlink(name); }

 private:
  void maybe_die(CrashPoint::Operation operation, const std::string& name);
  HostSharedMemory& inner_;
  CrashPoint point_;
  int creates_ = 0;
  int opens_ = 0;
};

}  // namespace engram::harness
