// Re-centering on a double-precision origin.
#include "pcnn/recenter.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "pcnn/error.hpp"

namespace pcnn {
namespace {

// Beyond this, squared distances (up to 3 * (2e18)^2) would overflow float.
constexpr double kMaxCoordinate = 1e18;

bool finite3(const double* p) {
  return std::isfinite(p[0]) && std::isfinite(p[1]) && std::isfinite(p[2]);
}

}  // namespace

std::array<double, 3> bounding_box_center(const double* xyz, std::int64_t n) {
  double lo[3] = {INFINITY, INFINITY, INFINITY}, hi[3] = {-INFINITY, -INFINITY, -INFINITY};
  bool any = false;
  for (std::int64_t i = 0; i < n; ++i) {
    const double* p = xyz + 3 * i;
    if (!finite3(p)) continue;
    any = true;
    for (int a = 0; a < 3; ++a) {
      lo[a] = std::min(lo[a], p[a]);
      hi[a] = std::max(hi[a], p[a]);
    }
  }
  if (!any) return {0.0, 0.0, 0.0};
  return {0.5 * lo[0] + 0.5 * hi[0], 0.5 * lo[1] + 0.5 * hi[1], 0.5 * lo[2] + 0.5 * hi[2]};
}

namespace {

// Whether every finite point's offset from `o` along `axis` is exactly a float.
bool exact_on_axis(const double* xyz, std::int64_t n, int axis, double o) {
  for (std::int64_t i = 0; i < n; ++i) {
    const double* p = xyz + 3 * i;
    if (!finite3(p)) continue;
    const double v = p[axis] - o;  // exact when o shares the points' grid; checked below anyway
    if (!(std::fabs(v) <= kMaxCoordinate) || double(static_cast<float>(v)) != v || v + o != p[axis])
      return false;
  }
  return true;
}

}  // namespace

std::array<double, 3> exact_origin(const double* xyz, std::int64_t n, bool& exact) {
  const std::array<double, 3> center = bounding_box_center(xyz, n);
  std::array<double, 3> origin = center;
  exact = true;
  for (int a = 0; a < 3; ++a) {
    bool found = false;
    for (const double o : {double(static_cast<float>(center[a])), std::round(center[a]), 0.0})
      if (std::isfinite(o) && exact_on_axis(xyz, n, a, o)) {
        origin[a] = o;
        found = true;
        break;
      }
    exact = exact && found;
  }
  return origin;
}

bool recenters_exactly(const double* xyz, std::int64_t n, const std::array<double, 3>& origin) {
  for (int a = 0; a < 3; ++a)
    if (!exact_on_axis(xyz, n, a, origin[a])) return false;
  return true;
}

std::vector<float> recenter(const double* xyz, std::int64_t n,
                            const std::array<double, 3>& origin) {
  std::vector<float> out(static_cast<std::size_t>(n) * 3);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (std::int64_t i = 0; i < n; ++i) {
    const double* p = xyz + 3 * i;
    const bool ok = finite3(p);
    for (int a = 0; a < 3; ++a) {
      const double v = p[a] - origin[a];
      if (ok && !(std::fabs(v) <= kMaxCoordinate))
        throw error("point " + std::to_string(i) +
                    " lies more than 1e18 from the origin; squared distances would overflow float");
      out[3 * i + a] = ok ? static_cast<float>(v) : nan;
    }
  }
  return out;
}

}  // namespace pcnn
