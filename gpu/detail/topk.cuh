// Lists of the best candidates by (squared distance, index): kept sorted (TopK, WarpTopK), or a
// heap sorted at the end (HeapTopK).
#pragma once

#include <cuda_runtime.h>

#include <climits>
#include <cmath>
#include <cstdint>

#include "exact.cuh"
#include "warp_reduce.cuh"

namespace pcnn::detail {

/// Storage of a list in the thread's own arrays: (L1-cached) local memory, since insertion
/// indexes it at run time (the outlier search's lists: a warp holds one).
template <int CAP>
struct ThreadSlots {
  float d_[CAP];
  int id_[CAP];
  __device__ __forceinline__ float& d(int i) { return d_[i]; }
  __device__ __forceinline__ int& id(int i) { return id_[i]; }
  __device__ __forceinline__ float d(int i) const { return d_[i]; }
  __device__ __forceinline__ int id(int i) const { return id_[i]; }
};

/// Storage in shared memory, `stride` apart (the block's thread count, so that a warp's 32 lanes
/// touch 32 consecutive words: no bank conflicts). Unlike local memory, it cannot be evicted to
/// L2 when many warps each hold a long list.
struct SharedSlots {
  float* d_;
  int* id_;
  int stride;
  __device__ __forceinline__ float& d(int i) { return d_[i * stride]; }
  __device__ __forceinline__ int& id(int i) { return id_[i * stride]; }
  __device__ __forceinline__ float d(int i) const { return d_[i * stride]; }
  __device__ __forceinline__ int id(int i) const { return id_[i * stride]; }
};

/// Storage in the block's shared memory at a compile-time stride (kStride words: the block's
/// thread count), the ids CAP * kStride words after the distances: every entry is then a constant
/// offset from one register. With SharedSlots (a stride known only at run time) an insertion
/// step of the kNN walk spent 6 of its 17 instructions on addresses, and the unrolled init kept
/// an address register per entry: ptxas spills of knn_tree_kernel<8, false> 78 -> 50 bytes, 167 ->
/// 90 registers at CAP 64; searches of 1M points 5-15 % faster from k = 8 to 64
/// (bench/results/2026-11-29-round26.md).
template <int CAP, int kStride>
struct BlockSlots {
  float* d_;  // this thread's entry 0
  __device__ __forceinline__ float& d(int i) { return d_[i * kStride]; }
  __device__ __forceinline__ int& id(int i) {
    return reinterpret_cast<int*>(d_)[(CAP + i) * kStride];
  }
  __device__ __forceinline__ float d(int i) const { return d_[i * kStride]; }
  __device__ __forceinline__ int id(int i) const {
    return reinterpret_cast<const int*>(d_)[(CAP + i) * kStride];
  }
};

/// The nearest points a search was offered and did not keep (rejected, or pushed out of its k):
/// the float distance and id of the nearest (the list's id: for the tree searches, a position in
/// the index), and the float distance of the second. NaN: none.
struct Spill {
  float d = NAN, d2 = NAN;
  int id = -1;
  __device__ __forceinline__ void add(float dist, int nid) {
    if (!(dist >= d)) {  // nearer, or the first
      d2 = d;
      d = dist;
      id = nid;
    } else {
      d2 = fminf(d2, dist);
    }
  }
};

/// The k best (smallest) (squared distance, id) pairs seen so far, ascending, in a list of
/// compile-time capacity CAP >= k (positions k..CAP-1 are scratch). Candidates arrive in spatial
/// order, so pairs are compared (distance, then id): ties go to the smaller id.
///
/// For the exact refinement (refine.cuh) the list also keeps its Spill, and asks the scan for
/// every point within `limit` = FilterError::widen(worst), a little beyond the k-th: where the
/// spill lies against the refinement's reach then tells whether the k (or the k and the nearest
/// spilled point) can be settled alone.
///
/// Insertion is a loop that stops at the insertion point (a fully unrolled (distance, id)
/// insertion takes most of the register file and cuts occupancy). Insertions are rare; `worst`
/// mirrors entry k-1 in a register for the hot test.
template <int CAP, class Slots = ThreadSlots<CAP>>
struct TopK {
  Slots s;
  float worst;   // d[k - 1]
  int worst_id;  // id[k - 1]
  int k;
  float limit;  // widen(worst): the scan offers every point within it
  int held;     // entries held: [0, held) sorted, the rest free (INFINITY, INT_MAX)
  Spill spill;

  /// An empty list.
  __device__ __forceinline__ void init(int k_) {
    k = k_;
#pragma unroll
    for (int i = 0; i < CAP; ++i) {
      s.d(i) = INFINITY;
      s.id(i) = INT_MAX;
    }
    worst = INFINITY;
    worst_id = INT_MAX;
    limit = INFINITY;
    held = 0;
    spill = Spill{};
  }

