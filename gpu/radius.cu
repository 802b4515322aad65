// Radius search over the spatial index (pcnn::Index::radius and the count-then-fill pair).
#include <cub/device/device_scan.cuh>
#include <cub/device/device_segmented_sort.cuh>
#include <cub/warp/warp_merge_sort.cuh>
#include <cuda/cmath>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "detail/cuda_try.cuh"
#include "detail/device_buffer.cuh"
#include "detail/exact.cuh"
#include "detail/plan.cuh"
#include "detail/radius_tree.cuh"
#include "detail/search.cuh"
#include "detail/spatial_index.cuh"
#include "detail/upload.cuh"
#include "pcnn/device.hpp"
#include "pcnn/error.hpp"
#include "pcnn/memory.hpp"
#include "pcnn/radius.hpp"

namespace pcnn {
namespace detail {
namespace {

/// Row layout of the slots [slot_begin, slot_begin + n): each row's length (from the counts per
/// original index) and, when `offsets` is given, its start (the offset of its original index).
/// Rows of at most `longer_than` entries (after the collect pass: its capacity; else -1) get length
/// 0 and start -1, which the fill kernel skips.
__global__ void radius_rows_kernel(const float4* __restrict__ queries, int slot_begin, int n,
                                   const std::int64_t* __restrict__ counts,
                                   const std::int64_t* __restrict__ offsets,
                                   std::int64_t longer_than, std::int64_t* __restrict__ len,
                                   std::int64_t* __restrict__ start) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int qid = __float_as_int(queries[slot_begin + i].w);
  const bool row = counts[qid] > longer_than;
  len[i] = row ? counts[qid] : 0;
  if (offsets) start[i] = row ? offsets[qid] : -1;
}

// Rows longer than kWarpRow (row_sort.cuh), listed by the fill kernel: up to kMediumRow sorted by
// cub::WarpMergeSort, up to 8 keys per lane; longer ones listed again for a segmented sort.
inline constexpr int kMediumRow = 256;

// The keys of a medium row, kItems per lane: the warp merge sort's shared memory. Rows are short
// enough that one warp sorts one, long enough that the lanes' merge (O(m log m) over the warp)
// beats the rank sort it replaces (O(m^2 / 32) shared reads per lane: 2048 at m = 256).
template <int kItems>
using RowSort = cub::WarpMergeSort<std::uint64_t, kItems, 32>;
union RowSortStorage {
  typename RowSort<4>::TempStorage four;
  typename RowSort<8>::TempStorage eight;
};

/// Sorts the row of m <= 32 * kItems keys at keys[from] and writes it as (index, distance) at
/// idx/dist[to]. Missing keys sort last (~0: a NaN distance, which no neighbor has). Returns, in
/// every lane, whether two of its entries share a float distance (order_ties is then due).
template <int kItems>
__device__ __forceinline__ bool sort_medium_row(typename RowSort<kItems>::TempStorage& temp, int m,
                                                std::int64_t from, std::int64_t to,
                                                const std::uint64_t* __restrict__ keys,
                                                std::int32_t* __restrict__ idx,
                                                float* __restrict__ dist) {
  const int first = (threadIdx.x & 31) * kItems;
  std::uint64_t v[kItems];
#pragma unroll
  for (int i = 0; i < kItems; ++i) v[i] = first + i < m ? keys[from + first + i] : ~0ull;
  RowSort<kItems>(temp).Sort(v, [](std::uint64_t a, std::uint64_t b) { return a < b; });
  // Entry p against p - 1 (a lane's items are consecutive entries), by their distance bits.
  const unsigned before = __shfl_up_sync(kFullMask, static_cast<unsigned>(v[kItems - 1] >> 32), 1);
  bool tie = first > 0 && first < m && static_cast<unsigned>(v[0] >> 32) == before;
#pragma unroll
  for (int i = 0; i < kItems; ++i) {
    if (first + i < m) split_key(v[i], idx + to + first + i, dist + to + first + i);
    if (i > 0 && first + i < m && (v[i] >> 32) == (v[i - 1] >> 32)) tie = true;
  }
  return __any_sync(kFullMask, tie);
}

/// sort_medium_row's way for rows of up to 128 keys whose distances differ above their lowest 7
/// bits, as sort_row_keys_short's for shorter rows: a bitonic sort of 32-bit short keys (the
/// truncated distance, then the position in the row), four a lane, then each whole key fetched
/// from its position and written as (index, distance) at idx/dist[to]. No two entries share a
/// float distance then (no ties to order). Returns false, writing nothing, where two entries share
/// a truncated distance: sort_medium_row's 64-bit sort is then due. Every lane must call it.
__device__ __forceinline__ bool sort_medium_row_short(int m, std::int64_t from, std::int64_t to,
                                                      const std::uint64_t* __restrict__ keys,
                                                      std::int32_t* __restrict__ idx,
                                                      float* __restrict__ dist) {
  constexpr int kItems = 4;
  constexpr unsigned kMask = 127;  // 32 * kItems positions
  const int lane = threadIdx.x & 31;
  unsigned v[kItems];
#pragma unroll
  for (int i = 0; i < kItems; ++i) {
    const int e = i * 32 + lane;
    v[i] = e < m ? short_key(keys[from + e], e, kMask) : ~0u;
  }
  warp_sort_striped(v);
  // Sorted entry e against e - 1, by truncated distance: lane - 1 of the same item, or lane 31 of
  // the item before.
  bool tie = false;
  unsigned last = 0;  // item i - 1's entry in lane 31
#pragma unroll
  for (int i = 0; i < kItems; ++i) {
    const int e = i * 32 + lane;
    const unsigned t = v[i] & ~kMask;
    const unsigned up = __shfl_up_sync(kFullMask, t, 1);
    const unsigned before = lane == 0 ? last : up;
    if (e > 0 && e < m && t == before) tie = true;
    last = __shfl_sync(kFullMask, t, 31);
  }
  if (__any_sync(kFullMask, tie)) return false;
#pragma unroll
  for (int i = 0; i < kItems; ++i) {
    const int e = i * 32 + lane;
    if (e < m) split_key(keys[from + (v[i] & kMask)], idx + to + e, dist + to + e);
  }
  return true;
}

// The threads an SM holds (sm_80 and sm_90: 2048, sm_86 to sm_89: 1536, sm_75: 1024): a launch
// bound asking for more is out of range and ignored with a warning.
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ == 800 || __CUDA_ARCH__ >= 900)
inline constexpr int kSmThreads = 2048;
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ > 800
inline constexpr int kSmThreads = 1536;
#else
inline constexpr int kSmThreads = 1024;
#endif

/// Rows longer than kWarpRow (listed by the fill kernel), 32 to a warp: each row's keys sorted by
/// the warp and written as (index, distance) at the same positions (up to 128 by 32-bit keys
/// where they order the row, sort_medium_row_short), then each row with entries of equal float
/// distance has its ties ordered by a lane of its own. Rows longer than kMediumRow are appended
/// to `long_rows` instead. The count is read on the device, over a fixed grid. Blocks enough to
/// fill an SM (32 registers a thread on sm_90): the merge sort's 8 keys a lane fit, and rows are
/// short, so occupancy is what hides their loads (ptxas: 88 bytes of spills with the 32-bit
/// sort, 36 without).
__global__ void __launch_bounds__(kTreeWarps * 32, kSmThreads / (kTreeWarps * 32))
    radius_sort_kernel(const int* __restrict__ listed, const int* __restrict__ listed_count,
                       const std::int64_t* __restrict__ start, const std::int64_t* __restrict__ len,
                       const std::uint64_t* __restrict__ keys, const float4* __restrict__ queries,
                       int slot_begin, ExactCoords refs, ExactCoords queries_exact,
                       std::int32_t* __restrict__ idx, float* __restrict__ dist,
                       int* __restrict__ long_rows, int* __restrict__ long_count) {
  __shared__ RowSortStorage storage_all[kTreeWarps];
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  const int n = *listed_count;
  for (int first = (blockIdx.x * kTreeWarps + warp) * 32; first < n;
       first += gridDim.x * kTreeWarps * 32) {
    const int mine = first + lane < n ? listed[first + lane] : -1;  // this lane's row
    const std::int64_t s = mine >= 0 ? start[mine] : 0;
    const int m = mine >= 0 ? static_cast<int>(min(len[mine], std::int64_t(INT_MAX))) : 0;
    unsigned ties = 0;
    for (int r = 0; r < 32; ++r) {
      const int rm = __shfl_sync(kFullMask, m, r);
      const std::int64_t rs = __shfl_sync(kFullMask, s, r);
      __syncwarp();  // the previous row's sort is done with the storage
      if (rm == 0 || rm > kMediumRow) continue;
      if (rm <= 128 && sort_medium_row_short(rm, rs, rs, keys, idx, dist)) continue;
      const bool tie =
          rm <= 128 ? sort_medium_row<4>(storage_all[warp].four, rm, rs, rs, keys, idx, dist)
                    : sort_medium_row<8>(storage_all[warp].eight, rm, rs, rs, keys, idx, dist);
      if (tie) ties |= 1u << r;
    }
    if (m > kMediumRow) long_rows[atomicAdd(long_count, 1)] = mine;
    __syncwarp();  // the rows are written
    if (ties >> lane & 1)
      order_ties(queries_exact.at(__float_as_int(queries[slot_begin + mine].w)), refs, idx + s,
                 dist + s, m);
  }
}

/// One thread per long row (listed by radius_sort_kernel), after the segmented sort: its ties
/// ordered (order_ties).
__global__ void long_rows_ties_kernel(const int* __restrict__ rows, int n_long,
                                      const std::int64_t* __restrict__ start,
                                      const std::int64_t* __restrict__ len,
                                      const float4* __restrict__ queries, int slot_begin,
                                      ExactCoords refs, ExactCoords queries_exact,
                                      std::int32_t* __restrict__ idx, float* __restrict__ dist) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n_long) return;
  const int row = rows[i];
  const std::int64_t s = start[row];
  order_ties(queries_exact.at(__float_as_int(queries[slot_begin + row].w)), refs, idx + s, dist + s,
             len[row]);
}

