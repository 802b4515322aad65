// The spatial index: points sorted along a Hilbert curve (curve_key.cuh), cut into cells of 32
// consecutive points, with a 32-ary hierarchy of bounding boxes over the cells.
//
// Cells hold a fixed number of points rather than covering a fixed volume, so they shrink where
// the cloud is dense and grow where it is sparse: a LiDAR scan's near field and far field get
// cells of the same population, and a far outlier adds one large cell instead of blowing up a
// uniform grid (whose memory grows with the bounding volume).
//
// Repeats: points stored with identical coordinates are at the same exact distance from every
// query, so a row takes them by index, smallest first. Of a run of more than kMaxK + 1 of them
// (consecutive in the curve's order, where the stable sort leaves them by index), a kNN or hybrid
// row can only ever hold the first kMaxK + 1: any later one has kMaxK + 1 copies before it, at
// least kMaxK of which are not the query itself. The build moves those later ones, the
// "shadows", behind the other finite points, and gives the kNN searches a hierarchy without
// them: a scan that stores its no-returns at the origin (72k of 1M points) had every one of them
// scan all the others (0.47 -> 102 ms, H100). Radius searches, which return every copy, walk the
// whole hierarchy.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "device_buffer.cuh"
#include "exact.cuh"

namespace pcnn::detail {

inline constexpr int kCell = 32;      // points per cell: one per lane of a warp
inline constexpr int kFanout = 32;    // children per box node: one per lane
inline constexpr int kMaxLevels = 8;  // enough for 2^31 points (6 levels) with room to spare
/// The longest run of one curve key that a build calls short (SpatialIndex::short_key_runs).
inline constexpr int kShortKeyRun = 64;

/// What the kernels need, by value. Kernels take it as `const __grid_constant__ TreeView`: the
/// walks index level_count and level_offset at run time and hold a reference to the view, and
/// an ordinary parameter was then copied to every thread's local memory at the kernel's start
/// (120 bytes of stores a thread, and local loads at every node). Read in place from the
/// parameter space instead, 1M points searched 3-6 % faster at k = 1 and in radius searches
/// (H200, bench/results/2026-11-29-round29.md).
struct TreeView {
  const float4* points = nullptr;       // sorted; w = original index (int bits); finite ones first
  const std::uint64_t* keys = nullptr;  // curve keys (every bit), sorted on their bits from
                                        // key_low_bit up over the kNN hierarchy's points
                                        // (shadows after them): "a key" is those bits
  const float* bounds = nullptr;        // lo xyz, hi xyz of the finite points (device)
  const float4* box_lo = nullptr;       // all levels, level 0 (cells) first
  const float4* box_hi = nullptr;
  int n = 0;                         // finite points
  int key_low_bit = 0;               // the keys' lowest sorted bit
  int levels = 0;                    // 0 when n == 0
  int level_count[kMaxLevels] = {};  // cells of n points, and the boxes above
  int level_offset[kMaxLevels] = {};
  bool short_key_runs = false;  // no key is shared by more than kShortKeyRun points
};

/// Owns the index's device memory. Move-only (through its buffers).
struct SpatialIndex {
  int n_total = 0;      // points including non-finite ones (sorted after the finite ones)
  int n = 0;            // finite points
  int n_knn = 0;        // finite points a kNN row may hold: n less the shadows (sorted after)
  int key_low_bit = 0;  // keys sorted on bits [key_low_bit, 64) over [0, n_knn), the bits
                        // below kept (in the order the sort left them)
  // No key is shared by more than kShortKeyRun points (checked on the final order's keys, which
  // setting shadows aside only splits): then there are no shadows either.
  bool short_key_runs = false;
  device_buffer<float4> points;
  device_buffer<std::uint64_t> keys;
  device_buffer<float> bounds;  // 6 floats
  float host_bounds[6] = {};    // the same, read at the build's round trip (lo > hi: none)
  device_buffer<float4> box_lo, box_hi;
  std::vector<int> level_count, level_offset;
  // The hierarchy over the first n_knn points; empty when there are no shadows.
  device_buffer<float4> knn_box_lo, knn_box_hi;
  std::vector<int> knn_level_count, knn_level_offset;

  TreeView view() const;      // every finite point: radius searches
  TreeView knn_view() const;  // the first n_knn: kNN and hybrid searches
};

/// Builds the index over `n_total` points already on the device (`stride` floats apart), on
/// `stream`; `exact` are the same points as stored (what tells repeats apart). Synchronizes
/// once, to learn how many points are finite (which sizes the hierarchy) and whether the keys
/// need more bits, once after each sort on more bits, and once more where a run of repeats may
/// hold shadows.
SpatialIndex build_spatial_index(const float* xyz, std::int64_t stride, int n_total,
                                 const ExactCoords& exact, cudaStream_t stream,
                                 DeviceMemoryResource& mr);

/// Sorts a separate query set (on the device) along the index's curve (same bounds,
/// clamped), so that a warp's queries are neighbors. Returns the sorted queries (w = original
/// index, non-finite ones last).
device_buffer<float4> sort_queries(const SpatialIndex& index, const float* xyz, std::int64_t stride,
                                   int nq, cudaStream_t stream, DeviceMemoryResource& mr);

}  // namespace pcnn::detail
