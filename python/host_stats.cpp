// pcnn Python module — cloud statistics on the CPU.
#include "host_stats.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace pcnn_python {

namespace {

template <class T>
pcnn::CloudStats stats_of(const pcnn::PointsView& pts, const T* data) {
  pcnn::CloudStats r;
  r.count = pts.count;
  auto point = [&](std::int64_t i) { return data + i * pts.stride; };
  auto finite = [](const T* p) {
    return std::isfinite(p[0]) && std::isfinite(p[1]) && std::isfinite(p[2]);
  };
  long double sum[3] = {0, 0, 0};
  double lo[3] = {INFINITY, INFINITY, INFINITY}, hi[3] = {-INFINITY, -INFINITY, -INFINITY};
  for (std::int64_t i = 0; i < pts.count; ++i) {
    const T* p = point(i);
    if (!finite(p)) continue;
    ++r.finite;
    for (int a = 0; a < 3; ++a) {
      sum[a] += p[a];
      lo[a] = std::min<double>(lo[a], p[a]);
      hi[a] = std::max<double>(hi[a], p[a]);
    }
  }
  if (r.finite == 0) return r;
  const long double n = static_cast<long double>(r.finite);
  long double c[3];
  for (int a = 0; a < 3; ++a) {
    c[a] = sum[a] / n;
    r.min[a] = lo[a];
    r.max[a] = hi[a];
    r.centroid[a] = static_cast<double>(c[a]);
  }
  // Covariance entries in the library's order: xx, xy, xz, yy, yz, zz.
  static constexpr int kPair[6][2] = {{0, 0}, {0, 1}, {0, 2}, {1, 1}, {1, 2}, {2, 2}};
  long double cov[6] = {0, 0, 0, 0, 0, 0};
  for (std::int64_t i = 0; i < pts.count; ++i) {
    const T* p = point(i);
    if (!finite(p)) continue;
    const long double d[3] = {p[0] - c[0], p[1] - c[1], p[2] - c[2]};
    for (int e = 0; e < 6; ++e) cov[e] += d[kPair[e][0]] * d[kPair[e][1]];
  }
  for (int e = 0; e < 6; ++e) r.covariance[e] = static_cast<double>(cov[e] / n);
  return r;
}

}  // namespace

pcnn::CloudStats host_cloud_stats(const pcnn::PointsView& pts) {
  return pts.is_double() ? stats_of(pts, pts.data64) : stats_of(pts, pts.data);
}

}  // namespace pcnn_python