/// The most keys the collect pass keeps a query (where memory allows, else kCollect): a row of up
/// to kWarpRow is sorted in the warp's registers, a longer one by sort_medium_row_short (or, where
/// its 32-bit keys tie, sort_medium_row<4>). Uniform
/// points with 31 neighbors on average have up to 63, a LiDAR-like scan's up to 74: at 64 its
/// longer rows took a second walk and a sort of their own, 0.63 of 2.1 ms at 1M points (H200,
/// bench/results/2026-11-29-round27.md).
inline constexpr int kRadiusCollect = 128;
static_assert(kRadiusCollect <= 32 * 4 && kCollect <= kRadiusCollect);

/// After the collect pass: the rows of at most `capacity` neighbors, 32 slots to a warp, sorted
/// from the scratch (slot s's keys at s * capacity) into idx/dist at their offsets, and their
/// ties ordered by their own lanes. Longer rows (their neighbors only counted, the rows the
/// collect pass counted as longer) are left to a fill of their own.
__global__ void __launch_bounds__(kTreeWarps * 32)
    collected_sort_kernel(const float4* __restrict__ queries, int n, int capacity,
                          const std::int64_t* __restrict__ counts,
                          const std::int64_t* __restrict__ offsets,
                          const std::uint64_t* __restrict__ scratch, ExactCoords refs,
                          ExactCoords queries_exact, std::int32_t* __restrict__ idx,
                          float* __restrict__ dist) {
  __shared__ typename RowSort<4>::TempStorage sort_all[kTreeWarps];
  const int lane = threadIdx.x & 31;
  const int first = (blockIdx.x * kTreeWarps + threadIdx.x / 32) * 32;
  if (first >= n) return;  // whole warps only
  const int slot = first + lane;
  const int qid = slot < n ? __float_as_int(queries[slot].w) : -1;
  const std::int64_t m = qid >= 0 ? counts[qid] : 0, to = qid >= 0 ? offsets[qid] : 0;
  const int m_lane = static_cast<int>(min(m, std::int64_t(INT_MAX)));
  auto load = [&](int r) {
    return load_warp_row(__shfl_sync(kFullMask, m_lane, r), std::int64_t(first + r) * capacity,
                         __shfl_sync(kFullMask, to, r), scratch);
  };
  const unsigned ties = for_each_warp_row(load, [&](int r, const WarpRow& row) {
    if (row.m > capacity) return false;
    if (row.m > kWarpRow) {  // load_warp_row left it: sorted from memory
      const std::int64_t from = std::int64_t(first + r) * capacity;
      if (sort_medium_row_short(row.m, from, row.to, scratch, idx, dist)) return false;
      __syncwarp();  // the previous row's sort is done with the storage
      return sort_medium_row<4>(sort_all[threadIdx.x / 32], row.m, from, row.to, scratch, idx,
                                dist);
    }
    return row.m > 0 && sort_warp_row(row, idx, dist);
  });
  __syncwarp();  // the rows are written
  if (ties >> lane & 1) order_ties(queries_exact.at(qid), refs, idx + to, dist + to, m);
}

