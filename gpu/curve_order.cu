// Points ordered along the index's curve (see detail/curve_order.cuh).
#include <cooperative_groups.h>

#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/transform_iterator.h>
#include <cub/block/block_scan.cuh>
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>
#include <cuda/cmath>

#include <algorithm>
#include <array>
#include <atomic>

#include "detail/cuda_try.cuh"
#include "detail/curve_key.cuh"
#include "detail/curve_order.cuh"
#include "detail/per_device.cuh"

namespace pcnn::detail {
namespace {

constexpr int kThreads = 256;

// Keys with the bits below `low_bit` cleared (0: every bit, the keys sort_by_curve keeps).
__global__ void keys_kernel(const float* __restrict__ xyz, std::int64_t stride, int n,
                            const float* __restrict__ bounds, int low_bit,
                            std::uint64_t* __restrict__ keys, int* __restrict__ ids) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float* p = xyz + i * stride;
  keys[i] = curve_key(p[0], p[1], p[2], bounds, low_bit);
  ids[i] = i;
}

// CUB's sort of (key, index) pairs on key bits [begin_bit, end_bit); with `temp` null, its
// scratch bytes.
template <class Key>
void cub_sort_pairs(void* temp, std::size_t& temp_bytes, cub::DoubleBuffer<Key>& keys,
                    cub::DoubleBuffer<int>& ids, int n, int begin_bit, int end_bit,
                    cudaStream_t stream) {
  PCNN_CUDA_TRY(
      cub::DeviceRadixSort::SortPairs(temp, temp_bytes, keys, ids, n, begin_bit, end_bit, stream));
}

// Sorts (key, index) pairs on key bits [begin_bit, end_bit) with CUB; `keys` and `ids` then
// hold the sorted result.
template <class Key>
void sort_pairs(device_buffer<Key>& keys, device_buffer<int>& ids, int n, int begin_bit,
                int end_bit, cudaStream_t stream, DeviceMemoryResource& mr) {
  device_buffer<Key> keys_alt(n, stream, mr);
  device_buffer<int> ids_alt(n, stream, mr);
  cub::DoubleBuffer<Key> k(keys.data(), keys_alt.data());
  cub::DoubleBuffer<int> v(ids.data(), ids_alt.data());
  std::size_t temp_bytes = 0;
  cub_sort_pairs(nullptr, temp_bytes, k, v, n, begin_bit, end_bit, stream);
  device_buffer<unsigned char> temp(temp_bytes, stream, mr);
  cub_sort_pairs(temp.data(), temp_bytes, k, v, n, begin_bit, end_bit, stream);
  if (k.Current() != keys.data()) std::swap(keys, keys_alt);
  if (v.Current() != ids.data()) std::swap(ids, ids_alt);
}

__global__ void gather_kernel(const float* __restrict__ xyz, std::int64_t stride, int n,
                              const int* __restrict__ ids, float4* __restrict__ out) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= n) return;
  const int i = ids[j];
  const float* p = xyz + i * stride;
  out[j] = make_float4(p[0], p[1], p[2], __int_as_float(i));
}

// The one-kernel sort: a block of kSortThreads a tile of kSortThreads x kItems keys, one
// least-significant-digit pass a digit of kDigitBits, the blocks meeting at a grid barrier twice
// a pass (after counting, after placing).
constexpr int kSortThreads = 1024;
constexpr int kSortWarps = kSortThreads / 32;
constexpr int kDigitBits = 8;
constexpr int kBins = 1 << kDigitBits;
constexpr int kCountGroups = kSortThreads / kBins;  // threads that sum a digit's counts
static_assert(kSortThreads % kBins == 0, "whole groups of a thread a digit");
// The most blocks it takes; beyond, CUB's sort (a wave of an H200 holds 132).
constexpr int kMaxSortBlocks = 256;

