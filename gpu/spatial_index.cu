// Building the spatial index: bounds, curve keys, radix sort, cell and node boxes.
#include <cub/device/device_radix_sort.cuh>
#include <cuda/cmath>

#include <algorithm>
#include <climits>

#include "detail/cuda_try.cuh"
#include "detail/curve_key.cuh"
#include "detail/spatial_index.cuh"
#include "detail/warp_reduce.cuh"

namespace pcnn::detail {
namespace {

constexpr int kThreads = 256;

// Bounding box and count of the finite points: per-thread, then the block, then one atomic per
// block on order-preserving int encodings (6 + 1 atomics a block, not a point).
__global__ void bounds_kernel(const float* __restrict__ xyz, std::int64_t stride, int n,
                              int* __restrict__ out /* lo xyz, hi xyz (ordered ints), count */) {
  float lo[3] = {INFINITY, INFINITY, INFINITY}, hi[3] = {-INFINITY, -INFINITY, -INFINITY};
  int count = 0;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
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

__global__ void init_bounds_kernel(int* out) {
  for (int a = 0; a < 3; ++a) {
    out[a] = float_to_ordered(INFINITY);
    out[3 + a] = float_to_ordered(-INFINITY);
  }
  out[6] = 0;
  out[7] = 0;
}

// Flags (out[7] = 1) a key bucket holding more than a cell of finite points that differ at the
// curve's full resolution: the short sort left the order inside it to the input, so its cells
// would be random samples of it. A far outlier squeezes a whole cloud into a few buckets of the
// bounding cube's grid. Identical points (a scan's no-returns stored at the origin) share every
// key bit, so no sort can order them: a bucket of them alone is left as it is. A bucket's first
// and (cell + 1)-th points are compared at full resolution (`ids`: the sorted points' indices).
__global__ void crowded_kernel(const std::uint64_t* __restrict__ keys, const int* __restrict__ ids,
                               const float* __restrict__ xyz, std::int64_t stride,
                               const float* __restrict__ bounds, int n, int* __restrict__ out) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n - kCell) return;
  const std::uint64_t key = keys[i];
  if (key == kInvalidKey || key != keys[i + kCell]) return;
  const float* a = xyz + ids[i] * stride;
  const float* b = xyz + ids[i + kCell] * stride;
  if (curve_key(a[0], a[1], a[2], bounds) != curve_key(b[0], b[1], b[2], bounds))
    out[7] = 1;  // any thread; the same value
}

__global__ void decode_bounds_kernel(const int* in, float* bounds) {
  for (int a = 0; a < 6; ++a) bounds[a] = ordered_to_float(in[a]);
}

// Keys with the bits below `low_bit` cleared (see key_low_bit).
__global__ void keys_kernel(const float* __restrict__ xyz, std::int64_t stride, int n,
                            const float* __restrict__ bounds, int low_bit,
                            std::uint64_t* __restrict__ keys, int* __restrict__ ids) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float* p = xyz + i * stride;
  keys[i] = curve_key(p[0], p[1], p[2], bounds, low_bit);
  ids[i] = i;
}

// The lowest curve key bit that first orders an index of n points: about 2^18 key buckets a
// point on average over the bounding cube (3 bits an octree level, plus 18); the bits below are
// cleared, so the kept keys are sorted (home_cell's binary search), and the invalid key (bit 63)
// still sorts last. Fewer bits, fewer radix passes of 8 bits: 100k points sort on 37 bits (5
// passes) instead of 64 (8), 10M on 43 (6). Where a bucket still holds more than a cell of
// points (a region over 2^23 times denser than the cube's mean: a far outlier), the build sorts
// again on every bit (crowded_kernel). With 2^12 buckets a point, LiDAR scans' dense near field
// tripped that second sort and made their build slower than one full sort (round 8).
// Order only: every search is exact whatever the order of the points.
int key_low_bit(std::int64_t n) {
  int levels = 1;
  while (levels < kCurveBits && (std::int64_t(1) << (3 * levels)) < n) ++levels;
  return 63 - std::min(63, 3 * levels + 18);
}

__global__ void gather_kernel(const float* __restrict__ xyz, std::int64_t stride, int n,
                              const int* __restrict__ ids, float4* __restrict__ out) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= n) return;
  const int i = ids[j];
  const float* p = xyz + i * stride;
  out[j] = make_float4(p[0], p[1], p[2], __int_as_float(i));
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

// Sorts (key, index) pairs with CUB; returns the buffers holding the sorted result.
void sort_pairs(device_buffer<std::uint64_t>& keys, device_buffer<int>& ids, int n, int low_bit,
                cudaStream_t stream, DeviceMemoryResource& mr) {
  device_buffer<std::uint64_t> keys_alt(n, stream, mr);
  device_buffer<int> ids_alt(n, stream, mr);
  cub::DoubleBuffer<std::uint64_t> k(keys.data(), keys_alt.data());
  cub::DoubleBuffer<int> v(ids.data(), ids_alt.data());
  std::size_t temp_bytes = 0;
  PCNN_CUDA_TRY(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, k, v, n, low_bit, 64, stream));
  device_buffer<unsigned char> temp(temp_bytes, stream, mr);
  PCNN_CUDA_TRY(
      cub::DeviceRadixSort::SortPairs(temp.data(), temp_bytes, k, v, n, low_bit, 64, stream));
  if (k.Current() != keys.data()) std::swap(keys, keys_alt);
  if (v.Current() != ids.data()) std::swap(ids, ids_alt);
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
  v.levels = static_cast<int>(level_count.size());
  for (int l = 0; l < v.levels; ++l) {
    v.level_count[l] = level_count[l];
    v.level_offset[l] = level_offset[l];
  }
  return v;
}