constexpr int kThreads = 256;
// Per neighbor on the device: key 8, index 4, distance 4, and where its row is too long for a
// warp, the two buffers of the segmented sort (8 each). A pass planned on 16 bytes an entry,
// its rows all long (a scan's 72k no-returns at the origin, each within r = 0.04 of the
// others), asked for 38 GB more in the sort with 8.5 GB left (H100).
constexpr int kEntryBytes = 32;
// Per query: count, offset, row length and start (8 each), the listed and the long rows (4 each),
// and the long rows' length and start (8 each).
constexpr int kSlotBytes = 56;

void exclusive_sum(const std::int64_t* in, std::int64_t* out, std::int64_t n, cudaStream_t stream,
                   DeviceMemoryResource& mr) {
  std::size_t temp_bytes = 0;
  PCNN_CUDA_TRY(cub::DeviceScan::ExclusiveSum(nullptr, temp_bytes, in, out, n, stream));
  device_buffer<unsigned char> temp(temp_bytes, stream, mr);
  PCNN_CUDA_TRY(cub::DeviceScan::ExclusiveSum(temp.data(), temp_bytes, in, out, n, stream));
}

__global__ void long_rows_gather_kernel(const int* __restrict__ rows,
                                        const std::int64_t* __restrict__ start,
                                        const std::int64_t* __restrict__ compact,
                                        const std::uint64_t* __restrict__ keys,
                                        std::uint64_t* __restrict__ out) {
  const int r = rows[blockIdx.x];
  const std::int64_t from = start[r], to = compact[blockIdx.x],
                     m = compact[blockIdx.x + 1] - compact[blockIdx.x];
  for (std::int64_t i = threadIdx.x; i < m; i += blockDim.x) out[to + i] = keys[from + i];
}

__global__ void long_rows_scatter_kernel(const int* __restrict__ rows,
                                         const std::int64_t* __restrict__ start,
                                         const std::int64_t* __restrict__ compact,
                                         const std::uint64_t* __restrict__ sorted,
                                         std::int32_t* __restrict__ idx, float* __restrict__ dist) {
  const int r = rows[blockIdx.x];
  const std::int64_t to = start[r], from = compact[blockIdx.x],
                     m = compact[blockIdx.x + 1] - compact[blockIdx.x];
  for (std::int64_t i = threadIdx.x; i < m; i += blockDim.x)
    split_key(sorted[from + i], idx + to + i, dist + to + i);
}

__global__ void long_rows_len_kernel(const int* __restrict__ rows, int n_long,
                                     const std::int64_t* __restrict__ len,
                                     std::int64_t* __restrict__ out) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i <= n_long) out[i] = i < n_long ? len[rows[i]] : 0;
}

