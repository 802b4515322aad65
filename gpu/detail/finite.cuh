// Whether a point takes part in a search at all.
#pragma once

#include <cuda_runtime.h>

namespace pcnn::detail {

__host__ __device__ __forceinline__ bool finite3(float x, float y, float z) {
  return isfinite(x) && isfinite(y) && isfinite(z);
}

}  // namespace pcnn::detail
