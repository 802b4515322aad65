// A per-thread list of the best candidates, sorted by (squared distance, index).
#pragma once

#include <cuda_runtime.h>

#include <cmath>

namespace pcnn::detail {

/// The CAP best (smallest) squared distances seen so far, ascending, with their reference ids.
/// Candidates must be offered in increasing id order: then a strict `<` keeps an earlier
/// (smaller) id ahead of a later one at the same distance, which is the (distance, index)
/// tie-break without comparing ids. Small lists live in registers (every index is a
/// compile-time constant after unrolling); large ones would need hundreds of registers, so they
/// use a loop that stops at the insertion point and live in (L1-cached) local memory.
template <int CAP>
struct TopK {
  static constexpr bool kUnrolled = CAP <= 32;
  float d[CAP];
  int id[CAP];
  float worst;  // d[CAP - 1], kept in a register for the hot comparison

  __device__ __forceinline__ void init() {
#pragma unroll
    for (int i = 0; i < CAP; ++i) {
      d[i] = INFINITY;
      id[i] = -1;
    }
    worst = INFINITY;
  }

  /// Inserts a candidate known to satisfy dist < worst.
  __device__ __forceinline__ void insert(float dist, int nid) {
    if constexpr (kUnrolled) {
#pragma unroll
      for (int i = CAP - 1; i > 0; --i) {
        if (d[i - 1] > dist) {
          d[i] = d[i - 1];
          id[i] = id[i - 1];
        } else if (d[i] > dist) {
          d[i] = dist;
          id[i] = nid;
        }
      }
      if (d[0] > dist) {
        d[0] = dist;
        id[0] = nid;
      }
    } else {
      int i = CAP - 1;
#pragma unroll 1
      while (i > 0 && d[i - 1] > dist) {
        d[i] = d[i - 1];
        id[i] = id[i - 1];
        --i;
      }
      d[i] = dist;
      id[i] = nid;
    }
    worst = d[CAP - 1];
  }

  __device__ __forceinline__ void offer(float dist, int nid) {
    if (dist < worst) insert(dist, nid);
  }
};

}  // namespace pcnn::detail