// The buffers of the long rows' sort, allocated once for all the passes of a fill, at the size
// of the largest pass (`entries`) and of all its rows (`rows`): a block freed during a call is
// only reused at the same size, so buffers sized pass by pass added up (a 1M-point scan's
// no-returns: 17 GB a pass).
struct LongRowBuffers {
  device_buffer<std::uint64_t> a, b;
  device_buffer<std::int64_t> len, compact;
  void ensure(std::int64_t entries, int rows, cudaStream_t stream, DeviceMemoryResource& mr) {
    if (a.size() > 0) {  // one size for every pass of a fill
      PCNN_EXPECTS(static_cast<std::int64_t>(a.size()) >= entries && len.size() > std::size_t(rows),
                   "radius: the long rows' buffers are smaller than a pass");
      return;
    }
    a.resize(entries, stream, mr);
    b.resize(entries, stream, mr);
    len.resize(rows + 1, stream, mr);
    compact.resize(rows + 1, stream, mr);
  }
};

// Rows too long for one warp (listed by radius_sort_kernel): gathered, sorted by CUB's segmented
// sort, and written back as (index, distance).
void sort_long_rows(int n_long, const int* d_rows, const std::int64_t* start,
                    const std::int64_t* len, const std::uint64_t* keys, std::int32_t* idx,
                    float* dist, LongRowBuffers& buf, cudaStream_t stream,
                    DeviceMemoryResource& mr) {
  std::int64_t* long_len = buf.len.data();
  std::int64_t* compact = buf.compact.data();
  long_rows_len_kernel<<<cuda::ceil_div(n_long + 1, kThreads), kThreads, 0, stream>>>(
      d_rows, n_long, len, long_len);
  PCNN_CHECK_LAUNCH();
  exclusive_sum(long_len, compact, n_long + 1, stream, mr);
  std::int64_t total = 0;
  PCNN_CUDA_TRY(
      cudaMemcpyAsync(&total, compact + n_long, sizeof total, cudaMemcpyDeviceToHost, stream));
  PCNN_CUDA_TRY(cudaStreamSynchronize(stream));
  long_rows_gather_kernel<<<n_long, kThreads, 0, stream>>>(d_rows, start, compact, keys,
                                                           buf.a.data());
  PCNN_CHECK_LAUNCH();
  // Through a double buffer: the sort then needs no copy of the keys of its own in its scratch.
  cub::DoubleBuffer<std::uint64_t> sorted(buf.a.data(), buf.b.data());
  std::size_t temp_bytes = 0;
  PCNN_CUDA_TRY(cub::DeviceSegmentedSort::SortKeys(nullptr, temp_bytes, sorted, total, n_long,
                                                   compact, compact + 1, stream));
  device_buffer<unsigned char> temp(temp_bytes, stream, mr);
  PCNN_CUDA_TRY(cub::DeviceSegmentedSort::SortKeys(temp.data(), temp_bytes, sorted, total, n_long,
                                                   compact, compact + 1, stream));
  long_rows_scatter_kernel<<<n_long, kThreads, 0, stream>>>(d_rows, start, compact,
                                                            sorted.Current(), idx, dist);
  PCNN_CHECK_LAUNCH();
}

// Passes of consecutive slots whose neighbors fit in `capacity` entries (and at most
// `max_slots` slots each): the end of each pass.
std::vector<int> plan_passes(const std::vector<std::int64_t>& len, std::int64_t capacity,
                             std::int64_t max_slots, std::int64_t available) {
  std::vector<int> ends;
  std::int64_t used = 0, slots = 0;
  for (std::size_t s = 0; s < len.size(); ++s) {
    if (len[s] > capacity)
      throw_out_of_memory("the " + std::to_string(len[s]) + " neighbors of one query",
                          len[s] * kEntryBytes, available);
    if (used + len[s] > capacity || slots == max_slots) {
      ends.push_back(static_cast<int>(s));
      used = slots = 0;
    }
    used += len[s];
    ++slots;
  }
  ends.push_back(static_cast<int>(len.size()));
  return ends;
}

struct RadiusTimes {
  float search_ms = 0, download_ms = 0;
  int passes = 0;
  std::int64_t evaluations = 0;
  std::int64_t longer = 0;  // the collect pass: rows longer than its capacity
};

// A radius search of `n` queries sorted along the index's curve, counted: the count of each
// original query index and their exclusive sum, on the device.
struct Counted {
  device_buffer<std::int64_t> counts, offsets;  // n + 1 each
};