struct CurveSortArgs {
  const float* xyz = nullptr;
  std::int64_t stride = 0;
  int n = 0;
  const float* bounds = nullptr;
  int low_bit = 0;
  std::uint64_t* keys[2] = {};  // pass p writes keys[(passes - 1 - p) % 2]: the last, keys[0]
  int* ids[2] = {};
  int* counts = nullptr;       // gridDim.x x kBins: each block's keys of each digit
  float4* gathered = nullptr;  // where given, the last pass writes the points here instead
  // The keys' bits below low_bit are kept (sort_by_curve) or, where only the points are
  // written, never computed.
};

__device__ __forceinline__ int digit_of(std::uint64_t key, int bit) {
  return static_cast<int>(key >> bit) & (kBins - 1);
}

// Each pass, ranked as CUB's onesweep ranks: a warp takes 32 x kItems consecutive keys of its
// block's tile, item j of lane l at j * 32 + l (loads coalesced), and ranks each among the
// earlier keys of its digit: those of its earlier items (the warp's running count of the digit)
// and of lower lanes in the same item (__match_any_sync). After the barrier, a key goes after the
// keys of smaller digits (all blocks), of its digit in the blocks and warps before it, and its
// rank: a stable pass over the whole.
template <int kItems>
__global__ void __launch_bounds__(kSortThreads)
    curve_sort_kernel(const __grid_constant__ CurveSortArgs a) {
  using BlockScan = cub::BlockScan<int, kSortThreads>;
  __shared__ typename BlockScan::TempStorage scan;
  __shared__ int warp_count[kSortWarps][kBins];  // then: the digit's keys in the warps before
  __shared__ int sums[2][kCountGroups][kBins];   // the digit's keys: all blocks, blocks before
  __shared__ int shift[kBins];                   // the block's first place for the digit
  const cooperative_groups::grid_group grid = cooperative_groups::this_grid();
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  const unsigned lower = (1u << lane) - 1;
  const int block = static_cast<int>(blockIdx.x), blocks = static_cast<int>(gridDim.x);
  const int chunk = (block * kSortWarps + warp) * 32 * kItems;
  const int passes = (64 - a.low_bit + kDigitBits - 1) / kDigitBits;
  for (int p = 0; p < passes; ++p) {
    const int bit = a.low_bit + p * kDigitBits;
    const int from = (passes - p) % 2, into = 1 - from;
    std::uint64_t key[kItems];
    int id[kItems], rank[kItems];
    for (int d = lane; d < kBins; d += 32) warp_count[warp][d] = 0;
    __syncwarp();
#pragma unroll
    for (int j = 0; j < kItems; ++j) {  // every load in flight before the first rank
      const int i = chunk + j * 32 + lane;
      key[j] = 0;
      id[j] = -1;
      if (i < a.n) {
        if (p == 0) {
          const float* q = a.xyz + i * a.stride;
          key[j] = curve_key(q[0], q[1], q[2], a.bounds, a.gathered ? a.low_bit : 0);
          id[j] = i;
        } else {
          key[j] = a.keys[from][i];
          id[j] = a.ids[from][i];
        }
      }
    }
#pragma unroll
    for (int j = 0; j < kItems; ++j) {
      const int d = id[j] >= 0 ? digit_of(key[j], bit) : -1;
      const unsigned peers = __match_any_sync(0xffffffffu, d);
      const int before = __popc(peers & lower);
      rank[j] = d >= 0 ? warp_count[warp][d] + before : 0;
      __syncwarp();
      if (d >= 0 && before == 0) warp_count[warp][d] += __popc(peers);
      __syncwarp();
    }
    __syncthreads();
    if (threadIdx.x < kBins) {  // the warps' counts of digit d, exclusive; the tile's
      const int d = static_cast<int>(threadIdx.x);
      int sum = 0;
      for (int w = 0; w < kSortWarps; ++w) {
        const int c = warp_count[w][d];
        warp_count[w][d] = sum;
        sum += c;
      }
      a.counts[block * kBins + d] = sum;
    }
    grid.sync();
    {  // a quarter of the blocks' counts of digit d a thread
      const int d = static_cast<int>(threadIdx.x) % kBins,
                g = static_cast<int>(threadIdx.x) / kBins;
      int total = 0, before = 0;
#pragma unroll 4
      for (int b = g; b < blocks; b += kCountGroups) {
        const int c = a.counts[b * kBins + d];
        total += c;
        before += b < block ? c : 0;
      }
      sums[0][g][d] = total;
      sums[1][g][d] = before;
    }
    __syncthreads();
    int total = 0, before = 0, digit_first = 0;
    if (threadIdx.x < kBins)
      for (int g = 0; g < kCountGroups; ++g) {
        total += sums[0][g][threadIdx.x];
        before += sums[1][g][threadIdx.x];
      }
    BlockScan(scan).ExclusiveSum(total, digit_first);
    if (threadIdx.x < kBins) shift[threadIdx.x] = digit_first + before;
    __syncthreads();
    const bool gather = a.gathered && p + 1 == passes;
#pragma unroll
    for (int j = 0; j < kItems; ++j) {
      if (id[j] < 0) continue;
      const int d = digit_of(key[j], bit), to = shift[d] + warp_count[warp][d] + rank[j];
      if (gather) {
        const float* q = a.xyz + id[j] * a.stride;
        a.gathered[to] = make_float4(q[0], q[1], q[2], __int_as_float(id[j]));
      } else {
        a.keys[into][to] = key[j];
        a.ids[into][to] = id[j];
      }
    }
    if (p + 1 < passes) grid.sync();
  }
}

