// Re-centering on a double-precision origin, for double and float coordinates: the arithmetic is
// in double either way (a float converts to double exactly), so a float cloud gives the same
// origin and offsets as the same cloud converted to double first.
#include "pcnn/recenter.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "../core/fresh_pages.hpp"
#include "pcnn/error.hpp"

namespace pcnn {
namespace {

// Beyond this, squared distances (up to 3 * (2e18)^2) would overflow float.
constexpr double kMaxCoordinate = 1e18;

// Rows per block: the loops below are branch-free within a block (so that they vectorize) and
// decide between blocks (early exits, errors).
constexpr std::int64_t kRows = 2048;

template <class T>
bool finite3(const T* p) {
  return std::isfinite(p[0]) & std::isfinite(p[1]) & std::isfinite(p[2]);
}

// The bounding box of the finite points (`any` false when there are none).
struct Box {
  double lo[3], hi[3];
  bool any;
  std::array<double, 3> center() const {
    if (!any) return {0.0, 0.0, 0.0};
    return {0.5 * lo[0] + 0.5 * hi[0], 0.5 * lo[1] + 0.5 * hi[1], 0.5 * lo[2] + 0.5 * hi[2]};
  }
};

// min/max in T: converting to double keeps the order, so the box is the same as in double.
// `lo = p < lo ? p : lo` is std::min(lo, p) (which keeps lo on ties, -0.0 against 0.0 included).
template <class T>
Box finite_box(const T* xyz, std::int64_t n) {
  T lo[3], hi[3];
  for (int a = 0; a < 3; ++a) {
    lo[a] = std::numeric_limits<T>::infinity();
    hi[a] = -std::numeric_limits<T>::infinity();
  }
  bool any = false;
  for (std::int64_t i = 0; i < n; ++i) {
    const T* p = xyz + 3 * i;
    const bool f = finite3(p);
    any |= f;
    for (int a = 0; a < 3; ++a) {
      lo[a] = f & (p[a] < lo[a]) ? p[a] : lo[a];
      hi[a] = f & (hi[a] < p[a]) ? p[a] : hi[a];
    }
  }
  return {{double(lo[0]), double(lo[1]), double(lo[2])},
          {double(hi[0]), double(hi[1]), double(hi[2])},
          any};
}

bool within_range(double v) { return std::fabs(v) <= kMaxCoordinate; }

// Whether the offset of stored value p from origin o is exactly a float (and not too large).
// Branch-free; the float conversion only sees values within range (beyond float's it would be
// undefined).
bool exact_offset(double p, double o) {
  const double v = p - o;  // exact when o shares the points' grid; checked here anyway
  const bool in_range = within_range(v);
  const double r = in_range ? v : 0.0;
  return in_range & (double(static_cast<float>(r)) == r) & (v + o == p);
}

// For each axis whose `ok` is true on entry: whether every finite point's offset from o[axis] is
// exactly a float. One pass over the points for all three axes, ending early once every axis
// has failed.
template <class T>
void exact_on_axes(const T* xyz, std::int64_t n, const std::array<double, 3>& o, bool ok[3]) {
  for (std::int64_t first = 0; first < n && (ok[0] || ok[1] || ok[2]); first += kRows) {
    const std::int64_t m = std::min(kRows, n - first);
    bool bad[3] = {false, false, false};
    for (std::int64_t i = 0; i < m; ++i) {
      const T* p = xyz + 3 * (first + i);
      const bool f = finite3(p);
      for (int a = 0; a < 3; ++a) bad[a] |= f & !exact_offset(double(p[a]), o[a]);
    }
    for (int a = 0; a < 3; ++a) ok[a] = ok[a] & !bad[a];
  }
}

template <class T>
std::array<double, 3> exact_origin_of(const T* xyz, std::int64_t n, bool& exact) {
  const Box box = finite_box(xyz, n);
  const std::array<double, 3> center = box.center();
  // The candidates, in order: the center rounded to float, to an integer, and 0. Each axis takes
  // the first that is exact on it (one pass per candidate for the axes still open).
  const double candidates[3][3] = {
      {double(static_cast<float>(center[0])), double(static_cast<float>(center[1])),
       double(static_cast<float>(center[2]))},
      {std::round(center[0]), std::round(center[1]), std::round(center[2])},
      {0.0, 0.0, 0.0}};
  std::array<double, 3> origin = center;
  bool found[3] = {false, false, false};
  for (const auto& c : candidates) {
    bool ok[3];
    for (int a = 0; a < 3; ++a) ok[a] = !found[a] && std::isfinite(c[a]);
    if (!(ok[0] || ok[1] || ok[2])) continue;
    // A zero (+0.0, or -0.0 from rounding a small negative center) for float coordinates: each
    // offset is the float p itself (p - 0 and p + 0 are exact; -0.0 may become +0.0, the same
    // value), so it is exact exactly when within range, which the box's extremes decide. Other
    // axes are scanned.
    bool zero[3], scanned[3];
    for (int a = 0; a < 3; ++a) {
      zero[a] = std::is_same_v<T, float> && c[a] == 0.0;
      scanned[a] = ok[a] && !zero[a];
    }
    if (scanned[0] || scanned[1] || scanned[2]) exact_on_axes(xyz, n, {c[0], c[1], c[2]}, scanned);
    for (int a = 0; a < 3; ++a)
      ok[a] = zero[a] ? ok[a] && (!box.any || std::max(-box.lo[a], box.hi[a]) <= kMaxCoordinate)
                      : scanned[a];
    for (int a = 0; a < 3; ++a)
      if (ok[a]) {
        origin[a] = c[a];
        found[a] = true;
      }
  }
  exact = found[0] && found[1] && found[2];
  return origin;
}

template <class T>
bool recenters_exactly_of(const T* xyz, std::int64_t n, const std::array<double, 3>& origin) {
  bool ok[3] = {true, true, true};
  exact_on_axes(xyz, n, origin, ok);
  return ok[0] && ok[1] && ok[2];
}

// Rows [first, first + m) of xyz into out (3 floats a row; out may be xyz itself when T is float:
// every row of the block is checked before any is written).
template <class T>
void recenter_rows(const T* xyz, std::int64_t first, std::int64_t m,
                   const std::array<double, 3>& origin, float* out) {
  bool far = false;
  for (std::int64_t i = 0; i < m; ++i) {
    const T* p = xyz + 3 * i;
    const bool f = finite3(p);
    for (int a = 0; a < 3; ++a) far |= f & !within_range(double(p[a]) - origin[a]);
  }
  if (far)
    for (std::int64_t i = 0; i < m; ++i)
      for (int a = 0; a < 3; ++a)
        if (finite3(xyz + 3 * i) && !within_range(double(xyz[3 * i + a]) - origin[a]))
          throw error("point " + std::to_string(first + i) +
                      " lies more than 1e18 from the origin; squared distances would overflow "
                      "float");
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (std::int64_t i = 0; i < m; ++i) {
    const T* p = xyz + 3 * i;
    const bool f = finite3(p);
    float r[3];
    for (int a = 0; a < 3; ++a) r[a] = f ? static_cast<float>(double(p[a]) - origin[a]) : nan;
    for (int a = 0; a < 3; ++a) out[3 * i + a] = r[a];
  }
}

// A new vector, filled block by block (never zero-filled first).
std::vector<float> recenter_copy(const double* xyz, std::int64_t n,
                                 const std::array<double, 3>& origin) {
  std::vector<float> out;
  out.reserve(static_cast<std::size_t>(n) * 3);
  detail::prepare_fresh_pages(out.data(), static_cast<std::size_t>(n) * 3 * sizeof(float));
  float block[3 * kRows];
  for (std::int64_t i = 0; i < n; i += kRows) {
    const std::int64_t m = std::min(kRows, n - i);
    recenter_rows(xyz + 3 * i, i, m, origin, block);
    out.insert(out.end(), block, block + 3 * m);
  }
  return out;
}

}  // namespace

std::array<double, 3> bounding_box_center(const double* xyz, std::int64_t n) {
  return finite_box(xyz, n).center();
}

std::array<double, 3> exact_origin(const double* xyz, std::int64_t n, bool& exact) {
  return exact_origin_of(xyz, n, exact);
}

std::array<double, 3> exact_origin(const float* xyz, std::int64_t n, bool& exact) {
  return exact_origin_of(xyz, n, exact);
}

bool recenters_exactly(const double* xyz, std::int64_t n, const std::array<double, 3>& origin) {
  return recenters_exactly_of(xyz, n, origin);
}

bool recenters_exactly(const float* xyz, std::int64_t n, const std::array<double, 3>& origin) {
  return recenters_exactly_of(xyz, n, origin);
}

std::vector<float> recenter(const double* xyz, std::int64_t n,
                            const std::array<double, 3>& origin) {
  return recenter_copy(xyz, n, origin);
}

void recenter_in_place(float* xyz, std::int64_t n, const std::array<double, 3>& origin) {
  for (std::int64_t i = 0; i < n; i += kRows)
    recenter_rows(xyz + 3 * i, i, std::min(kRows, n - i), origin, xyz + 3 * i);
}

}  // namespace pcnn
