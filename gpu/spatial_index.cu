// Building the spatial index: bounds, curve keys, radix sort, cell and node boxes.
#include <cub/device/device_scan.cuh>
#include <cuda/cmath>

#include <algorithm>
#include <climits>

#include "detail/cuda_try.cuh"
#include "detail/curve_key.cuh"
#include "detail/curve_order.cuh"
#include "detail/spatial_index.cuh"
#include "detail/warp_reduce.cuh"
#include "pcnn/knn.hpp"

namespace pcnn::detail {
namespace {

constexpr int kThreads = 256;

// Bounding box and count of the finite points: per-thread, then the block, then one atomic per
// block on order-preserving int encodings (6 + 1 atomics a block, not a point).
__global__ void bounds_kernel(const float* __restrict__ xyz, std::int64_t stride, int n,
                              int* __restrict__ out /* lo xyz, hi xyz (ordered ints), count */) {
  float lo[3] = {INFINITY, INFINITY, INFINITY}, hi[3] = {-INFINITY, -INFINITY, -INFINITY};
  int count = 0;
  for (std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const float* p = xyz + i * stride;
    if (!finite3(p[0], p[1], p[2])) continue;
    ++count;
#pragma unroll
    for (int a = 0; a < 3; ++a) {
      lo[a] = fminf(lo[a], p[a]);
      hi[a] = fmaxf(hi[a], p[a]);
    }
  }
  int block_lo[3], block_hi[3];
#pragma unroll
  for (int a = 0; a < 3; ++a) {
    block_lo[a] = block_combine(float_to_ordered(lo[a]), MinOp{}, INT_MAX);
    block_hi[a] = block_combine(float_to_ordered(hi[a]), MaxOp{}, INT_MIN);
  }
  count = block_combine(count, SumOp{}, 0);
  if (threadIdx.x == 0) {
#pragma unroll
    for (int a = 0; a < 3; ++a) {
      atomicMin(out + a, block_lo[a]);
      atomicMax(out + 3 + a, block_hi[a]);
    }
    atomicAdd(out + 6, count);
  }
}

// The build's device results, read at its round trip: the bounds (lo xyz, hi xyz as ordered
// ints), the finite count, then order_check_kernel's flags and count of buckets.
constexpr int kStats = 11;

__global__ void init_bounds_kernel(int* out) {
  for (int a = 0; a < 3; ++a) {
    out[a] = float_to_ordered(INFINITY);
    out[3 + a] = float_to_ordered(-INFINITY);
  }
  for (int a = 6; a < kStats; ++a) out[a] = 0;
}

// The points of a run of repeats that a kNN row may hold: its first kMaxK + 1 (see
// spatial_index.cuh). A run of more is flagged, out[8] = 1, where a sorted position and the one
// kRepeatRun after it hold the same key and the same filter coordinates (the points as stored
// may still differ: the exact pass decides).
constexpr int kRepeatRun = kMaxK + 1;

// After a sort on key bits [low_bit, 64) of keys that keep every bit (sort_by_curve; `ids`: the
// sorted points' indices), a bucket being a run of keys equal in the sorted bits:
// - Flags (out[7] = 1) a bucket holding more than a cell of finite points that differ at the
//   curve's full resolution (`check_crowded`): the sort left the order inside it to the input, so
//   its cells would be random samples of it. A far outlier squeezes a whole cloud into a few
//   buckets of the bounding cube's grid. Identical points (a scan's no-returns stored at the
//   origin) share every key bit, so no sort can order them: a bucket of them alone is left as it
//   is. Points kCell apart in a bucket are compared by their full keys.
// - Flags (out[8] = 1) a possible run of shadows: points kRepeatRun apart with one full key and
//   the same filter coordinates.
// - Flags (out[9] = 1) a run of more than kShortKeyRun finite points of one bucket.
// - Counts the buckets (out[10]), which refine_by_curve ranks.
__global__ void order_check_kernel(const std::uint64_t* __restrict__ keys,
                                   const int* __restrict__ ids, const float* __restrict__ xyz,
                                   std::int64_t stride, int n, int low_bit, bool check_crowded,
                                   int* __restrict__ out) {
  int heads = 0, flags = 0;  // flag f: bit f - 7
  for (std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const std::uint64_t key = keys[i];
    heads += i == 0 || !same_bucket(key, keys[i - 1], low_bit);
    if (key == kInvalidKey) continue;
    const auto bucket_at = [&](int d) { return same_bucket(key, keys[i + d], low_bit); };
    if (check_crowded && i < n - kCell && bucket_at(kCell) && key != keys[i + kCell]) flags |= 1;
    if (i < n - kRepeatRun && key == keys[i + kRepeatRun]) {
      const float* a = xyz + ids[i] * stride;
      const float* b = xyz + ids[i + kRepeatRun] * stride;
      if (a[0] == b[0] && a[1] == b[1] && a[2] == b[2]) flags |= 2;
    }
    if (i < n - kShortKeyRun && bucket_at(kShortKeyRun)) flags |= 4;
  }
  // A block's flags in one write each, not a thread's (a crowded cloud's threads would all write
  // the one flag).
  heads = block_combine(heads, SumOp{}, 0);
  flags = block_combine(flags, OrOp{}, 0);
  if (threadIdx.x != 0) return;
  if (heads) atomicAdd(out + 10, heads);
  for (int f = 0; f < 3; ++f)
    if (flags >> f & 1) out[7 + f] = 1;
}

__global__ void decode_bounds_kernel(const int* in, float* bounds) {
  for (int a = 0; a < 6; ++a) bounds[a] = ordered_to_float(in[a]);
}

// The lowest curve key bit that first orders an index of n points: about 2^18 key buckets a
// point on average over the bounding cube (3 bits an octree level, plus 18); the index's keys
// are sorted on the bits from there up (home_cell's binary search clears a query key's bits
// below), and the invalid key (bit 63) still sorts last. Fewer bits, fewer radix passes of 8 bits:
// 100k points sort on 37 bits (5 passes) instead of 64 (8), 10M on 43 (6). Where a bucket still
// holds more than a cell of points that differ (a region over 2^23 times denser than the cube's
// mean: a far outlier, a LiDAR scan's near field at 10M points), the build sorts the buckets
// further on the bits below (order_check_kernel, refine_by_curve). With 2^12 buckets a point, LiDAR
// scans' dense near field tripped that second sort, then a full one, and made their build slower
// (round 8). Order only: every search is exact whatever the order of the points.
int key_low_bit(std::int64_t n) {
  int levels = 1;
  while (levels < kCurveBits && (std::int64_t(1) << (3 * levels)) < n) ++levels;
  return 63 - std::min(63, 3 * levels + 18);
}

// One warp per cell: lane t holds point t of the cell.
__global__ void cell_boxes_kernel(const float4* __restrict__ pts, int n, int cells,
                                  float4* __restrict__ lo, float4* __restrict__ hi) {
  const int cell = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x & 31;
  if (cell >= cells) return;  // whole warps leave together
  const int i = cell * kCell + lane;
  float4 p = i < n ? pts[i] : make_float4(NAN, NAN, NAN, 0.f);
  const bool ok = i < n;
  const float l[3] = {warp_min(ok ? p.x : INFINITY), warp_min(ok ? p.y : INFINITY),
                      warp_min(ok ? p.z : INFINITY)};
  const float h[3] = {warp_max(ok ? p.x : -INFINITY), warp_max(ok ? p.y : -INFINITY),
                      warp_max(ok ? p.z : -INFINITY)};
  if (lane == 0) {
    lo[cell] = make_float4(l[0], l[1], l[2], 0.f);
    hi[cell] = make_float4(h[0], h[1], h[2], 0.f);
  }
}

// One warp per node: lane t holds child t's box.
__global__ void node_boxes_kernel(const float4* __restrict__ child_lo,
                                  const float4* __restrict__ child_hi, int children, int nodes,
                                  float4* __restrict__ lo, float4* __restrict__ hi) {
  const int node = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x & 31;
  if (node >= nodes) return;
  const int c = node * kFanout + lane;
  const bool ok = c < children;
  const float4 a = ok ? child_lo[c] : make_float4(INFINITY, INFINITY, INFINITY, 0.f);
  const float4 b = ok ? child_hi[c] : make_float4(-INFINITY, -INFINITY, -INFINITY, 0.f);
  const float l[3] = {warp_min(a.x), warp_min(a.y), warp_min(a.z)};
  const float h[3] = {warp_max(b.x), warp_max(b.y), warp_max(b.z)};
  if (lane == 0) {
    lo[node] = make_float4(l[0], l[1], l[2], 0.f);
    hi[node] = make_float4(h[0], h[1], h[2], 0.f);
  }
}

// Where a run of points stored with identical coordinates starts: each sorted position its own
// index if it starts one, else 0 (a running maximum then gives every position its run's start).
__global__ void run_heads_kernel(const float4* __restrict__ pts, int n, ExactCoords exact,
                                 int* __restrict__ head) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  bool starts = i == 0;
  if (!starts) {
    const double3 a = exact.at(__float_as_int(pts[i].w)),
                  b = exact.at(__float_as_int(pts[i - 1].w));
    starts = a.x != b.x || a.y != b.y || a.z != b.z;  // -0 and 0 are one place: same distances
  }
  head[i] = starts ? i : 0;
}

struct MaxInt {
  __device__ int operator()(int a, int b) const { return a > b ? a : b; }
};

// 1 where a sorted position is among its run's first kRepeatRun, else 0 (a shadow).
__global__ void kept_kernel(const int* __restrict__ run_start, int n, int* __restrict__ kept) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) kept[i] = i - run_start[i] < kRepeatRun ? 1 : 0;
}