// The count pass: fills `c` and copies the offsets (n + 1) to the host `h_offsets`.
// Synchronizes. With `scratch` (`capacity` keys a slot), the collect pass instead: the same walk
// and counts, and each query's first `capacity` neighbors' keys kept at slot * capacity (the
// rows longer than that counted in the times' `longer`).
RadiusTimes count_pass(const TreeView& tree, RadiusArgs a, int n, Counted& c,
                       std::int64_t* h_offsets, std::uint64_t* scratch, int capacity,
                       cudaStream_t stream, DeviceMemoryResource& mr) {
  RadiusTimes times;
  cuda_event start, counted;
  start.record(stream);
  c.counts.resize(n + 1, stream, mr);
  c.offsets.resize(n + 1, stream, mr);
  device_buffer<unsigned long long> counters(2, stream, mr);  // evaluations, longer rows
  PCNN_CUDA_TRY(cudaMemsetAsync(c.counts.data(), 0, c.counts.bytes(), stream));
  PCNN_CUDA_TRY(cudaMemsetAsync(counters.data(), 0, counters.bytes(), stream));
  a.slot_begin = 0;
  a.slot_end = n;
  a.counts = c.counts.data();
  a.counters = counters.data();
  const int blocks = cuda::ceil_div(n, kTreeQueryBlock);
  if (scratch) {
    a.keys = scratch;
    a.capacity = capacity;
    radius_tree_kernel<RadiusPass::collect><<<blocks, kTreeQueryBlock, 0, stream>>>(tree, a);
  } else {
    radius_tree_kernel<RadiusPass::count><<<blocks, kTreeQueryBlock, 0, stream>>>(tree, a);
  }
  PCNN_CHECK_LAUNCH();
  exclusive_sum(c.counts.data(), c.offsets.data(), n + 1, stream, mr);
  counted.record(stream);
  unsigned long long h_counters[2] = {0, 0};
  PCNN_CUDA_TRY(cudaMemcpyAsync(h_offsets, c.offsets.data(), c.offsets.bytes(),
                                cudaMemcpyDeviceToHost, stream));
  PCNN_CUDA_TRY(cudaMemcpyAsync(h_counters, counters.data(), counters.bytes(),
                                cudaMemcpyDeviceToHost, stream));
  PCNN_CUDA_TRY(cudaStreamSynchronize(stream));
  times.search_ms = counted.since(start);
  times.evaluations = static_cast<std::int64_t>(h_counters[0]);
  times.longer = static_cast<std::int64_t>(h_counters[1]);
  return times;
}

// What a fill of rows needs on the device, allocated once for all its passes: the sorted rows
// of the largest pass (`most` entries), its keys when a walk writes them, and per slot of `n`
// the rows' lengths and starts and the lists of long rows.
struct FillBuffers {
  std::int64_t most;
  int n;
  device_buffer<std::uint64_t> keys;
  std::uint64_t* keys_at = nullptr;  // where the walk writes keys: `keys`, or a block lent
  device_buffer<std::int32_t> idx;
  device_buffer<float> dist;
  device_buffer<std::int64_t> len, row_start;
  // Rows longer than kWarpRow, then those longer than kMediumRow; [0] and [1] count them.
  device_buffer<int> listed, long_rows, listed_counts;
  LongRowBuffers long_buf;
  FillBuffers(std::int64_t most_, int n_, cudaStream_t stream, DeviceMemoryResource& mr)
      : most(most_),
        n(n_),
        idx(most_, stream, mr),
        dist(most_, stream, mr),
        len(n_, stream, mr),
        row_start(n_, stream, mr),
        listed(n_, stream, mr),
        long_rows(n_, stream, mr),
        listed_counts(2, stream, mr) {}
};

// The fill of slots [begin, begin + rows) of a.queries, whose rows start at b.row_start[0, rows)
// (lengths b.len): the walk writes their keys, and their rows are sorted into b.idx / b.dist,
// ties ordered. Synchronizes once, to learn the long rows.
void fill_rows(const TreeView& tree, RadiusArgs a, int begin, int rows, FillBuffers& b,
               const ExactSearch& ex, cudaStream_t stream, DeviceMemoryResource& mr) {
  if (!b.keys_at) {
    b.keys.resize(b.most, stream, mr);
    b.keys_at = b.keys.data();
  }
  a.slot_begin = begin;
  a.slot_end = begin + rows;
  a.row_start = b.row_start.data();
  a.keys = b.keys_at;
  a.idx = b.idx.data();
  a.dist = b.dist.data();
  a.listed = b.listed.data();
  a.listed_count = b.listed_counts.data();
  PCNN_CUDA_TRY(cudaMemsetAsync(b.listed_counts.data(), 0, b.listed_counts.bytes(), stream));
  radius_tree_kernel<RadiusPass::fill>
      <<<cuda::ceil_div(rows, kTreeQueryBlock), kTreeQueryBlock, 0, stream>>>(tree, a);
  PCNN_CHECK_LAUNCH();
  radius_sort_kernel<<<std::min(cuda::ceil_div(rows, kTreeWarps * 32), 1024), kTreeWarps * 32, 0,
                       stream>>>(b.listed.data(), b.listed_counts.data(), b.row_start.data(),
                                 b.len.data(), b.keys_at, a.queries, begin, ex.refs, ex.queries,
                                 b.idx.data(), b.dist.data(), b.long_rows.data(),
                                 b.listed_counts.data() + 1);
  PCNN_CHECK_LAUNCH();
  int n_long = 0;
  PCNN_CUDA_TRY(cudaMemcpyAsync(&n_long, b.listed_counts.data() + 1, sizeof(int),
                                cudaMemcpyDeviceToHost, stream));
  PCNN_CUDA_TRY(cudaStreamSynchronize(stream));
  if (n_long == 0) return;
  b.long_buf.ensure(b.most, b.n, stream, mr);
  sort_long_rows(n_long, b.long_rows.data(), b.row_start.data(), b.len.data(), b.keys_at,
                 b.idx.data(), b.dist.data(), b.long_buf, stream, mr);
  long_rows_ties_kernel<<<cuda::ceil_div(n_long, kThreads), kThreads, 0, stream>>>(
      b.long_rows.data(), n_long, b.row_start.data(), b.len.data(), a.queries, begin, ex.refs,
      ex.queries, b.idx.data(), b.dist.data());
  PCNN_CHECK_LAUNCH();
}