SpatialIndex build_spatial_index(const float* xyz, std::int64_t stride, int n_total,
                                 cudaStream_t stream, DeviceMemoryResource& mr) {
  SpatialIndex index;
  index.n_total = n_total;
  device_buffer<int> stats(8, stream, mr);  // bounds, finite count, crowded flag
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
  const auto order = [&](int low_bit) {
    keys_kernel<<<cuda::ceil_div(n_total, kThreads), kThreads, 0, stream>>>(
        xyz, stride, n_total, index.bounds.data(), low_bit, index.keys.data(), ids.data());
    PCNN_CHECK_LAUNCH();
    sort_pairs(index.keys, ids, n_total, low_bit, stream, mr);
    index.key_low_bit = low_bit;
  };
  if (n_total > 0) {
    order(key_low_bit(n_total));
    if (n_total > kCell && index.key_low_bit > 0) {
      crowded_kernel<<<cuda::ceil_div(n_total - kCell, kThreads), kThreads, 0, stream>>>(
          index.keys.data(), ids.data(), xyz, stride, index.bounds.data(), n_total, stats.data());
      PCNN_CHECK_LAUNCH();
    }
  }
  int count_crowded[2] = {0, 0};  // read together: the build's one round trip
  PCNN_CUDA_TRY(cudaMemcpyAsync(count_crowded, stats.data() + 6, 2 * sizeof(int),
                                cudaMemcpyDeviceToHost, stream));
  PCNN_CUDA_TRY(cudaStreamSynchronize(stream));
  index.n = count_crowded[0];
  const int count = index.n;
  if (count_crowded[1] != 0) order(0);
  if (n_total > 0) {
    index.points.resize(n_total, stream,
                        mr);  // after the sort, whose double buffers are gone by now
    gather_kernel<<<cuda::ceil_div(n_total, kThreads), kThreads, 0, stream>>>(
        xyz, stride, n_total, ids.data(), index.points.data());
    PCNN_CHECK_LAUNCH();
  }

  // Level 0 holds one box per cell; each level above one box per kFanout boxes below, up to a
  // level of at most kFanout boxes, which the search starts from.
  int total = 0;
  for (int c = (count + kCell - 1) / kCell; c > 0; c = (c + kFanout - 1) / kFanout) {
    index.level_offset.push_back(total);
    index.level_count.push_back(c);
    total += c;
    if (c <= kFanout) break;
  }
  index.box_lo.resize(total, stream, mr);
  index.box_hi.resize(total, stream, mr);
  const int levels = static_cast<int>(index.level_count.size());
  for (int l = 0; l < levels; ++l) {
    float4* lo = index.box_lo.data() + index.level_offset[l];
    float4* hi = index.box_hi.data() + index.level_offset[l];
    const int c = index.level_count[l];
    if (l == 0) {
      cell_boxes_kernel<<<cuda::ceil_div(c, kThreads / 32), kThreads, 0, stream>>>(
          index.points.data(), count, c, lo, hi);
    } else {
      node_boxes_kernel<<<cuda::ceil_div(c, kThreads / 32), kThreads, 0, stream>>>(
          index.box_lo.data() + index.level_offset[l - 1],
          index.box_hi.data() + index.level_offset[l - 1], index.level_count[l - 1], c, lo, hi);
    }
    PCNN_CHECK_LAUNCH();
  }
  return index;
}

device_buffer<float4> sort_queries(const SpatialIndex& index, const float* xyz, std::int64_t stride,
                                   int nq, cudaStream_t stream, DeviceMemoryResource& mr) {
  device_buffer<float4> sorted(nq, stream, mr);
  if (nq == 0) return sorted;
  device_buffer<std::uint64_t> keys(nq, stream, mr);
  device_buffer<int> ids(nq, stream, mr);
  // At the index's resolution: the order serves its cells.
  const int low_bit = index.key_low_bit;
  keys_kernel<<<cuda::ceil_div(nq, kThreads), kThreads, 0, stream>>>(
      xyz, stride, nq, index.bounds.data(), low_bit, keys.data(), ids.data());
  PCNN_CHECK_LAUNCH();
  sort_pairs(keys, ids, nq, low_bit, stream, mr);
  gather_kernel<<<cuda::ceil_div(nq, kThreads), kThreads, 0, stream>>>(xyz, stride, nq, ids.data(),
                                                                       sorted.data());
  PCNN_CHECK_LAUNCH();
  return sorted;
}

}  // namespace pcnn::detail