// Kept points to [0, n_knn), shadows to [n_knn, n), each in the order they had.
__global__ void set_aside_kernel(const float4* __restrict__ pts,
                                 const std::uint64_t* __restrict__ keys,
                                 const int* __restrict__ kept, const int* __restrict__ before,
                                 int n, int n_knn, float4* __restrict__ pts_out,
                                 std::uint64_t* __restrict__ keys_out) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int to = kept[i] ? before[i] : n_knn + (i - before[i]);
  pts_out[to] = pts[i];
  keys_out[to] = keys[i];
}

// Moves the shadows of runs of repeats behind the other finite points (spatial_index.cuh);
// returns how many points are left before them. Synchronizes once.
int set_aside_shadows(SpatialIndex& index, const ExactCoords& exact, cudaStream_t stream,
                      DeviceMemoryResource& mr) {
  const int n = index.n;
  device_buffer<int> start(n, stream, mr), kept(n, stream, mr), before(n, stream, mr);
  run_heads_kernel<<<cuda::ceil_div(n, kThreads), kThreads, 0, stream>>>(index.points.data(), n,
                                                                         exact, start.data());
  PCNN_CHECK_LAUNCH();
  std::size_t scan_bytes = 0, sum_bytes = 0;
  PCNN_CUDA_TRY(cub::DeviceScan::InclusiveScan(nullptr, scan_bytes, start.data(), start.data(),
                                               MaxInt{}, n, stream));
  PCNN_CUDA_TRY(
      cub::DeviceScan::ExclusiveSum(nullptr, sum_bytes, kept.data(), before.data(), n, stream));
  device_buffer<unsigned char> temp(std::max(scan_bytes, sum_bytes), stream, mr);
  PCNN_CUDA_TRY(cub::DeviceScan::InclusiveScan(temp.data(), scan_bytes, start.data(), start.data(),
                                               MaxInt{}, n, stream));
  kept_kernel<<<cuda::ceil_div(n, kThreads), kThreads, 0, stream>>>(start.data(), n, kept.data());
  PCNN_CHECK_LAUNCH();
  PCNN_CUDA_TRY(
      cub::DeviceScan::ExclusiveSum(temp.data(), sum_bytes, kept.data(), before.data(), n, stream));
  int last[2] = {0, 0};  // before and kept of the last position
  PCNN_CUDA_TRY(cudaMemcpyAsync(&last[0], before.data() + n - 1, sizeof(int),
                                cudaMemcpyDeviceToHost, stream));
  PCNN_CUDA_TRY(
      cudaMemcpyAsync(&last[1], kept.data() + n - 1, sizeof(int), cudaMemcpyDeviceToHost, stream));
  PCNN_CUDA_TRY(cudaStreamSynchronize(stream));
  const int n_knn = last[0] + last[1];
  if (n_knn == n) return n;
  device_buffer<float4> pts(index.n_total, stream, mr);
  device_buffer<std::uint64_t> keys(index.n_total, stream, mr);
  set_aside_kernel<<<cuda::ceil_div(n, kThreads), kThreads, 0, stream>>>(
      index.points.data(), index.keys.data(), kept.data(), before.data(), n, n_knn, pts.data(),
      keys.data());
  PCNN_CHECK_LAUNCH();
  if (index.n_total > n) {  // the non-finite points stay last
    PCNN_CUDA_TRY(cudaMemcpyAsync(pts.data() + n, index.points.data() + n,
                                  (index.n_total - n) * sizeof(float4), cudaMemcpyDeviceToDevice,
                                  stream));
    PCNN_CUDA_TRY(cudaMemcpyAsync(keys.data() + n, index.keys.data() + n,
                                  (index.n_total - n) * sizeof(std::uint64_t),
                                  cudaMemcpyDeviceToDevice, stream));
  }
  std::swap(index.points, pts);
  std::swap(index.keys, keys);
  return n_knn;
}