using SortKernel = void (*)(CurveSortArgs);

SortKernel sort_kernel(int items) {
  return items == 1   ? curve_sort_kernel<1>
         : items == 2 ? curve_sort_kernel<2>
                      : curve_sort_kernel<4>;
}

// The blocks of curve_sort_kernel<items> that a cooperative launch can hold on `device`; 0 where
// the device cannot launch cooperatively. Asked once a device and kernel (it is on every frame's
// path).
int sort_blocks_resident(int items, int device) {
  static PerDevice known[3]{};  // [items / 2]: 1, 2 or 4 items
  return asked_once(known[items / 2], device, [&] {
    int cooperative = 0, sms = 0, per_sm = 0;
    PCNN_CUDA_TRY(cudaDeviceGetAttribute(&cooperative, cudaDevAttrCooperativeLaunch, device));
    PCNN_CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    PCNN_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, sort_kernel(items),
                                                                kSortThreads, 0));
    return cooperative != 0 ? per_sm * sms : 0;
  });
}

// The keys a thread of the one-kernel sort of n keys takes: the fewest whose blocks the device
// holds at once (more blocks, more of the device: the map frame's 100k queries, H200, were put in
// order in 0.045-0.048 ms by 98 blocks of one key a thread, 0.074 by 25 of four, 0.077-0.098 by
// CUB's sort; bench/results/2026-11-30-round32.md); 0 where none fits.
int sort_items(int n, int device) {
  for (int items = 1; items <= 4; items *= 2) {
    const int blocks = cuda::ceil_div(n, kSortThreads * items);
    if (blocks <= kMaxSortBlocks && blocks <= sort_blocks_resident(items, device)) return items;
  }
  return 0;
}

