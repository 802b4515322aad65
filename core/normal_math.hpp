// The math of normal estimation, written once for both backends: the CPU backend
// (cpu/cpu_backend.cpp) and the CUDA kernel (gpu/normals.cu) include this header, so the two
// cannot drift. Internal: never included by a public header.
//
// Per point, from its neighbor list (sorted by (squared distance, index), the point itself
// included, as PCL's NormalEstimation searches):
//   1. the mean of the neighbors, then their covariance about that mean (divided by the count),
//      in double, from the coordinates as stored (float) — two passes, so no cancellation;
//   2. the eigenvector of the smallest eigenvalue, by cyclic Jacobi rotations in double;
//   3. curvature = |λ0| / (λ0 + λ1 + λ2) with the sum taken as the covariance's trace (PCL's
//      formula), and the normal turned so that dot(n, viewpoint - p) >= 0.
//
// Bit-identical on both backends: only +, -, *, / and sqrt (correctly rounded in IEEE double on
// the host and on the device), in the same order, with no fused multiply-add (the CPU file is
// compiled with -ffp-contract=off, the CUDA file with --fmad=false). Jacobi rather than the
// closed form (acos/cos) for that reason: the device's and the C library's cos differ in the
// last bits.
#pragma once

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <limits>

#if defined(__CUDACC__)
#define PCNN_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define PCNN_HOST_DEVICE inline
#endif

