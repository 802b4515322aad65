// Shared by the pcnn::Index tests: inputs with known structure (from fixed seeds) and the strict
// comparison with the exact double-precision references: each row must hold the same indices and
// the same float squared distances as the reference row, in the same order.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iomanip>
#include <ostream>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "pcnn/index.hpp"
#include "pcnn/testing/reference.hpp"
#include "pcnn/testing/synthetic.hpp"
#include "test_clouds.hpp"

namespace pcnn {
/// Names the backend in test output (gtest finds it by argument-dependent lookup).
inline void PrintTo(Backend backend, std::ostream* os) { *os << to_string(backend); }
}  // namespace pcnn

namespace pcnn::test {

/// Packed (or strided) host points of a vector.
inline PointsView view(const std::vector<float>& xyz, std::int64_t stride = 3) {
  return host_points(xyz.data(), static_cast<std::int64_t>(xyz.size()) / stride, stride);
}

inline IndexOptions options(Backend backend) {
  IndexOptions o;
  o.backend = backend;
  return o;
}

inline std::int64_t count_finite(const std::vector<float>& xyz) {
  std::int64_t n = 0;
  for (std::size_t i = 0; i + 2 < xyz.size(); i += 3)
    n += std::isfinite(xyz[i]) && std::isfinite(xyz[i + 1]) && std::isfinite(xyz[i + 2]);
  return n;
}

/// The points of a host view (float32 or float64) whose three coordinates are finite.
inline std::int64_t count_finite(const PointsView& v) {
  std::int64_t n = 0;
  for (std::int64_t i = 0; i < v.count; ++i) {
    bool finite = true;
    for (int a = 0; a < 3; ++a)
      finite = finite && std::isfinite(v.is_double() ? v.data64[i * v.stride + a]
                                                     : double(v.data[i * v.stride + a]));
    n += finite;
  }
  return n;
}

enum class Input {
  uniform,
  clustered,
  lidar,
  hotspot,
  lattice,     // integer lattice: every distance exact in float, ties everywhere
  duplicates,  // each point 8 times: exact ties at distance 0
  noreturns,   // uniform, every third point at the origin (a scan's no-returns): long runs of
               // repeats, whose shadows the CUDA index sets aside
  outliers,    // uniform in a 100 m cube, plus a few points kilometers away
  identical,   // every point the same
  plane,       // a tilted plane
  line,        // points on a line
  near_ties,   // a shuffled 0.1-spaced lattice: 0.1 is no float, so distances tie within ulps
  tiny,        // uniform scaled by 1e-30: squared distances underflow float
  denormal,    // uniform scaled by 1e-39: the coordinates themselves are float denormals
  huge,        // uniform scaled by 1e25: squared distances overflow float
  pile,        // points and copies of them within a centimeter, and one point 1e9 away: the
               // whole pile shares one curve key
};

inline const char* name(Input in) {
  switch (in) {
    case Input::uniform:
      return "uniform";
    case Input::clustered:
      return "clustered";
    case Input::lidar:
      return "lidar";
    case Input::hotspot:
      return "hotspot";
    case Input::lattice:
      return "lattice";
    case Input::duplicates:
      return "duplicates";
    case Input::outliers:
      return "outliers";
    case Input::identical:
      return "identical";
    case Input::noreturns:
      return "noreturns";
    case Input::plane:
      return "plane";
    case Input::line:
      return "line";
    case Input::near_ties:
      return "near_ties";
    case Input::tiny:
      return "tiny";
    case Input::denormal:
      return "denormal";
    case Input::huge:
      return "huge";
    case Input::pile:
      return "pile";
  }
  return "?";
}

/// Reorders the points of packed xyz, float or double (a fixed permutation from `seed`).
template <class T>
void shuffle_points(std::vector<T>& xyz, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  const std::size_t n = xyz.size() / 3;
  for (std::size_t i = n; i > 1; --i) {
    const std::size_t j = static_cast<std::size_t>(rng() % i);
    for (int a = 0; a < 3; ++a) std::swap(xyz[3 * (i - 1) + a], xyz[3 * j + a]);
  }
}

/// About `n` points of kind `in` (a lattice is rounded to a cube, duplicates to a multiple of 8).
inline std::vector<float> make(Input in, int n, std::uint64_t seed) {
  switch (in) {
    case Input::uniform:
      return make_synthetic_cloud(SyntheticKind::uniform, n, seed);
    case Input::clustered:
      return make_synthetic_cloud(SyntheticKind::clustered, n, seed);
    case Input::lidar:
      return make_synthetic_cloud(SyntheticKind::lidar, n, seed);
    case Input::hotspot:
      return make_synthetic_cloud(SyntheticKind::hotspot, n, seed);
    case Input::lattice:
      return lattice(static_cast<int>(std::lround(std::cbrt(n))));
    case Input::duplicates:
      return duplicates(n / 8 > 0 ? n / 8 : 1, 8, seed);
    case Input::outliers:
      return with_outliers(n, seed);
    case Input::identical:
      return std::vector<float>(static_cast<std::size_t>(n) * 3, 2.5f);
    case Input::noreturns: {
      std::vector<float> v = make_synthetic_cloud(SyntheticKind::uniform, n, seed);
      for (std::size_t i = 0; i < v.size(); i += 9) std::fill_n(v.begin() + i, 3, 0.0f);
      return v;
    }
    case Input::plane:
      return plane(n, seed);
    case Input::line:
      return line(n, seed);
    case Input::near_ties: {
      std::vector<float> v = lattice(static_cast<int>(std::lround(std::cbrt(n))));
      for (float& c : v) c *= 0.1f;
      shuffle_points(v, seed);
      return v;
    }
    case Input::pile: {  // every third point a copy of an earlier one, and the far point last
      std::vector<float> v = make_synthetic_cloud(SyntheticKind::uniform, n, seed);
      for (float& c : v) c = 1.f + 1e-4f * c;  // the synthetic cube is 100 m
      for (std::size_t i = 2; i < v.size() / 3; i += 3)
        std::copy_n(v.begin() + 3 * (i / 3), 3, v.begin() + 3 * i);
      if (n > 0) std::fill(v.end() - 3, v.end(), 1e9f);
      return v;
    }
    case Input::tiny:
    case Input::denormal:
    case Input::huge: {
      const double f = in == Input::tiny ? 1e-30 : in == Input::denormal ? 1e-39 : 1e25;
      std::vector<float> v = make_synthetic_cloud(SyntheticKind::uniform, n, seed);
      for (float& c : v) c = static_cast<float>(double(c) * f);
      return v;
    }
  }
  return {};
}

/// Moves a cloud far from the origin (x + offset, y + 1.3 offset, z + 1.6 offset), in float:
/// the coordinates as stored are the translated floats.
inline void translate(std::vector<float>& xyz, double offset) {
  for (std::size_t i = 0; i < xyz.size(); ++i)
    xyz[i] = static_cast<float>(double(xyz[i]) + offset * (1.0 + 0.3 * double(i % 3)));
}

inline std::string row_string(const std::int32_t* idx, const float* dist, std::int64_t n) {
  std::ostringstream os;
  os << std::setprecision(9) << "[";
  for (std::int64_t j = 0; j < n; ++j) os << (j ? " " : "") << idx[j] << ":" << dist[j];
  if (n == 0) os << "empty";
  return os.str() + "]";
}

/// Rows × k results at `idx`/`dist` equal `want` exactly (indices, and float squared distances
/// compared with ==, so +inf padding matches +inf).
inline ::testing::AssertionResult same_rows(const std::int32_t* idx, const float* dist,
                                            const KnnResult& want) {
  const std::int64_t k = want.k;
  for (std::int64_t q = 0; q < want.rows; ++q)
    for (std::int64_t j = 0; j < k; ++j) {
      const std::size_t at = static_cast<std::size_t>(q * k + j);
      if (idx[at] != want.indices[at] || !(dist[at] == want.sqdist[at]))
        return ::testing::AssertionFailure()
               << "row " << q << " differs at column " << j << ": got "
               << row_string(idx + q * k, dist + q * k, k) << ", the reference has "
               << row_string(want.indices.data() + q * k, want.sqdist.data() + q * k, k);
    }
  return ::testing::AssertionSuccess();
}

inline ::testing::AssertionResult same_rows(const std::vector<std::int32_t>& idx,
                                            const std::vector<float>& dist, const KnnResult& want) {
  if (idx.size() != want.indices.size() || dist.size() != want.sqdist.size())
    return ::testing::AssertionFailure() << "sizes " << idx.size() << " / " << dist.size()
                                         << ", the reference has " << want.indices.size();
  return same_rows(idx.data(), dist.data(), want);
}

inline ::testing::AssertionResult same_knn(const KnnResult& got, const KnnResult& want) {
  if (got.rows != want.rows || got.k != want.k)
    return ::testing::AssertionFailure() << "shape " << got.rows << " x " << got.k
                                         << ", the reference is " << want.rows << " x " << want.k;
  return same_rows(got.indices, got.sqdist, want);
}

inline ::testing::AssertionResult same_hybrid(const HybridResult& got, const HybridResult& want) {
  const ::testing::AssertionResult rows = same_knn(got.knn, want.knn);
  if (!rows) return rows;
  if (got.counts != want.counts) return ::testing::AssertionFailure() << "counts differ";
  return ::testing::AssertionSuccess();
}

/// CSR radius results equal `want` exactly: offsets, then each row's indices and distances.
inline ::testing::AssertionResult same_radius(const std::int64_t* offsets, const std::int32_t* idx,
                                              const float* dist, std::int64_t rows,
                                              const RadiusResult& want) {
  if (rows != want.rows)
    return ::testing::AssertionFailure() << rows << " rows, the reference has " << want.rows;
  if (offsets[0] != 0) return ::testing::AssertionFailure() << "offsets[0] = " << offsets[0];
  for (std::int64_t q = 0; q < rows; ++q) {
    const std::int64_t b = want.offsets[q], e = want.offsets[q + 1];
    const bool same_count = offsets[q + 1] - offsets[q] == e - b;
    bool same = same_count && offsets[q] == b;
    for (std::int64_t i = b; same && i < e; ++i)
      same = idx[i] == want.indices[i] && dist[i] == want.sqdist[i];
    if (!same) {
      std::ostringstream os;
      os << "row " << q << ": got " << offsets[q + 1] - offsets[q] << " neighbors at offset "
         << offsets[q];
      if (same_count) os << " " << row_string(idx + offsets[q], dist + offsets[q], e - b);
      os << ", the reference has " << e - b << " at offset " << b << " "
         << row_string(want.indices.data() + b, want.sqdist.data() + b, e - b);
      return ::testing::AssertionFailure() << os.str();
    }
  }
  return ::testing::AssertionSuccess();
}

inline ::testing::AssertionResult same_radius(const RadiusResult& got, const RadiusResult& want) {
  if (got.offsets.size() != static_cast<std::size_t>(got.rows + 1))
    return ::testing::AssertionFailure()
           << got.offsets.size() << " offsets for " << got.rows << " rows";
  if (got.indices.size() != static_cast<std::size_t>(got.offsets.back()) ||
      got.sqdist.size() != got.indices.size())
    return ::testing::AssertionFailure() << "entries do not match offsets";
  return same_radius(got.offsets.data(), got.indices.data(), got.sqdist.data(), got.rows, want);
}

/// The exact self-search rows of the points `rows` of `pts` (for clouds too large for a full
/// reference): the k + 1 nearest of each as a separate query, itself removed (or the last one
/// dropped when it is not among them: then k copies of it with smaller indices come first).
/// `params.k` must be below kMaxK when exclude_self is set.
inline KnnResult reference_self_rows(PointsView pts, const std::vector<std::int64_t>& rows,
                                     KnnParams params) {
  std::vector<float> q;
  for (std::int64_t r : rows)
    for (int a = 0; a < 3; ++a) q.push_back(pts.data[r * pts.stride + a]);
  const PointsView qv = host_points(q.data(), static_cast<std::int64_t>(rows.size()));
  const int k = params.k, extra = params.exclude_self ? 1 : 0;
  const KnnResult wide = reference_knn(pts, &qv, {k + extra});
  KnnResult out;
  out.rows = static_cast<std::int64_t>(rows.size());
  out.k = k;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    int taken = 0;
    for (int j = 0; j < k + extra && taken < k; ++j) {
      const std::size_t at = i * (k + extra) + j;
      if (params.exclude_self && wide.indices[at] == rows[i]) continue;
      out.indices.push_back(wide.indices[at]);
      out.sqdist.push_back(wide.sqdist[at]);
      ++taken;
    }
  }
  return out;
}

