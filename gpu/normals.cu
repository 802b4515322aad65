// The normals kernel: one thread per point, its neighbor list from the index's search (on the
// device), core/normal_math.hpp for the covariance and the eigenvector.
//
// Compiled with --fmad=false (CMakeLists.txt): no fused multiply-add, so that every operation
// rounds as on the CPU backend and the two give the same bits.
#include <cuda/cmath>

#include "core/normal_math.hpp"
#include "detail/cuda_try.cuh"
#include "detail/normals.cuh"

namespace pcnn::detail {
namespace {

// The indexed points as given (float32 or float64), by original index.
struct DeviceCoords {
  const float* xyz;
  const double* xyz64;
  std::int64_t stride;
  __device__ __forceinline__ void operator()(std::int32_t id, double c[3]) const {
    if (xyz64) {
      const double* p = xyz64 + id * stride;
      c[0] = p[0];
      c[1] = p[1];
      c[2] = p[2];
      return;
    }
    const float* p = xyz + id * stride;
    c[0] = p[0];
    c[1] = p[1];
    c[2] = p[2];
  }
};

__global__ void normals_kernel(DeviceCoords at, std::int64_t first_row, NeighborRows nb,
                               double3 viewpoint, float* __restrict__ normals,
                               float* __restrict__ curvature) {
  const std::int64_t r = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x;
  if (r >= nb.rows) return;
  const std::int32_t* ids;
  std::int64_t count;
  if (nb.offsets) {
    ids = nb.idx + (nb.offsets[r] - nb.offsets[0]);
    count = nb.offsets[r + 1] - nb.offsets[r];
  } else {
    ids = nb.idx + r * nb.k;
    count = nb.k;
  }
  double self[3];
  at(static_cast<std::int32_t>(first_row + r), self);
  const double vp[3] = {viewpoint.x, viewpoint.y, viewpoint.z};
  float out[4];
  point_normal(at, ids, count, self, vp, out);
  normals[3 * r] = out[0];
  normals[3 * r + 1] = out[1];
  normals[3 * r + 2] = out[2];
  curvature[r] = out[3];
}

}  // namespace

void launch_normals(PointsView points, std::int64_t first_row, const NeighborRows& rows,
                    const double viewpoint[3], float* normals, float* curvature,
                    cudaStream_t stream) {
  if (rows.rows == 0) return;
  constexpr int kThreads = 128;
  const auto blocks = static_cast<unsigned>(cuda::ceil_div(rows.rows, kThreads));
  normals_kernel<<<blocks, kThreads, 0, stream>>>(
      DeviceCoords{points.data, points.data64, points.stride}, first_row, rows,
      make_double3(viewpoint[0], viewpoint[1], viewpoint[2]), normals, curvature);
  PCNN_CHECK_LAUNCH();
}

}  // namespace pcnn::detail
