// The spatial index: points sorted along a Hilbert curve (curve_key.cuh), cut into cells of 32
// consecutive points, with a 32-ary hierarchy of bounding boxes over the cells.
//
// Cells hold a fixed number of points rather than covering a fixed volume, so they shrink where
// the cloud is dense and grow where it is sparse: a LiDAR scan's near field and far field get
// cells of the same population, and a far outlier adds one large cell instead of blowing up a
// uniform grid (whose memory grows with the bounding volume).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "device_buffer.cuh"

namespace pcnn::detail {

inline constexpr int kCell = 32;      // points per cell: one per lane of a warp
inline constexpr int kFanout = 32;    // children per box node: one per lane
inline constexpr int kMaxLevels = 8;  // enough for 2^31 points (6 levels) with room to spare

/// What the kernels need, by value.
struct TreeView {
  const float4* points = nullptr;       // sorted; w = original index (int bits); finite ones first
  const std::uint64_t* keys = nullptr;  // sorted curve keys, bits below key_low_bit cleared
                                        // (finite points first)
  const float* bounds = nullptr;        // lo xyz, hi xyz of the finite points (device)
  const float4* box_lo = nullptr;       // all levels, level 0 (cells) first
  const float4* box_hi = nullptr;
  int n = 0;            // finite points
  int key_low_bit = 0;  // the keys' lowest kept bit
  int levels = 0;       // 0 when n == 0
  int level_count[kMaxLevels] = {};
  int level_offset[kMaxLevels] = {};
};

/// Owns the index's device memory. Move-only (through its buffers).
struct SpatialIndex {
  int n_total = 0;      // points including non-finite ones (sorted after the finite ones)
  int n = 0;            // finite points
  int key_low_bit = 0;  // keys sorted on bits [key_low_bit, 64), the bits below cleared
  device_buffer<float4> points;
  device_buffer<std::uint64_t> keys;
  device_buffer<float> bounds;  // 6 floats
  device_buffer<float4> box_lo, box_hi;
  std::vector<int> level_count, level_offset;

  TreeView view() const;
};

/// Builds the index over `n_total` points already on the device (`stride` floats apart), on
/// `stream`. Synchronizes once, to learn how many points are finite (which sizes the hierarchy)
/// and whether the keys need every bit.
SpatialIndex build_spatial_index(const float* xyz, std::int64_t stride, int n_total,
                                 cudaStream_t stream, DeviceMemoryResource& mr);

/// Sorts a separate query set (on the device) along the index's curve (same bounds,
/// clamped), so that a warp's queries are neighbors. Returns the sorted queries (w = original
/// index, non-finite ones last).
device_buffer<float4> sort_queries(const SpatialIndex& index, const float* xyz, std::int64_t stride,
                                   int nq, cudaStream_t stream, DeviceMemoryResource& mr);

}  // namespace pcnn::detail
