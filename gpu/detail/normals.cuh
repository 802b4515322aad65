// Normals from neighbor lists already on the device (gpu/normals.cu); the math is
// core/normal_math.hpp, shared with the CPU backend.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "pcnn/points.hpp"

namespace pcnn::detail {

/// Neighbor lists of `rows` consecutive indexed points, on the device: dense rows of `k`
/// entries padded with -1 (offsets null), or CSR (`offsets[0 .. rows]`, entries from
/// idx[offsets[r] - offsets[0]]: a slice of a larger CSR result).
struct NeighborRows {
  const std::int32_t* idx = nullptr;
  const std::int64_t* offsets = nullptr;
  int k = 0;
  std::int64_t rows = 0;
};

/// Normals and curvature of indexed points first_row .. first_row + rows.rows - 1 into
/// normals[3 * i ..] and curvature[i] (i from 0, device memory), with the coordinates read from
/// `points` (the indexed points as stored, original order, device-accessible). Queued on
/// `stream`; launch errors are thrown (pcnn::cuda_error).
void launch_normals(PointsView points, std::int64_t first_row, const NeighborRows& rows,
                    const double viewpoint[3], float* normals, float* curvature,
                    cudaStream_t stream);

}  // namespace pcnn::detail
