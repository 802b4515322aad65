// The brute-force kNN kernel: each block stages tiles of reference points in shared memory and
// every thread scans them for its own query.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "pack_points.cuh"
#include "topk.cuh"

namespace pcnn::detail {

inline constexpr int kBruteBlock = 128;
inline constexpr int kBruteTile = 512;  // float4s: 8 KiB of shared memory

template <bool kSkipSelf, int CAP>
__device__ __forceinline__ void scan_tile(const float4* tile, float4 q, int base, int self,
                                          TopK<CAP>& best) {
  // Every thread reads the same tile element at the same time: a broadcast, no bank conflicts.
  // Four distances share one threshold test, so the common case (no candidate beats the
  // current k-th best) costs one compare and branch per four points.
#pragma unroll 4
  for (int t = 0; t < kBruteTile; t += 4) {
    float d[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const float4 p = tile[t + u];
      const float dx = p.x - q.x, dy = p.y - q.y, dz = p.z - q.z;
      d[u] = dx * dx + dy * dy + dz * dz;
      if (kSkipSelf && base + t + u == self) d[u] = INFINITY;
    }
    const float m = fminf(fminf(d[0], d[1]), fminf(d[2], d[3]));
    if (m < best.worst) {
#pragma unroll
      for (int u = 0; u < 4; ++u) best.offer(d[u], base + t + u);
    }
  }
}

/// One thread per query. References past the end of the last tile are padded with points at
/// infinity, which never beat a threshold (distances are finite for finite inputs). Results are
/// written as original indices (through ref_ids) with -1 / +inf padding.
template <int CAP>
__global__ void __launch_bounds__(kBruteBlock)
    knn_brute_kernel(const float4* __restrict__ refs, const int* __restrict__ ref_count,
                     const int* __restrict__ ref_ids, const float4* __restrict__ queries,
                     int n_queries, int k, std::int32_t* __restrict__ out_idx,
                     float* __restrict__ out_dist) {
  __shared__ float4 tile[kBruteTile];
  const int n_refs = *ref_count;
  const int q = blockIdx.x * kBruteBlock + threadIdx.x;
  const float4 qp = q < n_queries ? queries[q] : make_float4(0.f, 0.f, 0.f, 0.f);
  const int tag = q < n_queries ? __float_as_int(qp.w) : kQueryInvalid;
  const bool active = tag != kQueryInvalid;

  TopK<CAP> best;
  best.init();
  for (int base = 0; base < n_refs; base += kBruteTile) {
    for (int t = threadIdx.x; t < kBruteTile; t += kBruteBlock) {
      const int j = base + t;
      tile[t] = j < n_refs ? refs[j] : make_float4(INFINITY, INFINITY, INFINITY, 0.f);
    }
    __syncthreads();
    if (active) {
      // Only the tile holding the query itself pays for the self test.
      if (tag >= base && tag < base + kBruteTile)
        scan_tile<true>(tile, qp, base, tag, best);
      else
        scan_tile<false>(tile, qp, base, -1, best);
    }
    __syncthreads();
  }
  if (q >= n_queries) return;
  const std::size_t row = static_cast<std::size_t>(q) * k;
#pragma unroll
  for (int i = 0; i < CAP; ++i) {
    if (i < k) {
      const int id = best.id[i];
      out_idx[row + i] = id >= 0 ? ref_ids[id] : -1;
      out_dist[row + i] = id >= 0 ? best.d[i] : INFINITY;
    }
  }
}

}  // namespace pcnn::detail
