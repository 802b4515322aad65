// The brute-force kNN kernel: each block stages tiles of reference points in shared memory and
// every thread scans them for its own query.
#pragma once

#include <cuda_runtime.h>

#include <climits>
#include <cstdint>

#include "distance.cuh"
#include "pack_points.cuh"
#include "topk.cuh"

namespace pcnn::detail {

inline constexpr int kBruteBlock = 128;
inline constexpr int kBruteTile = 512;  // float4s: 8 KiB of shared memory

template <bool kSkipSelf, int CAP>
__device__ __forceinline__ void scan_tile(const float4* tile, float4 q, int base, int self,
                                          TopK<CAP, true>& best) {
  // Every thread reads the same tile element at the same time: a broadcast, no bank conflicts.
  // Four distances share one threshold test, so the common case (no candidate beats the
  // current k-th best) costs one compare and branch per four points.
#pragma unroll 4
  for (int t = 0; t < kBruteTile; t += 4) {
    float d[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      d[u] = point_dist2(q, tile[t + u]);
      if (kSkipSelf && base + t + u == self) d[u] = INFINITY;
    }
    const float m = fminf(fminf(d[0], d[1]), fminf(d[2], d[3]));
    if (m < best.worst) {  // candidates arrive in id order: distance alone decides
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

  TopK<CAP, true> best;
  best.init(k);
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
  best.write(out_idx + row, out_dist + row, ref_ids);
}

}  // namespace pcnn::detail
