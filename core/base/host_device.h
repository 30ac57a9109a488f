// ENGRAM_HOST_DEVICE: marks an inline function both the CPU and the GPU
// compile (nvcc: __host__ __device__; every other compiler: nothing), so a
// rule written once runs bit for bit alike on both (core/model/table_fill_row.h,
// core/model/request_hash_words.h). Plain C++: no CUDA header.
#pragma once

#if defined(__CUDACC__)
#define ENGRAM_HOST_DEVICE __host__ __device__
#else
#define ENGRAM_HOST_DEVICE
#endif
