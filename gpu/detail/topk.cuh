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

/// A list entry as one 64-bit key: the distance's bits, then the id. For distances that are
/// non-negative floats or +inf and ids >= 0, keys order as (distance, then id) do: one compare
/// and one 8-byte move where the pair took two of each. The walk's distances are such: point_dist2
/// is __fmul_rn(dx, dx) then fmas of squares onto it, all >= +0, so never -0; a NaN fails every
/// `d <= limit` and is never offered; ids are positions in the index (>= 0, below 2^31). Storage
/// round-trips any bits; only TopK::insert orders by key.
__device__ __forceinline__ std::uint64_t list_key(float d, int id) {
  return static_cast<std::uint64_t>(__float_as_uint(d)) << 32 | static_cast<std::uint32_t>(id);
}
__device__ __forceinline__ float key_dist(std::uint64_t key) {
  return __uint_as_float(static_cast<unsigned>(key >> 32));
}
__device__ __forceinline__ int key_id(std::uint64_t key) {
  return static_cast<int>(key & 0xffffffffu);
}

// Every kind of list storage offers the same members: d(i) and id(i) to read an entry, set(i, d,
// id) to write it, and key(i) and set_key(i, key) for the entry as list_key packs it (the lists'
// moves and compares).

/// Storage of a list in the thread's own arrays: (L1-cached) local memory, since insertion
/// indexes it at run time (the outlier search's lists: a warp holds one).
template <int CAP>
struct ThreadSlots {
  float d_[CAP];
  int id_[CAP];
  __device__ __forceinline__ float d(int i) const { return d_[i]; }
  __device__ __forceinline__ int id(int i) const { return id_[i]; }
  __device__ __forceinline__ void set(int i, float d, int id) {
    d_[i] = d;
    id_[i] = id;
  }
  __device__ __forceinline__ std::uint64_t key(int i) const { return list_key(d_[i], id_[i]); }
  __device__ __forceinline__ void set_key(int i, std::uint64_t key) {
    set(i, key_dist(key), key_id(key));
  }
};

/// Storage in shared memory, `stride` apart (the block's thread count, so that a warp's 32 lanes
/// touch 32 consecutive words: no bank conflicts). Unlike local memory, it cannot be evicted to
/// L2 when many warps each hold a long list.
struct SharedSlots {
  float* d_;
  int* id_;
  int stride;
  __device__ __forceinline__ float d(int i) const { return d_[i * stride]; }
  __device__ __forceinline__ int id(int i) const { return id_[i * stride]; }
  __device__ __forceinline__ void set(int i, float d, int id) {
    d_[i * stride] = d;
    id_[i * stride] = id;
  }
  __device__ __forceinline__ std::uint64_t key(int i) const { return list_key(d(i), id(i)); }
  __device__ __forceinline__ void set_key(int i, std::uint64_t key) {
    set(i, key_dist(key), key_id(key));
  }
};

/// Storage in the block's shared memory as keys (list_key), kStride keys apart (the block's
/// thread count: a warp's 32 lanes touch 256 consecutive bytes), every entry a constant offset
/// from one register (a stride known only at run time spent a third of an insertion step on
/// addresses: bench/results/2026-11-29-round26.md). TopK's insertion step is then one 8-byte
/// load, a 64-bit compare and one 8-byte store, where the distances and ids in two arrays took
/// two loads, four compares and two stores; HeapTopK reads an entry in one load too. The kNN
/// walk at 1M points: 2-6 % faster from k = 8 to 64 (bench/results/2026-11-30-round39.md).
template <int kStride>
struct KeySlots {
  std::uint64_t* k_;  // this thread's entry 0
  __device__ __forceinline__ std::uint64_t key(int i) const { return k_[i * kStride]; }
  __device__ __forceinline__ void set_key(int i, std::uint64_t key) { k_[i * kStride] = key; }
  __device__ __forceinline__ float d(int i) const { return key_dist(key(i)); }
  __device__ __forceinline__ int id(int i) const { return key_id(key(i)); }
  __device__ __forceinline__ void set(int i, float d, int id) { set_key(i, list_key(d, id)); }
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
  float worst;   // entry k - 1's distance
  int worst_id;  // entry k - 1's id
  int k;
  float limit;  // widen(worst): the scan offers every point within it
  int held;     // entries held: [0, held) sorted, the rest free (INFINITY, INT_MAX)
  Spill spill;

  /// An empty list.
  __device__ __forceinline__ void init(int k_) {
    k = k_;
#pragma unroll
    for (int i = 0; i < CAP; ++i) s.set(i, INFINITY, INT_MAX);
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
      s.set(0, worst = dist, worst_id = nid);
      return;
    }
    // As keys (list_key): dist is a non-negative float here (improves() held) and ids >= 0.
    const std::uint64_t key = list_key(dist, nid);
    int i = held < k ? held++ : k - 1;
#pragma unroll 1
    while (i > 0) {
      const std::uint64_t p = s.key(i - 1);
      if (!(key < p)) break;
      s.set_key(i, p);
      --i;
    }
    s.set_key(i, key);
    const std::uint64_t last = s.key(k - 1);
    worst = key_dist(last);
    worst_id = key_id(last);
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
/// rest. It compares (distance, id) pairs even in KeySlots: its sift compared as keys, the walk
/// at k = 64 was 0.6-1 % slower than before KeySlots, where pairs read in one load are 2.5 %
/// faster (1M points, bench/results/2026-11-30-round39.md).
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
      s.set(i, cd, cid);
      i = c;
    }
    s.set(i, d, id);
  }
  __device__ __forceinline__ void heapify(int n) {
#pragma unroll 1
    for (int i = n / 2 - 1; i >= 0; --i) sift_down(i, s.d(i), s.id(i), n);
  }
  __device__ __forceinline__ void take_root(float term) {
    const std::uint64_t root = s.key(0);
    worst = key_dist(root);
    worst_id = key_id(root);
    limit = fminf(limit, FilterError::widen(worst, term));  // a seeded limit stays (bound())
  }

  /// Offers a point within `limit` (`term`: FilterError::widen_term()).
  __device__ __forceinline__ void offer(float dist, int nid, float term) {
    if (held < k) {
      s.set(held, dist, nid);
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
      s.set(end, s.d(0), s.id(0));
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
