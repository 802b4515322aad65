// Sequential long-double references for the GPU statistics.
#include <algorithm>
#include <cmath>

#include "knn_rows.hpp"
#include "pcnn/testing/stats_reference.hpp"

namespace pcnn {

CloudStats reference_cloud_stats(PointsView pts) {
  CloudStats r;
  r.count = pts.count;
  long double n = 0, s[3] = {0, 0, 0};
  double lo[3] = {INFINITY, INFINITY, INFINITY}, hi[3] = {-INFINITY, -INFINITY, -INFINITY};
  for (std::int64_t i = 0; i < pts.count; ++i) {
    if (!cpu::finite_point(pts, i)) continue;
    const float* p = cpu::point(pts, i);
    n += 1;
    for (int a = 0; a < 3; ++a) {
      s[a] += p[a];
      lo[a] = std::min<double>(lo[a], p[a]);
      hi[a] = std::max<double>(hi[a], p[a]);
    }
  }
  r.finite = static_cast<std::int64_t>(n);
  if (r.finite == 0) return r;
  for (int a = 0; a < 3; ++a) {
    r.min[a] = lo[a];
    r.max[a] = hi[a];
    r.centroid[a] = static_cast<double>(s[a] / n);
  }
  // Two passes: products of deviations from the centroid.
  long double c[6] = {0, 0, 0, 0, 0, 0};
  const int pair[6][2] = {{0, 0}, {0, 1}, {0, 2}, {1, 1}, {1, 2}, {2, 2}};
  for (std::int64_t i = 0; i < pts.count; ++i) {
    if (!cpu::finite_point(pts, i)) continue;
    const float* p = cpu::point(pts, i);
    for (int k = 0; k < 6; ++k)
      c[k] += (static_cast<long double>(p[pair[k][0]]) - r.centroid[pair[k][0]]) *
              (static_cast<long double>(p[pair[k][1]]) - r.centroid[pair[k][1]]);
  }
  for (int k = 0; k < 6; ++k) r.covariance[k] = static_cast<double>(c[k] / n);
  return r;
}

namespace {

template <class T>
ValueStats value_stats(const T* values, std::int64_t n) {
  ValueStats r;
  long double s = 0;
  double lo = INFINITY, hi = -INFINITY;
  for (std::int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(values[i])) continue;
    ++r.count;
    s += values[i];
    lo = std::min<double>(lo, values[i]);
    hi = std::max<double>(hi, values[i]);
  }
  if (r.count == 0) return r;
  r.min = lo;
  r.max = hi;
  r.mean = static_cast<double>(s / r.count);
  long double v = 0;
  for (std::int64_t i = 0; i < n; ++i)
    if (std::isfinite(values[i]))
      v += (values[i] - static_cast<long double>(r.mean)) *
           (values[i] - static_cast<long double>(r.mean));
  r.stddev = r.count > 1 ? static_cast<double>(std::sqrt(v / (r.count - 1))) : 0.0;
  return r;
}

}  // namespace

ValueStats reference_value_stats(const float* values, std::int64_t n) {
  return value_stats(values, n);
}
ValueStats reference_value_stats(const double* values, std::int64_t n) {
  return value_stats(values, n);
}

}  // namespace pcnn
