// Re-centering on a double-precision origin, for double and float coordinates: the arithmetic is
// in double either way (a float converts to double exactly), so a float cloud gives the same
// origin and offsets as the same cloud converted to double first.
#include "pcnn/recenter.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <string>

#include "../core/cpus.hpp"
#include "../core/fresh_pages.hpp"
#include "../core/number_text.hpp"
#include "../core/parallel_blocks.hpp"
#include "pcnn/error.hpp"

namespace pcnn {
namespace {

// Beyond this, squared distances (up to 3 * (2e18)^2) would overflow float.
constexpr double kMaxCoordinate = 1e18;

// Rows per block: the loops below are branch-free within a block (so that they vectorize) and
// decide between blocks (early exits, errors).
constexpr std::int64_t kRows = 2048;
// Rows per thread's block (a multiple of kRows): a pass over 10M points in 39 blocks.
constexpr std::int64_t kBlockRows = 128 * kRows;

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
struct TBox {
  T lo[3], hi[3];
  bool any;
};

template <class T>
TBox<T> empty_box() {
  TBox<T> b;
  for (int a = 0; a < 3; ++a) {
    b.lo[a] = std::numeric_limits<T>::infinity();
    b.hi[a] = -std::numeric_limits<T>::infinity();
  }
  b.any = false;
  return b;
}

// Adds points [first, last) to `b`, keeping the earlier of equal values.
template <class T>
void extend_box(TBox<T>& b, const T* xyz, std::int64_t first, std::int64_t last) {
  for (std::int64_t i = first; i < last; ++i) {
    const T* p = xyz + 3 * i;
    const bool f = finite3(p);
    b.any |= f;
    for (int a = 0; a < 3; ++a) {
      b.lo[a] = f & (p[a] < b.lo[a]) ? p[a] : b.lo[a];
      b.hi[a] = f & (b.hi[a] < p[a]) ? p[a] : b.hi[a];
    }
  }
}

// The box of blocks of points, each on some thread, merged in block order: the same box, bit for
// bit (the sign of a zero included), as one pass in order.
template <class T>
Box finite_box(const T* xyz, std::int64_t n) {
  std::vector<TBox<T>> parts(static_cast<std::size_t>((n + kBlockRows - 1) / kBlockRows),
                             empty_box<T>());
  detail::parallel_blocks(detail::usable_cpus(), n, kBlockRows,
                          [&](std::int64_t b, std::int64_t e) {
                            extend_box(parts[static_cast<std::size_t>(b / kBlockRows)], xyz, b, e);
                          });
  TBox<T> box = empty_box<T>();
  for (const TBox<T>& p : parts) {
    box.any |= p.any;
    for (int a = 0; a < 3; ++a) {
      box.lo[a] = p.lo[a] < box.lo[a] ? p.lo[a] : box.lo[a];
      box.hi[a] = box.hi[a] < p.hi[a] ? p.hi[a] : box.hi[a];
    }
  }
  return {{double(box.lo[0]), double(box.lo[1]), double(box.lo[2])},
          {double(box.hi[0]), double(box.hi[1]), double(box.hi[2])},
          box.any};
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
// exactly a float. Blocks of points on several threads, all three axes in one pass, each block
// ending early once every axis has failed.
template <class T>
void exact_on_axes(const T* xyz, std::int64_t n, const std::array<double, 3>& o, bool ok[3]) {
  std::atomic<unsigned> failed{(ok[0] ? 0u : 1u) | (ok[1] ? 0u : 2u) | (ok[2] ? 0u : 4u)};
  detail::parallel_blocks(
      detail::usable_cpus(), n, kBlockRows, [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t first = begin; first < end; first += kRows) {
          if (failed.load(std::memory_order_relaxed) == 7u) return;
          const std::int64_t m = std::min(kRows, end - first);
          bool bad[3] = {false, false, false};
          for (std::int64_t i = 0; i < m; ++i) {
            const T* p = xyz + 3 * (first + i);
            const bool f = finite3(p);
            for (int a = 0; a < 3; ++a) bad[a] |= f & !exact_offset(double(p[a]), o[a]);
          }
          const unsigned bits = (bad[0] ? 1u : 0u) | (bad[1] ? 2u : 0u) | (bad[2] ? 4u : 0u);
          if (bits) failed.fetch_or(bits, std::memory_order_relaxed);
        }
      });
  const unsigned f = failed.load();
  for (int a = 0; a < 3; ++a) ok[a] = ok[a] && !(f & (1u << a));
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

// An origin is the caller's argument: one not finite is refused as such, before any point is
// blamed for lying "far" from it.
void check_origin(const std::array<double, 3>& origin) {
  for (double o : origin)
    PCNN_EXPECTS(std::isfinite(o), "recenter: the origin must be finite, got (" +
                                       detail::number_text(origin[0]) + ", " +
                                       detail::number_text(origin[1]) + ", " +
                                       detail::number_text(origin[2]) + ")");
}

// Rows of xyz into out (which may be xyz itself when T is float), blocks on several threads.
// Errors name the first far point a pass in order meets (detail::parallel_blocks).
template <class T>
void recenter_all(const T* xyz, std::int64_t n, const std::array<double, 3>& origin, float* out) {
  detail::parallel_blocks(
      detail::usable_cpus(), n, kBlockRows, [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t i = begin; i < end; i += kRows)
          recenter_rows(xyz + 3 * i, i, std::min(kRows, end - i), origin, out + 3 * i);
      });
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
  check_origin(origin);
  std::vector<float> out;
  detail::resize_fresh_parallel(out, static_cast<std::size_t>(n) * 3, detail::usable_cpus());
  recenter_all(xyz, n, origin, out.data());
  return out;
}

void recenter_in_place(float* xyz, std::int64_t n, const std::array<double, 3>& origin) {
  check_origin(origin);
  recenter_all(xyz, n, origin, xyz);
}

}  // namespace pcnn
