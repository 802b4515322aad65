// Rows forwarded to the host by the search's kernels themselves, a 128-byte line at a time, as
// soon as every row of the line is written: the rows then cross the link while the search runs
// instead of in one download after it.
//
// The caller's rows (page-locked host memory with a device alias: row r's k entries at
// [r * k, r * k + k), original query order) are cut into segments along the host's 128-byte
// lines: segment s holds the entries whose host addresses lie in the array's line s (the first
// and last segments may be short). A lane that writes a row on the device counts its entries into
// the segments it touches (an atomic a segment; k <= 32: one or two segments); the lane whose
// count completes a segment has its warp copy that segment to the host, one store of whole lines
// per array. Segments cut by entry index instead, where the host array does not begin on a line
// (a std::vector's storage: 16 bytes past a page), straddle two lines each: the stores then
// crossed the link at 26-35 GB/s against 51-52 along lines (H200, 64-256 MB,
// bench/results/2026-11-30-round34.md). Rows written by other kernels (the gather of flagged
// rows) never count, so their segments are copied after every kernel that writes rows
// (forward_rest_kernel, knn_tree.cu).
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "warp_reduce.cuh"

namespace pcnn::detail {

inline constexpr int kForwardSegment = 32;  // row entries a segment: 128 bytes of each array

/// Whether a kNN search's rows may be forwarded: lists of up to one segment (forward_rows takes a
/// row to touch at most two segments), and not a hybrid search (its own kernels).
inline bool forwardable_rows(int k, bool hybrid) { return k <= kForwardSegment && !hybrid; }

/// The most bytes of rows (indices and distances) a search forwards whatever their order. Above
/// it, the search forwards all its rows where they complete in some spatial order, and otherwise
/// those in that many bytes from their start, downloading the rest after it (curve_order_search
/// in cuda_backend.cu says why). The process's value, 512 MB: tests lower it to take that path with
/// small clouds.
std::atomic<std::size_t>& forward_any_order_bytes();

/// Where forwarded rows go. `done` null: nothing is forwarded.
struct RowForward {
  int* done = nullptr;               // entries written so far, a segment: segments() ints, zeroed
  std::int32_t* host_idx = nullptr;  // the host rows' device aliases (rows × k entries)
  float* host_dist = nullptr;
  std::int64_t cells = 0;  // the entries forwarded: rows × k, or those of a window from the start
  int lead = 0;  // entries of the first host line before the arrays begin (both arrays alike)
  __host__ __device__ int segments() const {
    return static_cast<int>((cells + lead + kForwardSegment - 1) / kForwardSegment);
  }
  __device__ std::int64_t begin(int s) const {  // of segment s's entries
    const std::int64_t b = std::int64_t(s) * kForwardSegment - lead;
    return b > 0 ? b : 0;
  }
  __device__ std::int64_t end(int s) const {
    const std::int64_t e = std::int64_t(s + 1) * kForwardSegment - lead;
    return e < cells ? e : cells;
  }
  __device__ int entries(int s) const { return static_cast<int>(end(s) - begin(s)); }
};

inline constexpr int kHostLine = kForwardSegment * 4;  // bytes: a segment of either array

/// `host`'s offset in its 128-byte line, in 4-byte entries (RowForward::lead): 0 where the
/// array begins on a line.
inline int forward_lead(const void* host) {
  const auto at = reinterpret_cast<std::uintptr_t>(host);
  return static_cast<int>(at % kHostLine / 4);
}

/// Whether rows at `idx` and `dist` can be forwarded a line at a time: both 4-byte aligned and
/// at the same offset in their lines (one segment whole lines of each). Else they are
/// downloaded.
inline bool forwardable_layout(const void* idx, const void* dist) {
  const auto i = reinterpret_cast<std::uintptr_t>(idx), d = reinterpret_cast<std::uintptr_t>(dist);
  return i % 4 == 0 && i % kHostLine == d % kHostLine;
}

/// The warp copies every segment its lanes name (`s` >= 0) from the device rows to the host's.
/// Warp-synchronous.
__device__ __forceinline__ void copy_segments(const RowForward& f, const std::int32_t* idx,
                                              const float* dist, int s) {
  const int lane = threadIdx.x & 31;
  for (unsigned owners = __ballot_sync(kFullMask, s >= 0); owners; owners &= owners - 1) {
    const int seg = __shfl_sync(kFullMask, s, __ffs(owners) - 1);
    const std::int64_t e = std::int64_t(seg) * kForwardSegment - f.lead + lane;
    // Written by other warps (on other SMs) during this kernel: read from L2, not L1.
    if (e >= 0 && e < f.cells) {
      f.host_idx[e] = __ldcg(idx + e);
      f.host_dist[e] = __ldcg(dist + e);
    }
  }
}

/// Every lane calls: `row` >= 0 is the row the lane has just written in full (k <= 32 entries
/// at idx / dist + row * k: forwardable_rows), -1 none. Counts the rows into their segments,
/// then the warp copies the segments they completed.
__device__ __forceinline__ void forward_rows(const RowForward& f, const std::int32_t* idx,
                                             const float* dist, std::int64_t row, int k) {
  int first = -1, second = -1;  // segments this lane completed
  // Entries past f.cells (a window of the rows: curve_order_search) are downloaded instead.
  if (row >= 0 && row * k < f.cells) {
    __threadfence();  // the row's entries, before its counts
    const std::int64_t e0 = row * k, e1 = e0 + k < f.cells ? e0 + k : f.cells;
    for (int s = static_cast<int>((e0 + f.lead) / kForwardSegment); f.begin(s) < e1; ++s) {
      const std::int64_t lo = f.begin(s), hi = f.end(s);
      const int n = static_cast<int>((e1 < hi ? e1 : hi) - (e0 > lo ? e0 : lo));
      if (atomicAdd(f.done + s, n) + n == f.entries(s)) (first < 0 ? first : second) = s;
    }
    if (first >= 0) __threadfence();  // the other rows of those segments, after their counts
  }
  __syncwarp();  // the completing lanes' fences, before the other lanes read
  copy_segments(f, idx, dist, first);
  copy_segments(f, idx, dist, second);
}

}  // namespace pcnn::detail
