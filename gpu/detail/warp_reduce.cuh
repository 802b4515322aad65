// Warp-level reductions with shuffles: every lane ends with the result.
#pragma once

#include <cuda_runtime.h>
#include <cuda/std/bit>

namespace pcnn::detail {

inline constexpr unsigned kFullMask = 0xffffffffu;

template <class T, class Op>
__device__ __forceinline__ T warp_all_reduce(T v, Op op) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v = op(v, __shfl_xor_sync(kFullMask, v, offset));
  return v;
}

struct MinOp {
  template <class T>
  __device__ __forceinline__ T operator()(T a, T b) const {
    return a < b ? a : b;
  }
};
struct MaxOp {
  template <class T>
  __device__ __forceinline__ T operator()(T a, T b) const {
    return a > b ? a : b;
  }
};
struct SumOp {
  template <class T>
  __device__ __forceinline__ T operator()(T a, T b) const {
    return a + b;
  }
};
struct OrOp {
  template <class T>
  __device__ __forceinline__ T operator()(T a, T b) const {
    return a | b;
  }
};

__device__ __forceinline__ float warp_min(float v) { return warp_all_reduce(v, MinOp{}); }
__device__ __forceinline__ float warp_max(float v) { return warp_all_reduce(v, MaxOp{}); }
__device__ __forceinline__ int warp_sum(int v) { return warp_all_reduce(v, SumOp{}); }

/// The block's reduction of one value a thread, valid in thread 0 (`identity`: op's), for a
/// kernel that then makes one atomic a block: one a warp, to a handful of addresses, took 16-19 us
/// for 100k points (391 blocks of 8 warps, H100), the atomics waiting on each other. Every thread
/// of the block calls it; blockDim.x is a multiple of 32. Its barriers also order the block's
/// shared-memory writes before the call against its reads after it (last_slot_kernel relies on
/// that).
template <class T, class Op>
__device__ __forceinline__ T block_combine(T v, Op op, T identity) {
  __shared__ T per_warp[32];
  v = warp_all_reduce(v, op);
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  __syncthreads();  // the previous call's reads are done
  if (lane == 0) per_warp[warp] = v;
  __syncthreads();
  if (warp == 0) v = warp_all_reduce(lane < int(blockDim.x / 32) ? per_warp[lane] : identity, op);
  return v;
}

/// Order-preserving map of float to int, so that atomicMin/atomicMax on ints order floats.
__device__ __forceinline__ int float_to_ordered(float f) {
  const int i = __float_as_int(f);
  return i >= 0 ? i : i ^ 0x7fffffff;
}
/// Its inverse, on either side (the host reads the build's bounds in this form).
__host__ __device__ __forceinline__ float ordered_to_float(int i) {
  return cuda::std::bit_cast<float>(i >= 0 ? i : i ^ 0x7fffffff);
}

}  // namespace pcnn::detail