  // (da, ia) comes before (db, ib).
  static __device__ __forceinline__ bool before(float da, int ia, float db, int ib) {
    return da < db || (da == db && ia < ib);
  }

  /// True when a candidate at `dist` with id `nid` belongs in the list.
  __device__ __forceinline__ bool improves(float dist, int nid) const {
    return before(dist, nid, worst, worst_id);
  }

  /// Offers a point within `limit` (`term`: FilterError::widen_term()).
  __device__ __forceinline__ void offer(float dist, int nid, float term) {
    if (!improves(dist, nid)) {
      spill.add(dist, nid);
      return;
    }
    if (worst_id != INT_MAX) spill.add(worst, worst_id);  // the k-th leaves
    insert(dist, nid);
    limit = fminf(limit, FilterError::widen(worst, term));  // a seeded limit stays (bound())
  }

  /// Lowers the limit to widen(u) before the list is full, where u is the float distance of the
  /// k-th of some k distinct candidates: the list's final k-th distance w is then <= u, so
  /// widen(w) <= widen(u) (widen rounds upward, monotonically) and every point within the final
  /// limit is still offered, which is all the refinement asks (refine.cuh).
  __device__ __forceinline__ void bound(float u, float term) {
    limit = fminf(limit, FilterError::widen(u, term));
  }

  /// The number of entries held (k once full).
  __device__ __forceinline__ int count() const { return held; }

  /// Nothing to do: the list is kept sorted (HeapTopK sorts here).
  __device__ __forceinline__ void finish() {}

  /// Inserts a candidate for which improves() holds. It goes in at the first free slot (the last
  /// slot once the list is full) and moves up past the entries it comes before: started at the
  /// last slot while the list fills, each insertion also moved every free slot, about k² / 2
  /// moves to fill a list of k.
  __device__ __forceinline__ void insert(float dist, int nid) {
    // k = 1: the one slot, at a compile-time index (a per-thread list then lives in registers
    // rather than local memory).
    if constexpr (CAP == 1) {
      held = 1;
      s.d(0) = worst = dist;
      s.id(0) = worst_id = nid;
      return;
    }
    int i = held < k ? held++ : k - 1;
#pragma unroll 1
    while (i > 0) {
      const float pd = s.d(i - 1);
      const int pid = s.id(i - 1);
      if (!before(dist, nid, pd, pid)) break;
      s.d(i) = pd;
      s.id(i) = pid;
      --i;
    }
    s.d(i) = dist;
    s.id(i) = nid;
    worst = s.d(k - 1);
    worst_id = s.id(k - 1);
  }
};

/// The same list for long lists (the kNN walk's from CAP 32, the outlier search's above): a
/// max-heap by (distance, id) once it holds k, filled in arrival order until then. A better
/// candidate replaces the worst (the root) and sinks in log2(k) steps, where TopK's insertion moved
/// it past every entry it comes before: at 1M uniform points and k = 32 that loop took 78 % of the
/// walk's instructions, 15 entries moved an insertion, with 8 of 32 lanes active (ncu source
/// counters, bench/results/2026-11-29-round26.md). finish() then sorts it (heap sort), so that the
/// rows are settled from an ascending list as TopK's are. The list kept, the limit and the spill
/// are TopK's: the k smallest of what was offered, widen(the k-th), and the nearest two of the
/// rest.
template <int CAP, class Slots>
struct HeapTopK {
  Slots s;
  float worst;   // the root's distance once full, else INFINITY
  int worst_id;  // the root's id once full, else INT_MAX
  int k;
  float limit;  // widen(worst): the scan offers every point within it
  int held;     // entries held: in arrival order below k, a heap at k
  Spill spill;

  __device__ __forceinline__ void init(int k_) {
    k = k_;
    worst = INFINITY;
    worst_id = INT_MAX;
    limit = INFINITY;
    held = 0;
    spill = Spill{};
  }
  // (da, ia) comes after (db, ib): the heap's order, the worst at the root.
  static __device__ __forceinline__ bool after(float da, int ia, float db, int ib) {
    return da > db || (da == db && ia > ib);
  }
  __device__ __forceinline__ void bound(float u, float term) {
    limit = fminf(limit, FilterError::widen(u, term));
  }
  __device__ __forceinline__ int count() const { return held; }