// Level 0 holds one box per cell of `count` points; each level above one box per kFanout boxes
// below, up to a level of at most kFanout boxes, which the search starts from.
void build_levels(const float4* pts, int count, device_buffer<float4>& box_lo,
                  device_buffer<float4>& box_hi, std::vector<int>& level_count,
                  std::vector<int>& level_offset, cudaStream_t stream, DeviceMemoryResource& mr) {
  int total = 0;
  for (int c = (count + kCell - 1) / kCell; c > 0; c = (c + kFanout - 1) / kFanout) {
    level_offset.push_back(total);
    level_count.push_back(c);
    total += c;
    if (c <= kFanout) break;
  }
  box_lo.resize(total, stream, mr);
  box_hi.resize(total, stream, mr);
  const int levels = static_cast<int>(level_count.size());
  for (int l = 0; l < levels; ++l) {
    float4* lo = box_lo.data() + level_offset[l];
    float4* hi = box_hi.data() + level_offset[l];
    const int c = level_count[l];
    if (l == 0) {
      cell_boxes_kernel<<<cuda::ceil_div(c, kThreads / 32), kThreads, 0, stream>>>(pts, count, c,
                                                                                   lo, hi);
    } else {
      node_boxes_kernel<<<cuda::ceil_div(c, kThreads / 32), kThreads, 0, stream>>>(
          box_lo.data() + level_offset[l - 1], box_hi.data() + level_offset[l - 1],
          level_count[l - 1], c, lo, hi);
    }
    PCNN_CHECK_LAUNCH();
  }
}

}  // namespace