// The fill passes after count_pass: row q (original query index) sorted into host memory
// `out_idx` / `out_dist` at h_offsets[q] (h_offsets[n] entries in all). One pass when every
// neighbor fits on the device, else passes of consecutive slots.
RadiusTimes fill_passes(const TreeView& tree, RadiusArgs a, int n, const Counted& c,
                        const std::int64_t* h_offsets, std::int64_t max_rows_per_pass,
                        const ExactSearch& ex, std::int32_t* out_idx, float* out_dist,
                        cudaStream_t stream, DeviceMemoryResource& mr) {
  RadiusTimes times;
  const std::int64_t total = h_offsets[n];
  if (total == 0) return times;
  const float4* queries = a.queries;
  const std::int64_t available = mr.available();
  const std::int64_t capacity =
      (available - available / 10 - std::int64_t(n) * kSlotBytes) / kEntryBytes;
  const std::int64_t max_slots = max_rows_per_pass > 0 ? (max_rows_per_pass + kTreeQueryBlock - 1) /
                                                             kTreeQueryBlock * kTreeQueryBlock
                                                       : n;
  const bool one_pass = total <= capacity && max_slots >= n;
  std::vector<int> ends{n};
  std::vector<std::int64_t> all_len;
  if (!one_pass) {
    if (capacity < 1)
      throw_out_of_memory("a radius search of " + std::to_string(n) + " queries",
                          std::int64_t(n) * kSlotBytes + kEntryBytes, available);
    device_buffer<std::int64_t> len(n, stream, mr);
    radius_rows_kernel<<<cuda::ceil_div(n, kThreads), kThreads, 0, stream>>>(
        queries, 0, n, c.counts.data(), nullptr, -1, len.data(), nullptr);
    PCNN_CHECK_LAUNCH();
    all_len.resize(n);
    PCNN_CUDA_TRY(
        cudaMemcpyAsync(all_len.data(), len.data(), len.bytes(), cudaMemcpyDeviceToHost, stream));
    PCNN_CUDA_TRY(cudaStreamSynchronize(stream));
    ends = plan_passes(all_len, capacity, max_slots, available);
  }
  std::vector<std::int64_t> pass_entries;
  for (std::size_t p = 0, first = 0; p < ends.size(); first = ends[p++]) {
    std::int64_t e = 0;
    for (int s = static_cast<int>(first); s < ends[p] && !one_pass; ++s) e += all_len[s];
    pass_entries.push_back(one_pass ? total : e);
  }
  FillBuffers b(*std::max_element(pass_entries.begin(), pass_entries.end()), n, stream, mr);
  std::vector<std::int32_t> h_idx(one_pass ? 0 : b.most), qid(one_pass ? 0 : n);
  std::vector<float> h_dist(h_idx.size());

  int begin = 0;
  for (std::size_t p = 0; p < ends.size(); ++p) {
    const int end = ends[p], rows = end - begin;
    const std::int64_t entries = pass_entries[p];
    cuda_event pass_start, searched, downloaded;
    pass_start.record(stream);
    radius_rows_kernel<<<cuda::ceil_div(rows, kThreads), kThreads, 0, stream>>>(
        queries, begin, rows, c.counts.data(), one_pass ? c.offsets.data() : nullptr, -1,
        b.len.data(), b.row_start.data());
    PCNN_CHECK_LAUNCH();
    if (!one_pass) exclusive_sum(b.len.data(), b.row_start.data(), rows, stream, mr);
    fill_rows(tree, a, begin, rows, b, ex, stream, mr);
    searched.record(stream);
    std::int32_t* to_idx = one_pass ? out_idx : h_idx.data();
    float* to_dist = one_pass ? out_dist : h_dist.data();
    PCNN_CUDA_TRY(cudaMemcpyAsync(to_idx, b.idx.data(), entries * sizeof(std::int32_t),
                                  cudaMemcpyDeviceToHost, stream));
    PCNN_CUDA_TRY(cudaMemcpyAsync(to_dist, b.dist.data(), entries * sizeof(float),
                                  cudaMemcpyDeviceToHost, stream));
    if (!one_pass)  // the original index of each query of the pass: the w word of its point
      PCNN_CUDA_TRY(cudaMemcpy2DAsync(qid.data(), sizeof(int), &queries[begin].w, sizeof(float4),
                                      sizeof(int), rows, cudaMemcpyDeviceToHost, stream));
    downloaded.record(stream);
    PCNN_CUDA_TRY(cudaStreamSynchronize(stream));
    if (!one_pass) {
      std::int64_t from = 0;
      for (int r = 0; r < rows; ++r) {
        const std::int64_t m = all_len[begin + r], to = h_offsets[qid[r]];
        std::memcpy(out_idx + to, h_idx.data() + from, m * sizeof(std::int32_t));
        std::memcpy(out_dist + to, h_dist.data() + from, m * sizeof(float));
        from += m;
      }
    }
    times.search_ms += searched.since(pass_start);
    times.download_ms += downloaded.since(searched);
    ++times.passes;
    begin = end;
  }
  return times;
}