  /// Places (d, id) at position i of the heap [0, n) and sinks it below its children.
  __device__ __forceinline__ void sift_down(int i, float d, int id, int n) {
#pragma unroll 1
    for (;;) {
      int c = 2 * i + 1;
      if (c >= n) break;
      float cd = s.d(c);
      int cid = s.id(c);
      if (c + 1 < n) {
        const float rd = s.d(c + 1);
        const int rid = s.id(c + 1);
        if (after(rd, rid, cd, cid)) {
          ++c;
          cd = rd;
          cid = rid;
        }
      }
      if (!after(cd, cid, d, id)) break;
      s.d(i) = cd;
      s.id(i) = cid;
      i = c;
    }
    s.d(i) = d;
    s.id(i) = id;
  }
  __device__ __forceinline__ void heapify(int n) {
#pragma unroll 1
    for (int i = n / 2 - 1; i >= 0; --i) sift_down(i, s.d(i), s.id(i), n);
  }
  __device__ __forceinline__ void take_root(float term) {
    worst = s.d(0);
    worst_id = s.id(0);
    limit = fminf(limit, FilterError::widen(worst, term));  // a seeded limit stays (bound())
  }

  /// Offers a point within `limit` (`term`: FilterError::widen_term()).
  __device__ __forceinline__ void offer(float dist, int nid, float term) {
    if (held < k) {
      s.d(held) = dist;
      s.id(held) = nid;
      if (++held == k) {
        heapify(k);
        take_root(term);
      }
      return;
    }
    if (!after(worst, worst_id, dist, nid)) {
      spill.add(dist, nid);
      return;
    }
    spill.add(worst, worst_id);  // the k-th leaves
    sift_down(0, dist, nid, k);
    take_root(term);
  }

  /// Sorts the entries held ascending (a heap sort; a list that never filled is made a heap
  /// first). Once, after the last offer: the sorted list is no longer a heap.
  __device__ __forceinline__ void finish() {
    if (held < k) heapify(held);
#pragma unroll 1
    for (int end = held - 1; end > 0; --end) {
      const float d = s.d(end);
      const int id = s.id(end);
      s.d(end) = s.d(0);
      s.id(end) = s.id(0);
      sift_down(0, d, id, end);
    }
  }
};

/// The same list for a query that a whole warp searches (the outlier search, knn_tree.cuh), CAP
/// <= 32: entry j in lane j's registers. Every lane calls every member with the same arguments,
/// and the scalars (worst, limit, held, spill) are the same in every lane. An insertion is a
/// ballot for its position and a shuffle that moves the entries after it, where TopK's loop
/// moved them one by one through local memory (the outlier search keeps one list a warp, so
/// TopK put it in every lane's local memory). Ranks, limits and spills follow TopK's exactly.
template <int CAP>
struct WarpTopK {
  static_assert(CAP <= 32, "an entry a lane");
  float d;  // this lane's entry (lanes >= k: unused)
  int id;
  float worst;
  int worst_id;
  int k;
  float limit;
  int held;
  Spill spill;

  __device__ __forceinline__ void init(int k_) {
    k = k_;
    d = worst = limit = INFINITY;
    id = worst_id = INT_MAX;
    held = 0;
    spill = Spill{};
  }
  __device__ __forceinline__ int count() const { return held; }

  /// Offers a point within `limit` (TopK::offer).
  __device__ __forceinline__ void offer(float dist, int nid, float term) {
    if (!TopK<CAP>::before(dist, nid, worst, worst_id)) {
      spill.add(dist, nid);
      return;
    }
    if (worst_id != INT_MAX) spill.add(worst, worst_id);  // the k-th leaves
    const int lane = threadIdx.x & 31;
    // Entries before it (the free ones, +inf and INT_MAX, never are); the last one falls off.
    const int at =
        __popc(__ballot_sync(kFullMask, lane < k && TopK<CAP>::before(d, id, dist, nid)));
    const float up_d = __shfl_up_sync(kFullMask, d, 1);
    const int up_id = __shfl_up_sync(kFullMask, id, 1);
    if (lane > at) {
      d = up_d;
      id = up_id;
    } else if (lane == at) {
      d = dist;
      id = nid;
    }
    held = min(held + 1, k);
    worst = __shfl_sync(kFullMask, d, k - 1);
    worst_id = __shfl_sync(kFullMask, id, k - 1);
    limit = fminf(limit, FilterError::widen(worst, term));
  }

  /// The entries written to `room` (2 * CAP words of the warp's shared memory, free now), as
  /// slots for settle_row (every lane calls).
  __device__ __forceinline__ SharedSlots slots(int* room) const {
    const int lane = threadIdx.x & 31;
    __syncwarp();  // every lane is done with what `room` held
    if (lane < CAP) {
      reinterpret_cast<float*>(room)[lane] = d;
      room[CAP + lane] = id;
    }
    __syncwarp();
    return {reinterpret_cast<float*>(room), room + CAP, 1};
  }
};

}  // namespace pcnn::detail
