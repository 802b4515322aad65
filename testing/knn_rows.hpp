// Helpers shared by the CPU searches: finite-point compaction and row finishing.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <thread>
#include <utility>
#include <vector>

#include "pcnn/knn.hpp"
#include "pcnn/points.hpp"

namespace pcnn::cpu {

/// Point i of a float32 view (the references of statistics, smoothing and PCL take no other).
inline const float* point(const PointsView& v, std::int64_t i) { return v.data + i * v.stride; }

/// Point i of a view of either coordinate type (float32 or float64), as doubles: exact.
inline std::array<double, 3> xyz(const PointsView& v, std::int64_t i) {
  if (v.data64) {
    const double* p = v.data64 + i * v.stride;
    return {p[0], p[1], p[2]};
  }
  const float* p = v.data + i * v.stride;
  return {p[0], p[1], p[2]};
}

inline bool finite_point(const PointsView& v, std::int64_t i) {
  const std::array<double, 3> p = xyz(v, i);
  return std::isfinite(p[0]) && std::isfinite(p[1]) && std::isfinite(p[2]);
}

/// Original indices of the finite points of `v`, ascending.
inline std::vector<std::int32_t> finite_indices(const PointsView& v) {
  std::vector<std::int32_t> ids;
  ids.reserve(static_cast<std::size_t>(v.count));
  for (std::int64_t i = 0; i < v.count; ++i)
    if (finite_point(v, i)) ids.push_back(static_cast<std::int32_t>(i));
  return ids;
}

/// Squared distance in double precision, the reference measure: (dx*dx + dy*dy) + dz*dz from
/// the coordinates as given (callers are compiled with -ffp-contract=off).
inline double sqdist_double(const std::array<double, 3>& a, const std::array<double, 3>& b) {
  const double dx = a[0] - b[0], dy = a[1] - b[1], dz = a[2] - b[2];
  return (dx * dx + dy * dy) + dz * dz;
}
/// The squared distance between point i of `a` and point j of `b`.
inline double sqdist_double(const PointsView& a, std::int64_t i, const PointsView& b,
                            std::int64_t j) {
  return sqdist_double(xyz(a, i), xyz(b, j));
}

/// Sorts candidates by (distance, index), keeps the first k and writes row `q` of `out`
/// (padding with -1 / +inf).
template <class D>
void finish_row(std::vector<std::pair<D, std::int32_t>>& cand, std::int64_t q, KnnResult& out) {
  const std::size_t k = static_cast<std::size_t>(out.k);
  const std::size_t keep = std::min(k, cand.size());
  std::partial_sort(cand.begin(), cand.begin() + keep, cand.end());
  const std::size_t row = static_cast<std::size_t>(q) * k;
  for (std::size_t j = 0; j < k; ++j) {
    out.indices[row + j] = j < keep ? cand[j].second : -1;
    out.sqdist[row + j] = j < keep ? static_cast<float>(cand[j].first) : INFINITY;
  }
}

/// Runs body(q) for q in [0, n) on all hardware threads, in interleaved chunks.
template <class F>
void parallel_rows(std::int64_t n, F&& body) {
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  const std::int64_t chunk = 256;
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < hw; ++t)
    pool.emplace_back([&, t] {
      for (std::int64_t s = std::int64_t(t) * chunk; s < n; s += std::int64_t(hw) * chunk)
        for (std::int64_t q = s; q < std::min(n, s + chunk); ++q) body(q);
    });
  for (auto& th : pool) th.join();
}

inline KnnResult empty_result(std::int64_t rows, int k) {
  KnnResult r;
  r.rows = rows;
  r.k = k;
  r.indices.assign(static_cast<std::size_t>(rows) * k, -1);
  r.sqdist.assign(static_cast<std::size_t>(rows) * k, INFINITY);
  return r;
}

}  // namespace pcnn::cpu
