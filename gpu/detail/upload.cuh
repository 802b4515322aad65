// Copying host points (any stride) to the device as they are.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>

#include "core/parallel_copy.hpp"
#include "cuda_try.cuh"
#include "device_buffer.cuh"
#include "pcnn/points.hpp"

namespace pcnn::detail {

/// 4-byte words spanned by `count` points `stride` coordinates apart (the last point needs only
/// xyz): floats, or halves of doubles.
inline std::size_t span_words(const PointsView& v) {
  return static_cast<std::size_t>(v.span_bytes()) / 4;
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

/// Bytes of each of the two page-locked chunks that large pageable uploads go through.
inline constexpr std::size_t kUploadChunkBytes = std::size_t{32} << 20;

/// Copies `bytes` of pageable host memory at `from` to device memory at `to` on `stream`, through
/// two page-locked chunks of kUploadChunkBytes at `chunks`: up to eight host threads fill one
/// while the copy engine takes the other to the device (one thread copies ~10 GB/s, eight
/// ~24-29 GB/s, the link ~55 GB/s: bench/results/2026-11-27-round12.md). The chunks must be free
/// when it is called; `sent[c]` then marks the last copy out of chunk c, which a refill waits
/// for. Returns once every copy is queued: the last two may still be running.
inline void upload_through_chunks(void* to, const void* from, std::size_t bytes, char* chunks,
                                  cuda_event (&sent)[2], cudaStream_t stream) {
  const auto* src = static_cast<const char*>(from);
  for (std::size_t at = 0, c = 0; at < bytes; at += kUploadChunkBytes, ++c) {
    const std::size_t n = std::min(kUploadChunkBytes, bytes - at);
    char* slot = chunks + (c % 2) * kUploadChunkBytes;
    if (c >= 2) PCNN_CUDA_TRY(cudaEventSynchronize(sent[c % 2].get()));
    parallel_copy({{slot, src + at, n}}, 8);
    PCNN_CUDA_TRY(
        cudaMemcpyAsync(static_cast<char*>(to) + at, slot, n, cudaMemcpyHostToDevice, stream));
    sent[c % 2].record(stream);
  }
}

}  // namespace pcnn::detail