TreeView SpatialIndex::view() const {
  TreeView v;
  v.points = points.data();
  v.keys = keys.data();
  v.bounds = bounds.data();
  v.box_lo = box_lo.data();
  v.box_hi = box_hi.data();
  v.n = n;
  v.key_low_bit = key_low_bit;
  v.short_key_runs = short_key_runs;
  v.levels = static_cast<int>(level_count.size());
  for (int l = 0; l < v.levels; ++l) {
    v.level_count[l] = level_count[l];
    v.level_offset[l] = level_offset[l];
  }
  return v;
}

TreeView SpatialIndex::knn_view() const {
  TreeView v = view();
  if (knn_level_count.empty()) return v;
  v.box_lo = knn_box_lo.data();
  v.box_hi = knn_box_hi.data();
  v.n = n_knn;
  v.levels = static_cast<int>(knn_level_count.size());
  for (int l = 0; l < kMaxLevels; ++l) {
    v.level_count[l] = l < v.levels ? knn_level_count[l] : 0;
    v.level_offset[l] = l < v.levels ? knn_level_offset[l] : 0;
  }
  return v;
}

SpatialIndex build_spatial_index(const float* xyz, std::int64_t stride, int n_total,
                                 const ExactCoords& exact, cudaStream_t stream,
                                 DeviceMemoryResource& mr) {
  SpatialIndex index;
  index.n_total = n_total;
  device_buffer<int> stats(kStats, stream, mr);
  index.bounds.resize(6, stream, mr);
  init_bounds_kernel<<<1, 1, 0, stream>>>(stats.data());
  PCNN_CHECK_LAUNCH();
  if (n_total > 0) {
    const int blocks = std::min(cuda::ceil_div(n_total, kThreads), 1024);
    bounds_kernel<<<blocks, kThreads, 0, stream>>>(xyz, stride, n_total, stats.data());
    PCNN_CHECK_LAUNCH();
  }
  decode_bounds_kernel<<<1, 1, 0, stream>>>(stats.data(), index.bounds.data());
  PCNN_CHECK_LAUNCH();

  index.keys.resize(n_total, stream, mr);
  device_buffer<int> ids(n_total, stream, mr);
  int read[kStats] = {};
  int* checks = read + 7;  // crowded, repeats, long run, buckets
  // Checks the order (order_check_kernel) and reads the results from `first` on: the build's
  // round trip.
  const auto check = [&](int first) {
    if (n_total > 0) {
      order_check_kernel<<<std::min(cuda::ceil_div(n_total, kThreads), 1024), kThreads, 0,
                           stream>>>(index.keys.data(), ids.data(), xyz, stride, n_total,
                                     index.key_low_bit, index.key_low_bit > 0, stats.data());
      PCNN_CHECK_LAUNCH();
    }
    PCNN_CUDA_TRY(cudaMemcpyAsync(read + first, stats.data() + first,
                                  (kStats - first) * sizeof(int), cudaMemcpyDeviceToHost, stream));
    PCNN_CUDA_TRY(cudaStreamSynchronize(stream));
  };
  if (n_total > 0) {
    index.key_low_bit = key_low_bit(n_total);
    sort_by_curve(xyz, stride, n_total, index.bounds.data(), index.key_low_bit, index.keys, ids,
                  stream, mr);
  }
  check(0);
  for (int a = 0; a < 6; ++a) index.host_bounds[a] = ordered_to_float(read[a]);
  index.n = read[6];
  index.n_knn = index.n;
  // Crowded buckets (a far outlier's cloud, a LiDAR scan's crowded near field): sorted further
  // on the bits below, with a check (and a round trip) after each sort.
  while (checks[0] != 0 && index.key_low_bit > 0) {
    index.key_low_bit =
        refine_by_curve(index.keys, ids, n_total, index.key_low_bit, checks[3], stream, mr);
    PCNN_CUDA_TRY(cudaMemsetAsync(stats.data() + 7, 0, (kStats - 7) * sizeof(int), stream));
    check(7);
  }
  index.short_key_runs = checks[2] == 0;  // which also rules out shadows (runs of 130)
  if (n_total > 0) {
    // After the sorts, whose double buffers are gone by now.
    index.points.resize(n_total, stream, mr);
    gather_points(xyz, stride, n_total, ids.data(), index.points.data(), stream);
  }
  // The flag is a hint, taken on the final order: set_aside_shadows finds the runs, on the points
  // as stored.
  if (checks[1] != 0) index.n_knn = set_aside_shadows(index, exact, stream, mr);
  build_levels(index.points.data(), index.n, index.box_lo, index.box_hi, index.level_count,
               index.level_offset, stream, mr);
  if (index.n_knn < index.n)
    build_levels(index.points.data(), index.n_knn, index.knn_box_lo, index.knn_box_hi,
                 index.knn_level_count, index.knn_level_offset, stream, mr);
  return index;
}

device_buffer<float4> sort_queries(const SpatialIndex& index, const float* xyz, std::int64_t stride,
                                   int nq, cudaStream_t stream, DeviceMemoryResource& mr) {
  device_buffer<float4> sorted(nq, stream, mr);
  // At the index's resolution: the order serves its cells.
  points_by_curve(xyz, stride, nq, index.bounds.data(), index.key_low_bit, sorted.data(), stream,
                  mr);
  return sorted;
}

}  // namespace pcnn::detail
