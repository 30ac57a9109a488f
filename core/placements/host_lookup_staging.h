// The host lookup of a placement whose rows only the device reads
// (device_peer, device_collective): the ids uploaded to device buffers, the
// placement's device lookup run, the output downloaded. One path for both
// kinds of caller: the host lookup is the device lookup with a copy on each
// side, so tests, scenarios and the swarm check what the device computes.
#pragma once

#include <cstdint>
#include <functional>

#include "core/backend/device_compute.h"
#include "core/lookup/device_lookup.h"
#include "core/lookup/lookup_types.h"

namespace engram {

class HostLookupStaging {
 public:
  using DeviceLookup = std::function<Status(const DeviceLookupRequest& request)>;

  // Buffers for up to `tokens` tokens of the model's widest table.
  static Result<HostLookupStaging> make(DeviceCompute& compute, const ModelSpec& model, int64_t tokens);
  HostLookupStaging() = default;

  // Runs `device_lookup` for `request`: a well-formed request within the
  // staging buffers uploads its ids and downloads the output (its token
  // shard where request.sequence_parallel_shards asks for one); any other
  // still reaches device_lookup with contribute false (so a collective
  // placement's peers finish), and its error is returned. Grows the
  // buffers first when the request's slot is larger than they hold.
  Status run(DeviceCompute& compute, const LookupRequest& request, int world_rank, const DeviceLookup& device_lookup);

  Status release(DeviceCompute& compute);

 private:
  Status reserve(DeviceCompute& compute, int64_t tokens);

  int64_t tokens_ = 0;
  int heads_max_ = 0;
  int dim_max_ = 0;
  DevicePtr ids_ = 0;
  DevicePtr out_ = 0;
};

}  // namespace engram
