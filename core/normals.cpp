// pcnn::estimate_normals: the parameters and outputs checked once, then the index's backend
// (gpu/cuda_backend.cu → gpu/normals.cu, or cpu/cpu_backend.cpp; the math of both is
// core/normal_math.hpp).
#include <chrono>
#include <cmath>
#include <string>

#include "backend.hpp"
#include "number_text.hpp"
#include "pcnn/error.hpp"
#include "pcnn/normals.hpp"

namespace pcnn {

void validate(const NormalParams& p) {
  const std::string range = "3 and " + std::to_string(kMaxK);
  PCNN_EXPECTS(p.k != 0 || p.radius != 0,
               "normals: give a neighborhood: k (the k nearest points) or a radius");
  PCNN_EXPECTS(p.k == 0 || p.radius == 0,
               "normals: give either k or a radius, not both (k = " + std::to_string(p.k) +
                   ", radius = " + detail::number_text(p.radius) + ")");
  if (p.k != 0) {
    PCNN_EXPECTS(p.k >= 3 && p.k <= kMaxK, "normals: k must be between " + range + ", got " +
                                               std::to_string(p.k) + " (a plane needs 3 points)");
    PCNN_EXPECTS(p.max_nn == 0, "normals: max_nn goes with a radius, not with k");
  } else {
    PCNN_EXPECTS(
        std::isfinite(p.radius) && p.radius > 0,
        "normals: the radius must be a finite number > 0, got " + detail::number_text(p.radius));
    PCNN_EXPECTS(p.max_nn == 0 || (p.max_nn >= 3 && p.max_nn <= kMaxK),
                 "normals: max_nn must be 0 (every neighbor within the radius) or between " +
                     range + ", got " + std::to_string(p.max_nn));
  }
  for (double v : p.viewpoint)
    PCNN_EXPECTS(std::isfinite(v), "normals: the viewpoint must be finite");
}

NormalTimings estimate_normals(Index& index, const NormalParams& params, MatrixView<float> normals,
                               ArrayView<float> curvature, cudaStream_t stream) {
  validate(params);
  Index::Backend_& backend = detail::IndexAccess::backend(index);
  const std::int64_t n = backend.size();
  PCNN_EXPECTS(normals.rows == n && normals.cols == 3,
               "normals: the output is " + std::to_string(normals.rows) + " x " +
                   std::to_string(normals.cols) + ", the index holds " + std::to_string(n) +
                   " points (n x 3)");
  PCNN_EXPECTS(curvature.size == n, "normals: the curvature output holds " +
                                        std::to_string(curvature.size) + " entries, the index " +
                                        std::to_string(n) + " points");
  PCNN_EXPECTS(n == 0 || (normals.data != nullptr && curvature.data != nullptr),
               "normals: null output");
  PCNN_EXPECTS(normals.memory == curvature.memory,
               "normals: the normals and the curvature must both be in host memory or both in "
               "device memory");
  if (backend.kind() == Backend::cpu)
    PCNN_EXPECTS(normals.memory == Memory::host,
                 "the CPU backend writes host memory only: an output is in device memory");
  const auto t0 = std::chrono::steady_clock::now();
  NormalTimings t;
  t.backend = backend.kind();
  backend.normals(params, normals, curvature, stream, detail::IndexAccess::timings(index), t);
  t.total_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return t;
}

NormalsResult estimate_normals(Index& index, const NormalParams& params, cudaStream_t stream) {
  validate(params);
  NormalsResult r;
  r.rows = index.size();
  r.normals.resize(static_cast<std::size_t>(r.rows) * 3);
  r.curvature.resize(static_cast<std::size_t>(r.rows));
  r.timings = estimate_normals(index, params, {r.normals.data(), r.rows, 3},
                               {r.curvature.data(), r.rows}, stream);
  return r;
}

}  // namespace pcnn