/// Rows `rows` of a dense result.
inline KnnResult pick_rows(const KnnResult& r, const std::vector<std::int64_t>& rows) {
  KnnResult out;
  out.rows = static_cast<std::int64_t>(rows.size());
  out.k = r.k;
  for (std::int64_t q : rows) {
    const auto b = static_cast<std::ptrdiff_t>(q * r.k);
    out.indices.insert(out.indices.end(), r.indices.begin() + b, r.indices.begin() + b + r.k);
    out.sqdist.insert(out.sqdist.end(), r.sqdist.begin() + b, r.sqdist.begin() + b + r.k);
  }
  return out;
}

/// `count` rows spread over [0, n), the first and the last included.
inline std::vector<std::int64_t> sample_rows(std::int64_t n, std::int64_t count) {
  std::vector<std::int64_t> rows;
  for (std::int64_t i = 0; i < count && n > 0; ++i)
    rows.push_back(count > 1 ? i * (n - 1) / (count - 1) : 0);
  return rows;
}

/// Every kNN form of `index` (built over `rv`) against reference_knn, strictly: the owning
/// result, into caller views, the _async form; self-searches (queries == nullptr) with and without
/// exclude_self, and also in three chunks of rows (self_knn_rows).
inline void expect_knn_rows(Index& index, PointsView rv, const PointsView* queries, int k) {
  for (bool exclude : {false, true}) {
    if (exclude && queries) break;
    const KnnParams p{k, exclude};
    SCOPED_TRACE(exclude ? "exclude_self" : "with self");
    const KnnResult want = reference_knn(rv, queries, p);
    const std::int64_t rows = want.rows;
    // The automatic search (on the CUDA backend, clouds this small give each query a warp), the
    // shared walk of 32 queries a warp (0), and the shared walk of fewer (1: a warp a query only
    // up to one query an SM; launches this small give each warp 8 queries up to k = 32).
    for (int few : {-1, 0, 1}) {
      KnnParams pf = p;
      pf.few_queries_per_sm = few;
      EXPECT_TRUE(same_knn(queries ? index.knn(*queries, pf) : index.self_knn(pf), want))
          << "few_queries_per_sm " << few;
    }
    // Into the caller's memory (filled with garbage first).
    std::vector<std::int32_t> idx(want.indices.size(), 12345);
    std::vector<float> dist(want.sqdist.size(), -1.f);
    const MatrixView<std::int32_t> iv{idx.data(), rows, k};
    const MatrixView<float> dv{dist.data(), rows, k};
    if (queries)
      index.knn(*queries, p, iv, dv);
    else
      index.self_knn(p, iv, dv);
    EXPECT_TRUE(same_rows(idx, dist, want)) << "into views";
    // The _async form: ready once the stream has reached it (a synchronizing call on the same
    // stream comes after it).
    std::vector<std::int32_t> idx2(want.indices.size(), 12345);
    std::vector<float> dist2(want.sqdist.size(), -1.f);
    const MatrixView<std::int32_t> iv2{idx2.data(), rows, k};
    const MatrixView<float> dv2{dist2.data(), rows, k};
    if (queries) {
      index.knn_async(*queries, p, iv2, dv2);
      index.knn(*queries, p, iv, dv);
    } else {
      index.self_knn_async(p, iv2, dv2);
      index.self_knn(p, iv, dv);
    }
    EXPECT_TRUE(same_rows(idx2, dist2, want)) << "async";
    if (queries) continue;
    // Rows of the self-search in three uneven chunks.
    for (std::int64_t first = 0, chunk = rows / 3 + 1; first < rows; first += chunk) {
      const std::int64_t n = std::min(chunk, rows - first);
      std::vector<std::int32_t> ci(static_cast<std::size_t>(n * k), 777);
      std::vector<float> cd(ci.size(), -2.f);
      index.self_knn_rows(first, p, {ci.data(), n, k}, {cd.data(), n, k});
      std::vector<std::int64_t> which;
      for (std::int64_t r = first; r < first + n; ++r) which.push_back(r);
      EXPECT_TRUE(same_rows(ci, cd, pick_rows(want, which))) << "self_knn_rows from " << first;
    }
  }
}

