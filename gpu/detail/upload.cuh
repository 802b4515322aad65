// Copying host points (any stride) to the device as they are.
#pragma once

#include <cuda_runtime.h>

#include "cuda_try.cuh"
#include "device_buffer.cuh"
#include "pcnn/points.hpp"

namespace pcnn::detail {

/// Floats spanned by `count` points `stride` floats apart (the last point needs only xyz).
inline std::size_t span_floats(const PointsView& v) {
  return v.count == 0 ? 0 : static_cast<std::size_t>(v.count - 1) * v.stride + 3;
}

/// Asynchronous copy of the points' span into `dst` (resized to fit).
inline void upload_points(const PointsView& v, device_buffer<float>& dst, cudaStream_t stream,
                          DeviceMemoryResource& mr) {
  dst.resize(span_floats(v), stream, mr);
  if (dst.size() > 0)
    PCNN_CUDA_TRY(cudaMemcpyAsync(dst.data(), v.data, dst.bytes(), cudaMemcpyHostToDevice, stream));
}

}  // namespace pcnn::detail
