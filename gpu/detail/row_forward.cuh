// Rows forwarded to the host by the search's kernels themselves, a 128-byte line at a time, as
// soon as every row of the line is written: the rows then cross the link while the search runs
// instead of in one download after it.
//
// The caller's rows (page-locked host memory with a device alias: row r's k entries at
// [r * k, r * k + k), original query order) are cut into segments along the host's 128-byte
// lines: segment s holds the entries whose host addresses lie in the array's line s (the first
// and last segments may be short; swept rows: half lines, below). A lane that writes a row on the
// device counts its entries into the segments it touches (an atomic a segment); the lane whose
// count completes a segment has its warp copy that segment to the host, one store of whole lines
// per array. Segments cut by entry index instead, where the host array does not begin on a line
// (a std::vector's storage: 16 bytes past a page), straddle two lines each: the stores then
// crossed the link at 26-35 GB/s against 51-52 along lines (H200, 64-256 MB,
// bench/results/2026-11-30-round34.md). Rows written by other kernels (the gather of flagged
// rows) never count, so their segments are copied after every kernel that writes rows
// (forward_rest_kernel, knn_tree.cu).
//
// Large rows (curve_order_search in cuda_backend.cu decides): up to forward_any_order_bytes()
// of them are forwarded as they complete whatever their order; beyond, only where they
// complete in some spatial order (a chunk of rows by original index ends before the search's
// last pass). Otherwise (a search of one chunk cannot tell, and takes this way too) lists of
// kSweepFromK entries or more are swept (sweep_rows: complete segments, half lines there, copied
// in address order, along a band that moves through the rows), and of shorter ones the rows in a
// window of the first forward_any_order_bytes() are forwarded as they complete and the rest
// downloaded after the search. Segments completed in no spatial order go to lines all over the host
// rows, and beyond ~512 MiB of them such stores slowed: windows of 768 MiB searched 1.4x (k = 32)
// to 2.6x (k = 16; 15M points at k = 8 too) as long as windows of 512, and all of 2.56 GB of rows
// (k = 32) crossed the link at a fifth of its rate, with the host's pages huge or not (10M uniform
// points, H200; bench/results/2026-11-30-round37.md).
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "warp_reduce.cuh"