/// Every radius form of `index` against reference_radius, strictly: the owning result, then
/// count-then-fill into caller arrays, then filled range by range (self_radius_fill_rows, or
/// radius_fill on sub-views of the queries); self-searches with and without exclude_self.
inline void expect_radius_rows(Index& index, PointsView rv, const PointsView* queries, double r) {
  for (bool exclude : {false, true}) {
    if (exclude && queries) break;
    const RadiusParams p{r, exclude};
    SCOPED_TRACE(exclude ? "exclude_self" : "with self");
    const RadiusResult want = reference_radius(rv, queries, p);
    EXPECT_TRUE(same_radius(queries ? index.radius(*queries, p) : index.self_radius(p), want));
    std::vector<std::int64_t> offsets(static_cast<std::size_t>(want.rows + 1), -7);
    const ArrayView<std::int64_t> ov{offsets.data(), want.rows + 1};
    const std::int64_t total =
        queries ? index.radius_count(*queries, p, ov) : index.self_radius_count(p, ov);
    ASSERT_EQ(total, want.offsets.back());
    EXPECT_EQ(offsets, want.offsets);
    std::vector<std::int32_t> idx(static_cast<std::size_t>(total), -5);
    std::vector<float> dist(static_cast<std::size_t>(total), -1.f);
    const ArrayView<const std::int64_t> cov{offsets.data(), want.rows + 1};
    const ArrayView<std::int32_t> iv{idx.data(), total};
    const ArrayView<float> dv{dist.data(), total};
    if (queries)
      index.radius_fill(*queries, p, cov, iv, dv);
    else
      index.self_radius_fill(p, cov, iv, dv);
    EXPECT_TRUE(same_radius(offsets.data(), idx.data(), dist.data(), want.rows, want))
        << "count then fill";
    // Filled range by range (ranges of unequal sizes, an empty one among them), each into
    // arrays of its own, as results larger than memory are streamed.
    std::vector<std::int32_t> ranged_idx;
    std::vector<float> ranged_dist;
    const std::int64_t rows = want.rows;
    const std::vector<std::int64_t> bounds{
        0, rows / 3, rows / 3, std::min(rows, rows / 3 + 1), rows - rows / 5, rows};
    for (std::size_t r = 0; r + 1 < bounds.size(); ++r) {
      const std::int64_t begin = bounds[r], end = bounds[r + 1];
      const std::int64_t entries = offsets[end] - offsets[begin];
      std::vector<std::int32_t> ri(static_cast<std::size_t>(entries), -5);
      std::vector<float> rd(ri.size(), -1.f);
      const ArrayView<const std::int64_t> slice{offsets.data() + begin, end - begin + 1};
      if (queries)
        index.radius_fill(queries->slice(begin, end - begin), p, slice, {ri.data(), entries},
                          {rd.data(), entries});
      else
        index.self_radius_fill_rows(begin, p, slice, {ri.data(), entries}, {rd.data(), entries});
      ranged_idx.insert(ranged_idx.end(), ri.begin(), ri.end());
      ranged_dist.insert(ranged_dist.end(), rd.begin(), rd.end());
    }
    ASSERT_EQ(static_cast<std::int64_t>(ranged_idx.size()), total);
    EXPECT_TRUE(same_radius(offsets.data(), ranged_idx.data(), ranged_dist.data(), want.rows, want))
        << "filled range by range";
  }
}

