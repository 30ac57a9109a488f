// The V4.1 fast path's launches (kernels/v41_fast_path.cu), for the shard
// gather and the host-table kernels; the public variant API is
// kernels/gather_peer_variants.h. The callers have checked the arguments and
// that the rows are V4.1 rows on the vector path. Internal to kernels/;
// plain C++ header.
#pragma once

#include <cuda_runtime_api.h>

#include "core/base/status.h"
#include "kernels/gather_kernels.h"
#include "kernels/gather_peer_variants.h"

namespace engram::kernels::detail {

// gather_peer's fast path with `variant`.
Status launch_v41_peer(const GatherPeerArgs& args, const PeerVariant& variant, cudaStream_t stream);
// gather_owned's: 1, 2 or 4 rows per warp by size.
Status launch_v41_owned(const GatherOwnedArgs& args, cudaStream_t stream);
// gather_range's: one row per warp over the head window, rows in place at `base`.
Status launch_v41_range(const HostRowsArgs& args, const void* base, cudaStream_t stream);

}  // namespace engram::kernels::detail