// After the collect pass (count_pass with a scratch): every row into host memory `out_idx` /
// `out_dist` at h_offsets[q] (h_offsets[n] = total entries): rows of up to the scratch's capacity
// (its keys a slot) sorted from it, the `longer` ones (the collect pass's count) walked again and
// filled as the fill passes do. Without those, no round trip before the rows go down.
RadiusTimes finish_collected(const TreeView& tree, RadiusArgs a, int n, const Counted& c,
                             std::int64_t longer, device_buffer<std::uint64_t>& scratch,
                             std::int64_t total, const ExactSearch& ex, std::int32_t* out_idx,
                             float* out_dist, cudaStream_t stream, DeviceMemoryResource& mr) {
  RadiusTimes times;
  if (total == 0) return times;
  cuda_event pass_start, searched, downloaded;
  pass_start.record(stream);
  FillBuffers b(total, n, stream, mr);
  const int capacity = static_cast<int>(scratch.size() / n);  // count_collecting's choice
  collected_sort_kernel<<<cuda::ceil_div(n, kTreeQueryBlock), kTreeQueryBlock, 0, stream>>>(
      a.queries, n, capacity, c.counts.data(), c.offsets.data(), scratch.data(), ex.refs,
      ex.queries, b.idx.data(), b.dist.data());
  PCNN_CHECK_LAUNCH();
  if (longer > 0) {
    // Walked again where they are: a fill over every slot that skips the others, so that a warp
    // walks for neighbors along the curve (gathered side by side, the longer rows of a LiDAR-like
    // scan were far apart, and their fill took as long as the whole cloud's).
    radius_rows_kernel<<<cuda::ceil_div(n, kThreads), kThreads, 0, stream>>>(
        a.queries, 0, n, c.counts.data(), c.offsets.data(), capacity, b.len.data(),
        b.row_start.data());
    PCNN_CHECK_LAUNCH();
    // Their keys over the scratch where it holds every row's (its rows are sorted out of it
    // already, in stream order): no second block of `total` keys.
    if (static_cast<std::int64_t>(scratch.size()) >= total) b.keys_at = scratch.data();
    fill_rows(tree, a, 0, n, b, ex, stream, mr);
  }
  searched.record(stream);
  PCNN_CUDA_TRY(cudaMemcpyAsync(out_idx, b.idx.data(), total * sizeof(std::int32_t),
                                cudaMemcpyDeviceToHost, stream));
  PCNN_CUDA_TRY(cudaMemcpyAsync(out_dist, b.dist.data(), total * sizeof(float),
                                cudaMemcpyDeviceToHost, stream));
  downloaded.record(stream);
  PCNN_CUDA_TRY(cudaStreamSynchronize(stream));
  times.search_ms = searched.since(pass_start);
  times.download_ms = downloaded.since(searched);
  times.passes = 1;
  return times;
}

// What every radius call shares: the queries sorted along the index's curve (the index's own
// points for a self-search) and the search's arguments.
struct Prepared {
  device_buffer<float4> sorted;
  RadiusArgs args;
  int rows = 0;
};

Prepared prepare(const SpatialIndex& index, const PointsView* queries, const RadiusParams& params,
                 int query_offset, const ExactSearch& ex, cudaStream_t stream,
                 DeviceMemoryResource& mr) {
  Prepared p;
  p.rows = static_cast<int>(queries ? queries->count : index.n_total);
  if (queries && p.rows > 0)
    p.sorted =
        sort_queries(index, queries->data, queries->stride, static_cast<int>(p.rows), stream, mr);
  p.args.queries = queries ? p.sorted.data() : index.points.data();
  p.args.exclude_self = params.exclude_self;
  p.args.query_offset = query_offset;
  p.args.bound = make_radius_bound(params.radius, ex);
  return p;
}

void report(SearchTimings* timings, cuda_event& start, cuda_event& uploaded, cuda_event& built,
            const RadiusTimes& count, const RadiusTimes& fill) {
  if (!timings) return;
  timings->upload_ms = uploaded.since(start);
  timings->build_ms = built.since(uploaded);
  timings->search_ms = count.search_ms + fill.search_ms;
  timings->download_ms = fill.download_ms;
  timings->passes = std::max(fill.passes, 1);
  timings->distance_evaluations = count.evaluations;
}

// The count pass of a search that fills its rows next, as the collect pass where a scratch of
// kRadiusCollect (else kCollect) keys a query fits with rows of as many entries beside it
// (planned as the fill passes plan, kEntryBytes an entry): then one walk instead of two. Where
// neither does, memory is short, and the count and fill passes keep all of it: a scratch given
// up for them would stay the call's until it ends. Forced passes (max_rows_per_pass) keep the
// two walks too.
RadiusTimes count_collecting(const TreeView& tree, const Prepared& p, const RadiusParams& params,
                             Counted& c, std::int64_t* h_offsets,
                             device_buffer<std::uint64_t>& scratch, cudaStream_t stream,
                             DeviceMemoryResource& mr) {
  const std::int64_t available = mr.available();
  int capacity = 0;
  if (params.max_rows_per_pass <= 0)
    for (const int keys : {kRadiusCollect, kCollect})
      if (std::int64_t(p.rows) * (kSlotBytes + keys * (8 + kEntryBytes)) <=
          available - available / 10) {
        capacity = keys;
        scratch.resize(std::size_t(p.rows) * keys, stream, mr);
        break;
      }
  return count_pass(tree, p.args, p.rows, c, h_offsets, capacity > 0 ? scratch.data() : nullptr,
                    capacity, stream, mr);
}