/// Every hybrid form of `index` against reference_hybrid, strictly: the owning result and into
/// caller views, then two ranges (self_hybrid_rows, or sub-views of the queries); self-searches
/// with and without exclude_self.
inline void expect_hybrid_rows(Index& index, PointsView rv, const PointsView* queries, double r,
                               int max_nn) {
  for (bool exclude : {false, true}) {
    if (exclude && queries) break;
    const HybridParams p{r, max_nn, exclude};
    SCOPED_TRACE(exclude ? "exclude_self" : "with self");
    const HybridResult want = reference_hybrid(rv, queries, p);
    EXPECT_TRUE(same_hybrid(queries ? index.hybrid(*queries, p) : index.self_hybrid(p), want));
    std::vector<std::int32_t> idx(want.knn.indices.size(), 999);
    std::vector<float> dist(want.knn.sqdist.size(), -1.f);
    const MatrixView<std::int32_t> iv{idx.data(), want.knn.rows, max_nn};
    const MatrixView<float> dv{dist.data(), want.knn.rows, max_nn};
    if (queries)
      index.hybrid(*queries, p, iv, dv);
    else
      index.self_hybrid(p, iv, dv);
    EXPECT_TRUE(same_rows(idx, dist, want.knn)) << "into views";
    // Range by range, as streamed results are.
    const std::int64_t rows = want.knn.rows, half = rows / 2;
    for (const auto& [begin, end] : {std::pair{std::int64_t(0), half}, std::pair{half, rows}}) {
      const MatrixView<std::int32_t> ri{idx.data() + begin * max_nn, end - begin, max_nn};
      const MatrixView<float> rd{dist.data() + begin * max_nn, end - begin, max_nn};
      std::fill(idx.begin() + begin * max_nn, idx.begin() + end * max_nn, 999);
      if (queries)
        index.hybrid(queries->slice(begin, end - begin), p, ri, rd);
      else
        index.self_hybrid_rows(begin, p, ri, rd);
    }
    EXPECT_TRUE(same_rows(idx, dist, want.knn)) << "range by range";
  }
}

}  // namespace pcnn::test
