// A per-thread list of the best candidates, sorted by (squared distance, index).
#pragma once

#include <cuda_runtime.h>

#include <climits>
#include <cmath>
#include <cstdint>

namespace pcnn::detail {

/// The k best (smallest) squared distances seen so far, ascending by (distance, id), in a list
/// of compile-time capacity CAP >= k (positions k..CAP-1 are scratch).
///
/// kInOrder: candidates arrive in increasing id order (brute force). Then a strict `<` on the
/// distance alone keeps an earlier (smaller) id ahead of a later one at the same distance. The
/// tree search visits candidates in spatial order, so it compares (distance, id) pairs.
///
/// Brute force keeps small lists in registers (every index a compile-time constant after
/// unrolling). Large lists, and the tree search's lists (whose (distance, id) comparisons and
/// traversal state would otherwise take most of the register file and cut occupancy), use a loop
/// that stops at the insertion point and live in (L1-cached) local memory. Insertions are rare;
/// `worst` mirrors entry k-1 in a register for the hot test.
template <int CAP, bool kInOrder>
struct TopK {
  static constexpr bool kUnrolled = kInOrder && CAP <= 32;
  float d[CAP];
  int id[CAP];
  float worst;   // d[k - 1]
  int worst_id;  // id[k - 1]
  int k;

  __device__ __forceinline__ void init(int k_) {
    k = k_;
#pragma unroll
    for (int i = 0; i < CAP; ++i) {
      d[i] = INFINITY;
      id[i] = INT_MAX;
    }
    worst = INFINITY;
    worst_id = INT_MAX;
  }

  // (da, ia) comes before (db, ib).
  static __device__ __forceinline__ bool before(float da, int ia, float db, int ib) {
    if (kInOrder) return da < db;
    return da < db || (da == db && ia < ib);
  }

  /// True when a candidate at `dist` with id `nid` belongs in the list.
  __device__ __forceinline__ bool improves(float dist, int nid) const {
    return before(dist, nid, worst, worst_id);
  }

  /// Inserts a candidate for which improves() holds.
  __device__ __forceinline__ void insert(float dist, int nid) {
    if constexpr (kUnrolled) {
#pragma unroll
      for (int i = CAP - 1; i > 0; --i) {
        if (before(dist, nid, d[i - 1], id[i - 1])) {
          d[i] = d[i - 1];
          id[i] = id[i - 1];
        } else if (before(dist, nid, d[i], id[i])) {
          d[i] = dist;
          id[i] = nid;
        }
      }
      if (before(dist, nid, d[0], id[0])) {
        d[0] = dist;
        id[0] = nid;
      }
#pragma unroll
      for (int i = 0; i < CAP; ++i) {
        if (i == k - 1) {
          worst = d[i];
          worst_id = id[i];
        }
      }
    } else {
      int i = k - 1;
#pragma unroll 1
      while (i > 0 && before(dist, nid, d[i - 1], id[i - 1])) {
        d[i] = d[i - 1];
        id[i] = id[i - 1];
        --i;
      }
      d[i] = dist;
      id[i] = nid;
      worst = d[k - 1];
      worst_id = id[k - 1];
    }
  }

  __device__ __forceinline__ void offer(float dist, int nid) {
    if (improves(dist, nid)) insert(dist, nid);
  }

  /// Writes the k entries as (index, squared distance), -1 / +inf where the list is short.
  /// `map` turns a list id into the index the caller wants (or is null for the id itself).
  __device__ __forceinline__ void write(std::int32_t* out_idx, float* out_dist,
                                        const int* __restrict__ map) const {
#pragma unroll
    for (int i = 0; i < CAP; ++i) {
      if (i < k) {
        const bool ok = id[i] != INT_MAX;
        out_idx[i] = ok ? (map ? map[id[i]] : id[i]) : -1;
        out_dist[i] = ok ? d[i] : INFINITY;
      }
    }
  }
};

}  // namespace pcnn::detail