// The rows after count_collecting into host memory `out_idx` / `out_dist` at h_offsets[q]: from
// the scratch when every row fits beside it on the device (total entries at kEntryBytes, as the
// fill passes plan, which covers the rows longer than its capacity), else the fill passes (rows
// of more than that on average), which then plan without the scratch's memory.
RadiusTimes fill_counted(const TreeView& tree, const Prepared& p, const RadiusParams& params,
                         const Counted& c, const RadiusTimes& counted,
                         const std::int64_t* h_offsets, device_buffer<std::uint64_t>& scratch,
                         const ExactSearch& ex, std::int32_t* out_idx, float* out_dist,
                         cudaStream_t stream, DeviceMemoryResource& mr) {
  const std::int64_t total = h_offsets[p.rows], left = mr.available();
  if (scratch.size() > 0 &&
      total * kEntryBytes + std::int64_t(p.rows) * kSlotBytes <= left - left / 10)
    return finish_collected(tree, p.args, p.rows, c, counted.longer, scratch, total, ex, out_idx,
                            out_dist, stream, mr);
  scratch = device_buffer<std::uint64_t>();
  return fill_passes(tree, p.args, p.rows, c, h_offsets, params.max_rows_per_pass, ex, out_idx,
                     out_dist, stream, mr);
}

}  // namespace

void check_radius_fits(std::int64_t working, std::int64_t rows, std::int64_t available) {
  const std::int64_t needed = working + rows * kSlotBytes;
  if (needed > available)
    throw_out_of_memory("a radius search of " + std::to_string(rows) + " queries", needed,
                        available);
}

RadiusResult radius_query(const SpatialIndex& index, const PointsView* queries,
                          const RadiusParams& params, SearchTimings* timings, cudaStream_t stream,
                          cuda_event& start, cuda_event& uploaded, const ExactSearch& ex,
                          DeviceMemoryResource& mr) {
  Prepared p = prepare(index, queries, params, 0, ex, stream, mr);
  cuda_event built;
  built.record(stream);
  RadiusResult result;
  result.rows = p.rows;
  // Host work after the device work is queued, so that the device does not wait on it.
  result.offsets.assign(static_cast<std::size_t>(p.rows) + 1, 0);
  if (p.rows == 0) return result;
  Counted c;
  const TreeView tree = index.view();
  device_buffer<std::uint64_t> scratch;
  const RadiusTimes counted =
      count_collecting(tree, p, params, c, result.offsets.data(), scratch, stream, mr);
  // The counts say what the result needs: refused at once when host memory cannot hold it.
  const std::int64_t total = result.offsets[p.rows];
  const std::int64_t needed = total * std::int64_t(sizeof(std::int32_t) + sizeof(float));
  const std::int64_t host = available_host_memory();
  if (host >= 0 && needed > host)
    throw out_of_memory_error("out of host memory: a radius result of " + std::to_string(total) +
                                  " pairs needs " + format_bytes(needed) + ", " +
                                  format_bytes(host) + " of host memory available",
                              needed, host);
  result.indices.resize(total);
  result.sqdist.resize(total);
  const RadiusTimes filled =
      fill_counted(tree, p, params, c, counted, result.offsets.data(), scratch, ex,
                   result.indices.data(), result.sqdist.data(), stream, mr);
  report(timings, start, uploaded, built, counted, filled);
  return result;
}

std::int64_t radius_count_query(const SpatialIndex& index, const PointsView* queries,
                                const RadiusParams& params, std::int64_t* h_offsets,
                                SearchTimings* timings, cudaStream_t stream, cuda_event& start,
                                cuda_event& uploaded, const ExactSearch& ex,
                                DeviceMemoryResource& mr) {
  Prepared p = prepare(index, queries, params, 0, ex, stream, mr);
  cuda_event built;
  built.record(stream);
  h_offsets[0] = 0;
  if (p.rows == 0) return 0;
  Counted c;
  const RadiusTimes counted =
      count_pass(index.view(), p.args, p.rows, c, h_offsets, nullptr, 0, stream, mr);
  report(timings, start, uploaded, built, counted, RadiusTimes{});
  return h_offsets[p.rows];
}

void radius_fill_query(const SpatialIndex& index, const PointsView* queries,
                       const RadiusParams& params, int query_offset, const std::int64_t* given,
                       std::int32_t* out_idx, float* out_dist, SearchTimings* timings,
                       cudaStream_t stream, cuda_event& start, cuda_event& uploaded,
                       const ExactSearch& ex, DeviceMemoryResource& mr) {
  Prepared p = prepare(index, queries, params, query_offset, ex, stream, mr);
  cuda_event built;
  built.record(stream);
  if (p.rows == 0) return;
  // Counted again, collecting where it can (then the one walk of the fill): the rows of this
  // range, where its entries go, and the proof that the caller's offsets are this search's.
  Counted c;
  std::vector<std::int64_t> offsets(static_cast<std::size_t>(p.rows) + 1);
  const TreeView tree = index.view();
  device_buffer<std::uint64_t> scratch;
  const RadiusTimes counted =
      count_collecting(tree, p, params, c, offsets.data(), scratch, stream, mr);
  for (int q = 0; q < p.rows; ++q)
    PCNN_EXPECTS(offsets[q + 1] - offsets[q] == given[q + 1] - given[q],
                 "radius_fill: the offsets are not those radius_count wrote for this search");
  const RadiusTimes filled = fill_counted(tree, p, params, c, counted, offsets.data(), scratch, ex,
                                          out_idx, out_dist, stream, mr);
  report(timings, start, uploaded, built, counted, filled);
}

}  // namespace detail

}  // namespace pcnn