namespace pcnn::detail {

// ::sqrt and ::fabs are the C library's on the host and CUDA's on the device (both correctly
// rounded / exact); no std::isfinite, which the device does not have under that name everywhere.
PCNN_HOST_DEVICE bool finite_value(double x) { return ::fabs(x) <= DBL_MAX; }

/// Neighbors a normal needs; fewer give NaN (PCL's computePointNormal does the same).
constexpr int kMinNormalNeighbors = 3;

/// A symmetric 3 × 3 matrix, its eigenvectors accumulated in `v` (columns).
struct Jacobi3 {
  double a[3][3];
  double v[3][3];
};

/// One Jacobi rotation zeroing a[p][q] (p < q), the others updated (the formulation of
/// Numerical Recipes §11.1, with tau = s / (1 + c) for stable updates).
PCNN_HOST_DEVICE void jacobi_rotate(Jacobi3& m, int p, int q) {
  const double apq = m.a[p][q];
  if (apq == 0.0) return;
  const double theta = (m.a[q][q] - m.a[p][p]) / (2.0 * apq);
  // The smaller root of t² + 2 t theta - 1 = 0; for a huge theta, 1 / (2 theta) (no overflow:
  // the matrix is scaled to entries of at most 1, but theta can still be large).
  double t;
  if (::fabs(theta) > 1e100) {
    t = 1.0 / (2.0 * theta);
  } else {
    t = 1.0 / (::fabs(theta) + ::sqrt(theta * theta + 1.0));
    if (theta < 0.0) t = -t;
  }
  const double c = 1.0 / ::sqrt(t * t + 1.0), s = t * c, tau = s / (1.0 + c);
  m.a[p][p] = m.a[p][p] - t * apq;
  m.a[q][q] = m.a[q][q] + t * apq;
  m.a[p][q] = m.a[q][p] = 0.0;
  const int r = 3 - p - q;  // the third index
  const double arp = m.a[r][p], arq = m.a[r][q];
  m.a[r][p] = m.a[p][r] = arp - s * (arq + tau * arp);
  m.a[r][q] = m.a[q][r] = arq + s * (arp - tau * arq);
  for (int i = 0; i < 3; ++i) {
    const double vip = m.v[i][p], viq = m.v[i][q];
    m.v[i][p] = vip - s * (viq + tau * vip);
    m.v[i][q] = viq + s * (vip - tau * viq);
  }
}

/// The smallest eigenvalue of the symmetric matrix (xx, xy, xz, yy, yz, zz) and a unit
/// eigenvector of it. The matrix must not be zero. Cyclic Jacobi converges quadratically: the
/// off-diagonal falls below 2^-104 of the matrix within a few sweeps (the cap of 32 is never
/// reached in practice; it only bounds the loop).
PCNN_HOST_DEVICE void smallest_eigenpair(double xx, double xy, double xz, double yy, double yz,
                                         double zz, double& value, double vec[3]) {
  // Scaled to entries of at most 1: the rotations' squares neither overflow nor underflow.
  double scale = ::fabs(xx);
  const double others[5] = {xy, xz, yy, yz, zz};
  for (double o : others) scale = ::fabs(o) > scale ? ::fabs(o) : scale;
  const double inv = 1.0 / scale;
  Jacobi3 m = {{{xx * inv, xy * inv, xz * inv},
                {xy * inv, yy * inv, yz * inv},
                {xz * inv, yz * inv, zz * inv}},
               {{1, 0, 0}, {0, 1, 0}, {0, 0, 1}}};
  for (int sweep = 0; sweep < 32; ++sweep) {
    const double off = m.a[0][1] * m.a[0][1] + m.a[0][2] * m.a[0][2] + m.a[1][2] * m.a[1][2];
    const double diag = m.a[0][0] * m.a[0][0] + m.a[1][1] * m.a[1][1] + m.a[2][2] * m.a[2][2];
    if (off <= 0x1p-208 * diag || off == 0.0) break;  // below 2^-104 in norm
    jacobi_rotate(m, 0, 1);
    jacobi_rotate(m, 0, 2);
    jacobi_rotate(m, 1, 2);
  }
  // The smallest diagonal entry (ties to the first), chosen with selects rather than a computed
  // index, which would put the matrix in local memory on the device.
  const bool one = m.a[1][1] < m.a[0][0];
  const double d01 = one ? m.a[1][1] : m.a[0][0];
  const bool two = m.a[2][2] < d01;
  value = (two ? m.a[2][2] : d01) * scale;
  double col[3];
  for (int i = 0; i < 3; ++i) col[i] = two ? m.v[i][2] : (one ? m.v[i][1] : m.v[i][0]);
  const double len = ::sqrt(col[0] * col[0] + col[1] * col[1] + col[2] * col[2]);
  for (int i = 0; i < 3; ++i) vec[i] = col[i] / len;
}

/// The normal and curvature of one point from its neighbor list.
/// `at(id, c)` writes the coordinates of indexed point `id` to c[0..2] (as doubles).
/// `ids[0..count)`: the neighbors; a -1 ends the list early (dense rows are padded with -1).
/// `self`: the point's coordinates (non-finite: NaN results). `vp`: the viewpoint.
/// `out[0..2]` get the normal, `out[3]` the curvature: NaN where fewer than 3 neighbors exist or
/// the point is not finite; for neighbors all at one place (zero covariance) the normal is NaN
/// and the curvature 0, as PCL's solvePlaneParameters gives.
template <class Coords>
PCNN_HOST_DEVICE void point_normal(const Coords& at, const std::int32_t* ids, std::int64_t count,
                                   const double self[3], const double vp[3], float out[4]) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  out[0] = out[1] = out[2] = out[3] = nan;
  if (!(finite_value(self[0]) && finite_value(self[1]) && finite_value(self[2]))) return;
  std::int64_t n = 0;
  double sum[3] = {0, 0, 0};
  for (; n < count && ids[n] >= 0; ++n) {
    double c[3];
    at(ids[n], c);
    sum[0] += c[0];
    sum[1] += c[1];
    sum[2] += c[2];
  }
  if (n < kMinNormalNeighbors) return;
  const double inv_n = 1.0 / static_cast<double>(n);
  const double mean[3] = {sum[0] * inv_n, sum[1] * inv_n, sum[2] * inv_n};
  double xx = 0, xy = 0, xz = 0, yy = 0, yz = 0, zz = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    double c[3];
    at(ids[i], c);
    const double dx = c[0] - mean[0], dy = c[1] - mean[1], dz = c[2] - mean[2];
    xx += dx * dx;
    xy += dx * dy;
    xz += dx * dz;
    yy += dy * dy;
    yz += dy * dz;
    zz += dz * dz;
  }
  xx *= inv_n;
  xy *= inv_n;
  xz *= inv_n;
  yy *= inv_n;
  yz *= inv_n;
  zz *= inv_n;
  const double trace = xx + yy + zz;
  if (trace == 0.0) {  // every neighbor at one place: no direction (PCL: NaN normal, curvature 0)
    out[3] = 0.f;
    return;
  }
  double value, nv[3];
  smallest_eigenpair(xx, xy, xz, yy, yz, zz, value, nv);
  const double facing =
      nv[0] * (vp[0] - self[0]) + nv[1] * (vp[1] - self[1]) + nv[2] * (vp[2] - self[2]);
  const double sign = facing < 0.0 ? -1.0 : 1.0;
  out[0] = static_cast<float>(sign * nv[0]);
  out[1] = static_cast<float>(sign * nv[1]);
  out[2] = static_cast<float>(sign * nv[2]);
  out[3] = static_cast<float>(::fabs(value / trace));
}

}  // namespace pcnn::detail