// The sorted keys and ids, or (`gathered`) the points in their order.
void sort_along_curve(const float* xyz, std::int64_t stride, int n, const float* bounds,
                      int low_bit, device_buffer<std::uint64_t>& keys, device_buffer<int>& ids,
                      float4* gathered, cudaStream_t stream, DeviceMemoryResource& mr) {
  keys.resize(n, stream, mr);
  ids.resize(n, stream, mr);
  if (n == 0) return;
  int device = 0;
  PCNN_CUDA_TRY(cudaGetDevice(&device));
  const auto cub_way = [&] {
    keys_kernel<<<cuda::ceil_div(n, kThreads), kThreads, 0, stream>>>(
        xyz, stride, n, bounds, gathered ? low_bit : 0, keys.data(), ids.data());
    PCNN_CHECK_LAUNCH();
    sort_pairs(keys, ids, n, low_bit, 64, stream, mr);
    if (gathered) gather_points(xyz, stride, n, ids.data(), gathered, stream);
  };
  const int items = sort_items(n, device);
  if (items == 0) {
    cub_way();
    return;
  }
  const int blocks = cuda::ceil_div(n, kSortThreads * items);
  device_buffer<std::uint64_t> keys_alt(n, stream, mr);
  device_buffer<int> ids_alt(n, stream, mr), counts(std::size_t(kBins) * blocks, stream, mr);
  CurveSortArgs a;
  a.xyz = xyz;
  a.stride = stride;
  a.n = n;
  a.bounds = bounds;
  a.low_bit = low_bit;
  a.keys[0] = keys.data();
  a.keys[1] = keys_alt.data();
  a.ids[0] = ids.data();
  a.ids[1] = ids_alt.data();
  a.counts = counts.data();
  a.gathered = gathered;
  void* args[] = {&a};
  const cudaError_t launched =
      cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(sort_kernel(items)), dim3(blocks),
                                  dim3(kSortThreads), args, 0, stream);
  if (launched == cudaErrorCooperativeLaunchTooLarge || launched == cudaErrorNotSupported) {
    // Fewer SMs than the device's for this stream (a green context, MPS): CUB's sort.
    static_cast<void>(cudaGetLastError());
    cub_way();
    return;
  }
  PCNN_CUDA_TRY(launched);
}

// 1 where sorted position i starts a bucket: its key's bits from low_bit up differ from the
// position before's.
struct BucketHead {
  const std::uint64_t* keys = nullptr;
  int low_bit = 0;
  __host__ __device__ int operator()(int i) const {
    return i == 0 || !same_bucket(keys[i], keys[i - 1], low_bit);
  }
};

using BucketHeads = thrust::transform_iterator<BucketHead, thrust::counting_iterator<int>>;

// With `temp` null, its scratch bytes.
void cub_bucket_ranks(void* temp, std::size_t& temp_bytes, const std::uint64_t* keys, int low_bit,
                      int* ranks, int n, cudaStream_t stream) {
  const BucketHeads heads(thrust::counting_iterator<int>(0), BucketHead{keys, low_bit});
  PCNN_CUDA_TRY(cub::DeviceScan::InclusiveSum(temp, temp_bytes, heads, ranks, n, stream));
}

// A refining sort's key of sorted position i: its bucket (rank: 1 the first) above the `bits`
// key bits under low_bit; `from`: the position, which the sort carries.
template <class Key>
__global__ void bucket_keys_kernel(const std::uint64_t* __restrict__ keys,
                                   const int* __restrict__ ranks, int n, int low_bit, int bits,
                                   Key* __restrict__ out, int* __restrict__ from) {
  const std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const std::uint64_t below = (keys[i] >> (low_bit - bits)) & ((std::uint64_t(1) << bits) - 1);
  out[i] = static_cast<Key>(static_cast<std::uint64_t>(ranks[i] - 1) << bits | below);
  from[i] = static_cast<int>(i);
}

__global__ void take_from_kernel(const int* __restrict__ from, int n,
                                 const std::uint64_t* __restrict__ keys,
                                 const int* __restrict__ ids, std::uint64_t* __restrict__ keys_out,
                                 int* __restrict__ ids_out) {
  const std::int64_t j = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= n) return;
  const int i = from[j];
  keys_out[j] = keys[i];
  ids_out[j] = ids[i];
}

