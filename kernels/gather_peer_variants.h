// The V4.1-row (dim 256 FP8) kernel variants behind gather_peer, named so
// that the benchmark's variant sweep and the GPU tests can run each one;
// gather_peer itself runs peer_variant_for(tokens x heads, ...). Every
// variant gives the same bits; they differ only in speed. Plain C++ header.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/base/status.h"
#include "kernels/gather_kernels.h"

namespace engram::kernels {

struct PeerVariant {
  int rows_per_warp = 1;          // rows one warp loads before it stores any
  bool wide_loads = false;        // one 16-byte load per lane 0..16 per row; else 8-byte data + scale loads
  bool streaming_stores = false;  // st.global.cs: the output does not evict the table's lines from L2
  bool operator==(const PeerVariant& o) const {
    return rows_per_warp == o.rows_per_warp && wide_loads == o.wide_loads && streaming_stores == o.streaming_stores;
  }
};

// e.g. "r1-w16-cs"
std::string peer_variant_name(const PeerVariant& variant);

// Every variant compiled in.
const std::vector<PeerVariant>& peer_variants();

// The variant gather_peer runs for `row_slots` (tokens x heads) on the
// current GPU.
PeerVariant peer_variant_for(int64_t row_slots);

// gather_peer with the variant forced. kInvalidArgument when the layout is
// not the V4.1 row on the vector path or the variant is not compiled in.
Status gather_peer_variant(const GatherPeerArgs& args, const PeerVariant& variant, cudaStream_t stream);

}  // namespace engram::kernels
