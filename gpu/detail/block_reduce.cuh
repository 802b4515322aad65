// One reduction building block: per-thread accumulation over a grid-stride loop, then warp
// shuffles, then the block through shared memory, one partial per block; a second launch of one
// block combines the partials in a fixed order. No atomics, and the same grid for the same n, so
// results are the same run to run.
#pragma once

#include <cuda_runtime.h>

#include <cuda/cmath>

#include <cstdint>

namespace pcnn::detail {

inline constexpr int kReduceThreads = 256;
inline constexpr int kReduceMaxBlocks = 1024;

/// Acc must provide: static identity(), add(const Acc&), shfl_down(int offset) (a copy of the
/// value `offset` lanes down the warp), and Load must provide `Acc operator()(std::int64_t i)`.
template <class Acc>
__device__ __forceinline__ Acc block_reduce(Acc acc) {
  __shared__ Acc warp_acc[kReduceThreads / 32];
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) acc.add(acc.shfl_down(offset));
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  if (lane == 0) warp_acc[warp] = acc;
  __syncthreads();
  if (warp == 0) {
    acc = lane < kReduceThreads / 32 ? warp_acc[lane] : Acc::identity();
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) acc.add(acc.shfl_down(offset));
  }
  return acc;  // valid in thread 0
}

template <class Acc, class Load>
__global__ void __launch_bounds__(kReduceThreads)
    reduce_partials_kernel(Load load, std::int64_t n, Acc* __restrict__ partials) {
  // Two items per iteration, both loaded before either is added: twice the bytes in flight per
  // thread (a memory-bound loop needs ~20 KB in flight per SM to cover DRAM latency).
  Acc acc = Acc::identity();
  const std::int64_t stride = std::int64_t(gridDim.x) * kReduceThreads;
  for (std::int64_t i = blockIdx.x * std::int64_t(kReduceThreads) + threadIdx.x; i < n;
       i += 2 * stride) {
    const Acc a = load(i);
    if (i + stride < n) acc.add(load(i + stride));
    acc.add(a);
  }
  acc = block_reduce(acc);
  if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

template <class Acc>
__global__ void __launch_bounds__(kReduceThreads)
    reduce_final_kernel(const Acc* __restrict__ partials, int count, Acc* __restrict__ out) {
  Acc acc = Acc::identity();
  for (int i = threadIdx.x; i < count; i += kReduceThreads) acc.add(partials[i]);
  acc = block_reduce(acc);
  if (threadIdx.x == 0) *out = acc;
}

/// Blocks for n items: enough to fill the device, at most kReduceMaxBlocks, fixed for a given n.
inline int reduce_blocks(std::int64_t n) {
  const std::int64_t b = cuda::ceil_div(n, kReduceThreads * 4);
  return static_cast<int>(b < 1 ? 1 : (b > kReduceMaxBlocks ? kReduceMaxBlocks : b));
}

}  // namespace pcnn::detail
