// Warp-level reductions with shuffles: every lane ends with the result.
#pragma once

#include <cuda_runtime.h>

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

__device__ __forceinline__ float warp_min(float v) { return warp_all_reduce(v, MinOp{}); }
__device__ __forceinline__ float warp_max(float v) { return warp_all_reduce(v, MaxOp{}); }
__device__ __forceinline__ int warp_sum(int v) { return warp_all_reduce(v, SumOp{}); }

/// Order-preserving map of float to int, so that atomicMin/atomicMax on ints order floats.
__device__ __forceinline__ int float_to_ordered(float f) {
  const int i = __float_as_int(f);
  return i >= 0 ? i : i ^ 0x7fffffff;
}
__device__ __forceinline__ float ordered_to_float(int i) {
  return __int_as_float(i >= 0 ? i : i ^ 0x7fffffff);
}

}  // namespace pcnn::detail