namespace pcnn::detail {

inline constexpr int kForwardSegment = 32;  // row entries a segment: 128 bytes of each array

/// Whether a kNN search's rows may be forwarded: lists of up to a host line (forward_rows, copying
/// lines as they complete, takes a row to touch at most two), and not a hybrid search (its own
/// kernels).
inline bool forwardable_rows(int k, bool hybrid) { return k <= kForwardSegment && !hybrid; }

/// Bytes of rows (indices and distances): the window of large rows in no spatial order, and the
/// limit up to which rows are forwarded as they complete whatever their order, for lists of every
/// length. The process's value, 512 MiB: tests lower it to take the other ways with small clouds.
/// Lists shorter than kSweepFromK were allowed a quarter more (10M uniform points at k = 8, 610
/// MiB of rows, all forwarded: GPU total 19.5 ms against 20.3-20.7 with a window of 512 MiB and
/// a download, round 37), until the walk's faster lists (round 39) and other leases of the same
/// H200 kind turned it round: 19.76-20.04 all forwarded against 19.24-19.51 with the window, in
/// two leases, and a LiDAR-like scan's order asked at the same cost within noise
/// (bench/results/2026-11-30-round39.md). 610 MiB lies at the edge of where stores in no order
/// slow (from 512-640 MiB by host); the window stays at the lower end.
std::atomic<std::size_t>& forward_any_order_bytes();

/// Lists of at least this many entries (half a line) are swept where they are (large rows in
/// no spatial order), a warp sweeping kSweepLines host lines for each line's worth of entries it
/// writes (10M uniform points, k = 16, H200: 2, 4, 8, 16, 32 of them, search 30.3, 28.8, 28.0,
/// 27.6, 27.5 ms; k = 32: 8 and 16, 50.0 and 49.5). Shorter lists complete a segment only with
/// the last of its rows (two or more, four at k = 8), which sweeps then find late: at k = 12 they
/// gained nothing over the window, at k = 8 they lost 0.8 ms.
inline constexpr int kSweepFromK = 16;
inline constexpr int kSweepLines = 16;

/// Swept rows are counted in half lines (64 bytes of each array), so that a row of 16 entries
/// completes its own segment instead of waiting for its neighbor. A half alone crosses the link
/// slower than a whole line (kernel stores in no order into 64 MiB of page-locked memory, H200:
/// 45 GB/s in 64-byte pieces, 52 in 128-byte ones; pcnn_bench_host_writes,
/// bench/results/2026-11-30-round38.md), so a sweep copies a half alone only in its first
/// kSweepSinglePasses passes over the rows, while the link would otherwise idle; after them a
/// half waits for the other half of its line, and the two go as one store.
inline constexpr int kSweptSegment = kForwardSegment / 2;
inline constexpr int kSweepSinglePasses = 3;

/// The entries of a window of `bytes` of rows from their start, ending on a host line (<= 0:
/// none), for arrays `lead` entries into their first line.
inline std::int64_t forward_window(std::size_t bytes, int lead) {
  const std::size_t entries = bytes / (sizeof(std::int32_t) + sizeof(float)) + lead;
  return static_cast<std::int64_t>(entries / kForwardSegment * kForwardSegment) - lead;
}

/// Where forwarded rows go. `done` null: nothing is forwarded.
struct RowForward {
  // Entries written so far, a segment (kSegmentSent once a sweep copied it): segments() ints,
  // zeroed.
  int* done = nullptr;
  std::int32_t* host_idx = nullptr;  // the host rows' device aliases (rows × k entries)
  float* host_dist = nullptr;
  std::int64_t cells = 0;  // the entries forwarded: rows × k, or those of a window from the start
  int lead = 0;  // entries of the first host line before the arrays begin (both arrays alike)
  // Non-null: segments are swept (sweep_rows), not copied as they complete; zeroed.
  unsigned long long* cursor = nullptr;
  // Entries a segment: a host line (kForwardSegment), or half of one where swept
  // (kSweptSegment). One pass's rows fit in device memory, so segments() fits an int.
  __host__ __device__ int seg() const { return cursor ? kSweptSegment : kForwardSegment; }
  __host__ __device__ int halves() const { return kForwardSegment / seg(); }  // segments a line
  __host__ __device__ int segments() const {
    return static_cast<int>((cells + lead + seg() - 1) / seg());
  }
  __host__ __device__ int lines() const {
    return static_cast<int>((cells + lead + kForwardSegment - 1) / kForwardSegment);
  }
  __device__ std::int64_t begin(int s) const {  // of segment s's entries
    const std::int64_t b = std::int64_t(s) * seg() - lead;
    return b > 0 ? b : 0;
  }
  __device__ std::int64_t end(int s) const {  // a half line wholly before the rows: empty
    const std::int64_t e = std::int64_t(s + 1) * seg() - lead;
    return e < 0 ? 0 : e < cells ? e : cells;
  }
  __device__ int entries(int s) const { return static_cast<int>(end(s) - begin(s)); }
};

/// Bytes of counters a row of k entries may need (RowForward::done, an int a segment).
inline std::int64_t forward_counter_bytes(int k) {
  const int seg = k >= kSweepFromK ? kSweptSegment : kForwardSegment;
  return (std::int64_t(k) * 4 + seg - 1) / seg;
}

inline constexpr int kHostLine = kForwardSegment * 4;  // bytes: a line of either array

/// `host`'s offset in its 128-byte line, in 4-byte entries (RowForward::lead): 0 where the
/// array begins on a line.
inline int forward_lead(const void* host) {
  const auto at = reinterpret_cast<std::uintptr_t>(host);
  return static_cast<int>(at % kHostLine / 4);
}

/// Whether rows at `idx` and `dist` can be forwarded a line at a time: both 4-byte aligned and
/// at the same offset in their lines (a line of one array, and the same entries' line of the
/// other). Else they are downloaded.
inline bool forwardable_layout(const void* idx, const void* dist) {
  const auto i = reinterpret_cast<std::uintptr_t>(idx), d = reinterpret_cast<std::uintptr_t>(dist);
  return i % 4 == 0 && i % kHostLine == d % kHostLine;
}

/// The warp copies, of each host line its lanes name (`line` >= 0), the halves in `halves` (bit 0
/// the first 64 bytes, bit 1 the second; 3 the whole line) from the device rows to the host's:
/// one store a line and array. Warp-synchronous.
__device__ __forceinline__ void copy_lines(const RowForward& f, const std::int32_t* idx,
                                           const float* dist, int line, unsigned halves) {
  const int lane = threadIdx.x & 31;
  for (unsigned owners = __ballot_sync(kFullMask, line >= 0 && halves != 0); owners;
       owners &= owners - 1) {
    const int owner = __ffs(owners) - 1;
    const int l = __shfl_sync(kFullMask, line, owner);
    const unsigned h = __shfl_sync(kFullMask, halves, owner);
    const std::int64_t e = std::int64_t(l) * kForwardSegment - f.lead + lane;
    // Written by other warps (on other SMs) during this kernel: read from L2, not L1.
    if ((h >> (lane / kSweptSegment) & 1) && e >= 0 && e < f.cells) {
      f.host_idx[e] = __ldcg(idx + e);
      f.host_dist[e] = __ldcg(dist + e);
    }
  }
}

/// The halves of line `line` (bits as copy_lines takes them) whose segments are in `pending`
/// (segment -> bool).
template <class Pending>
__device__ __forceinline__ unsigned line_halves(const RowForward& f, int line, Pending&& pending) {
  const int h = f.halves(), segments = f.segments();
  unsigned out = 0;
  for (int j = 0; j < h; ++j) {
    const int s = line * h + j;
    if (s < segments && pending(s)) out |= h == 1 ? 3u : 1u << j;
  }
  return out;
}

/// Counts `row`'s entries before f.cells into the segments they lie in (the entries first: a
/// fence); `completed(s)` for each segment whose count this completes.
template <class Completed>
__device__ __forceinline__ void count_row(const RowForward& f, std::int64_t row, int k,
                                          Completed&& completed) {
  const std::int64_t e0 = row * k, e1 = e0 + k < f.cells ? e0 + k : f.cells;
  if (e0 >= e1) return;  // past a window
  __threadfence();       // the row's entries, before its counts
  for (int s = static_cast<int>((e0 + f.lead) / f.seg()); f.begin(s) < e1; ++s) {
    const std::int64_t lo = f.begin(s), hi = f.end(s);
    const int n = static_cast<int>((e1 < hi ? e1 : hi) - (e0 > lo ? e0 : lo));
    if (atomicAdd(f.done + s, n) + n == f.entries(s)) completed(s);
  }
}

/// A segment a sweep has claimed and copied (RowForward::done).
inline constexpr int kSegmentSent = -1;

/// The halves of swept line `line` (segments of kSweptSegment entries) that this lane claims, as
/// copy_lines takes them: complete ones, alone only where `singles`, else where the other half is
/// complete, sent or past the rows.
__device__ __forceinline__ unsigned claim_halves(const RowForward& f, int line, bool singles) {
  const int s = 2 * line, segments = f.segments();
  const bool pair = s + 1 < segments;
  // Both counters in one load (s is even: the pair is 8-byte aligned); past the rows: as if sent.
  const int2 v = pair ? __ldcg(reinterpret_cast<const int2*>(f.done + s))
                      : make_int2(__ldcg(f.done + s), kSegmentSent);
  // Inner lines' halves are whole; the first and last may be short.
  const bool inner = line > 0 && s + 2 < segments;
  const int e0 = inner ? kSweptSegment : f.entries(s);
  const int e1 = inner ? kSweptSegment : pair ? f.entries(s + 1) : 0;
  const bool d0 = v.x == e0, d1 = pair && v.y == e1;
  if (!(d0 || d1)) return 0;
  if (!singles && !((d0 || v.x == kSegmentSent) && (d1 || v.y == kSegmentSent))) return 0;
  unsigned take = 0;
  if (d0 && atomicCAS(f.done + s, e0, kSegmentSent) == e0) take |= 1;
  if (d1 && atomicCAS(f.done + s + 1, e1, kSegmentSent) == e1) take |= 2;
  return take;
}

/// forward_rows with a cursor (so segments of kSweptSegment entries): the lanes count their rows
/// into the segments; then the warp takes the next kSweepLines host lines for each 32 entries its
/// lanes wrote from the cursor (cyclically) and copies the complete segments among them (which
/// claim_halves claims), marking them sent: whatever the rows' order, the warps' stores go to a
/// band of host memory that moves along it, not to lines all over it. In the first
/// kSweepSinglePasses passes a complete half line goes alone; after them only with its other
/// half. Segments complete after the last sweep passed are copied by forward_rest_kernel.
__device__ __forceinline__ void sweep_rows(const RowForward& f, const std::int32_t* idx,
                                           const float* dist, std::int64_t row, int k) {
  const bool counts = row >= 0;
  if (counts) count_row(f, row, k, [](int) {});
  const int lane = threadIdx.x & 31;
  const int written = __popc(__ballot_sync(kFullMask, counts));
  if (written == 0) return;
  const int n = (written * k * kSweepLines + kForwardSegment - 1) / kForwardSegment;
  unsigned long long first = 0;
  if (lane == 0) first = atomicAdd(f.cursor, static_cast<unsigned long long>(n));
  first = __shfl_sync(kFullMask, first, 0);
  const int lines = f.lines();
  const bool singles = first < static_cast<unsigned long long>(kSweepSinglePasses) * lines;
  const int start = static_cast<int>(first % static_cast<unsigned long long>(lines));
  for (int i = 0; i < n; i += 32) {
    int line = -1;
    unsigned take = 0;
    if (i + lane < n) {
      line = start + i + lane;  // < 2^31: lines and n are
      if (line >= lines) line %= lines;
      take = claim_halves(f, line, singles);
    }
    if (take) __threadfence();  // the segments' rows, after their counts
    __syncwarp();
    copy_lines(f, idx, dist, take ? line : -1, take);
  }
}

/// Every lane calls: `row` >= 0 is the row the lane has just written in full (k <= 32 entries
/// at idx / dist + row * k: forwardable_rows), -1 none. Counts the rows into their segments,
/// then the warp copies the segments they completed; with a cursor, sweep_rows instead.
__device__ __forceinline__ void forward_rows(const RowForward& f, const std::int32_t* idx,
                                             const float* dist, std::int64_t row, int k) {
  if (f.cursor) {
    sweep_rows(f, idx, dist, row, k);
    return;
  }
  int first = -1, second = -1;  // segments (whole lines here) this lane completed
  // Entries past f.cells (a window of the rows: curve_order_search) are downloaded instead.
  if (row >= 0) {
    count_row(f, row, k, [&](int s) { (first < 0 ? first : second) = s; });
    if (first >= 0) __threadfence();  // the other rows of those segments, after their counts
  }
  __syncwarp();  // the completing lanes' fences, before the other lanes read
  copy_lines(f, idx, dist, first, 3);
  copy_lines(f, idx, dist, second, 3);
}

}  // namespace pcnn::detail
