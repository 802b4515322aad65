// Copying host points (any stride) to the device as they are.
#pragma once

#include <cuda_runtime.h>

#include "cuda_try.cuh"
#include "device_buffer.cuh"
#include "pcnn/points.hpp"

namespace pcnn::detail {

/// 4-byte words spanned by `count` points `stride` coordinates apart (the last point needs only
/// xyz): floats, or halves of doubles.
inline std::size_t span_words(const PointsView& v) {
  const std::size_t coords =
      v.count == 0 ? 0 : static_cast<std::size_t>(v.count - 1) * v.stride + 3;
  return coords * static_cast<std::size_t>(v.scalar_bytes() / 4);
}

/// `v` with its coordinates at `p` in device memory (the same type, count and stride).
inline PointsView moved_to_device(const PointsView& v, const void* p) {
  return v.is_double() ? device_points(static_cast<const double*>(p), v.count, v.stride)
                       : device_points(static_cast<const float*>(p), v.count, v.stride);
}

/// Asynchronous copy of the points' span into `dst` (resized to fit), float32 or float64.
inline PointsView upload_points(const PointsView& v, device_buffer<float>& dst, cudaStream_t stream,
                                DeviceMemoryResource& mr) {
  dst.resize(span_words(v), stream, mr);
  if (dst.size() > 0)
    PCNN_CUDA_TRY(
        cudaMemcpyAsync(dst.data(), v.address(), dst.bytes(), cudaMemcpyHostToDevice, stream));
  return moved_to_device(v, dst.data());
}

}  // namespace pcnn::detail