// refine_by_curve's sort, on keys of Key's width. Its buffers live no longer than they must: 16
// bytes a point besides the keys and indices (24 with 64-bit keys), and CUB's scratch.
template <class Key>
void refine_with(device_buffer<std::uint64_t>& keys, device_buffer<int>& ids, int n, int low_bit,
                 int rank_bits, int bits, cudaStream_t stream, DeviceMemoryResource& mr) {
  device_buffer<int> from(n, stream, mr);
  {
    device_buffer<Key> bucket_keys(n, stream, mr);
    {
      device_buffer<int> ranks(n, stream, mr);
      std::size_t temp_bytes = 0;
      cub_bucket_ranks(nullptr, temp_bytes, keys.data(), low_bit, ranks.data(), n, stream);
      device_buffer<unsigned char> temp(temp_bytes, stream, mr);
      cub_bucket_ranks(temp.data(), temp_bytes, keys.data(), low_bit, ranks.data(), n, stream);
      bucket_keys_kernel<<<cuda::ceil_div(n, kThreads), kThreads, 0, stream>>>(
          keys.data(), ranks.data(), n, low_bit, bits, bucket_keys.data(), from.data());
      PCNN_CHECK_LAUNCH();
    }
    sort_pairs(bucket_keys, from, n, 0, rank_bits + bits, stream, mr);
  }
  device_buffer<std::uint64_t> keys_out(n, stream, mr);
  device_buffer<int> ids_out(n, stream, mr);
  take_from_kernel<<<cuda::ceil_div(n, kThreads), kThreads, 0, stream>>>(
      from.data(), n, keys.data(), ids.data(), keys_out.data(), ids_out.data());
  PCNN_CHECK_LAUNCH();
  std::swap(keys, keys_out);
  std::swap(ids, ids_out);
}

KernelsLoaded sort_kernels;  // by load_sort_kernels

}  // namespace

void gather_points(const float* xyz, std::int64_t stride, int n, const int* ids, float4* out,
                   cudaStream_t stream) {
  if (n == 0) return;
  gather_kernel<<<cuda::ceil_div(n, kThreads), kThreads, 0, stream>>>(xyz, stride, n, ids, out);
  PCNN_CHECK_LAUNCH();
}

void load_sort_kernels(int device) {
  if (!sort_kernels.first_load(device)) return;
  for (int items = 1; items <= 4; items *= 2)
    static_cast<void>(sort_blocks_resident(items, device));  // its occupancy query loads it
  cudaFuncAttributes attributes;
  PCNN_CUDA_TRY(cudaFuncGetAttributes(&attributes, keys_kernel));
  PCNN_CUDA_TRY(cudaFuncGetAttributes(&attributes, gather_kernel));
  PCNN_CUDA_TRY(cudaFuncGetAttributes(&attributes, bucket_keys_kernel<std::uint32_t>));
  PCNN_CUDA_TRY(cudaFuncGetAttributes(&attributes, bucket_keys_kernel<std::uint64_t>));
  PCNN_CUDA_TRY(cudaFuncGetAttributes(&attributes, take_from_kernel));
  // CUB's onesweep kernels load only by a launch on more keys than one of its tiles: a sort of
  // 20,000 zero keys on one digit, in stream-ordered memory of its own (none where the device
  // has no memory pools: they then load at the first sort that takes them).
  int pools = 0;
  PCNN_CUDA_TRY(cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, device));
  if (!pools) return;
  struct Scratch {  // the stream and memory, given back whatever happens
    cudaStream_t stream = nullptr;
    void* memory = nullptr;
    ~Scratch() {
      if (memory) PCNN_CUDA_TRY_NO_THROW(cudaFreeAsync(memory, stream));
      if (stream) {
        PCNN_CUDA_TRY_NO_THROW(cudaStreamSynchronize(stream));
        PCNN_CUDA_TRY_NO_THROW(cudaStreamDestroy(stream));
      }
    }
  } s;
  PCNN_CUDA_TRY(cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking));
  constexpr int kKeys = 20000;
  constexpr std::size_t kPairs = kKeys * (sizeof(std::uint64_t) + sizeof(int));
  cub::DoubleBuffer<std::uint64_t> keys(nullptr, nullptr);
  cub::DoubleBuffer<int> ids(nullptr, nullptr);
  cub::DoubleBuffer<std::uint32_t> keys32(nullptr, nullptr);
  std::size_t temp_bytes = 0, temp32_bytes = 0, scan_bytes = 0;
  cub_sort_pairs(nullptr, temp_bytes, keys, ids, kKeys, 64 - kDigitBits, 64, s.stream);
  cub_sort_pairs(nullptr, temp32_bytes, keys32, ids, kKeys, 0, kDigitBits, s.stream);
  cub_bucket_ranks(nullptr, scan_bytes, nullptr, 0, nullptr, kKeys, s.stream);
  const std::size_t temp_most = std::max({temp_bytes, temp32_bytes, scan_bytes});
  PCNN_CUDA_TRY(cudaMallocAsync(&s.memory, 2 * kPairs + temp_most, s.stream));
  auto* bytes = static_cast<unsigned char*>(s.memory);
  PCNN_CUDA_TRY(cudaMemsetAsync(bytes, 0, 2 * kPairs, s.stream));
  auto* k = reinterpret_cast<std::uint64_t*>(bytes);
  auto* v = reinterpret_cast<int*>(bytes + 2 * kKeys * sizeof(std::uint64_t));
  keys = cub::DoubleBuffer<std::uint64_t>(k, k + kKeys);
  ids = cub::DoubleBuffer<int>(v, v + kKeys);
  cub_sort_pairs(bytes + 2 * kPairs, temp_bytes, keys, ids, kKeys, 64 - kDigitBits, 64, s.stream);
  // refine_by_curve's scan and sorts of 32-bit keys (of 64-bit ones: the sort above).
  PCNN_CUDA_TRY(cudaMemsetAsync(bytes, 0, 2 * kPairs, s.stream));
  auto* k32 = reinterpret_cast<std::uint32_t*>(bytes);
  keys32 = cub::DoubleBuffer<std::uint32_t>(k32, k32 + kKeys);
  ids = cub::DoubleBuffer<int>(v, v + kKeys);
  cub_sort_pairs(bytes + 2 * kPairs, temp32_bytes, keys32, ids, kKeys, 0, kDigitBits, s.stream);
  cub_bucket_ranks(bytes + 2 * kPairs, scan_bytes, k, 0, v, kKeys, s.stream);
}

int refine_by_curve(device_buffer<std::uint64_t>& keys, device_buffer<int>& ids, int n, int low_bit,
                    int buckets, cudaStream_t stream, DeviceMemoryResource& mr) {
  if (n == 0 || low_bit <= 0) return 0;
  int rank_bits = 1;  // ranks 0 .. buckets - 1
  while (rank_bits < 31 && (std::int64_t(1) << rank_bits) < buckets) ++rank_bits;
  // 32-bit keys where they keep a level or more below the buckets: half the bytes a radix pass
  // of 64-bit ones moves, and fewer passes.
  if (rank_bits + std::min(low_bit, 8) <= 32) {
    const int bits = std::min(low_bit, 32 - rank_bits);
    refine_with<std::uint32_t>(keys, ids, n, low_bit, rank_bits, bits, stream, mr);
    return low_bit - bits;
  }
  const int bits = std::min(low_bit, 64 - rank_bits);
  refine_with<std::uint64_t>(keys, ids, n, low_bit, rank_bits, bits, stream, mr);
  return low_bit - bits;
}

void forget_sort_kernels(int device) { sort_kernels.forget(device); }

void sort_by_curve(const float* xyz, std::int64_t stride, int n, const float* bounds, int low_bit,
                   device_buffer<std::uint64_t>& keys, device_buffer<int>& ids, cudaStream_t stream,
                   DeviceMemoryResource& mr) {
  sort_along_curve(xyz, stride, n, bounds, low_bit, keys, ids, nullptr, stream, mr);
}

void points_by_curve(const float* xyz, std::int64_t stride, int n, const float* bounds, int low_bit,
                     float4* out, cudaStream_t stream, DeviceMemoryResource& mr) {
  device_buffer<std::uint64_t> keys;
  device_buffer<int> ids;
  sort_along_curve(xyz, stride, n, bounds, low_bit, keys, ids, out, stream, mr);
}

}  // namespace pcnn::detail
