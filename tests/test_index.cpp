// pcnn::Index on both backends: every search (kNN, self-kNN with and without exclude_self, radius
// owning and count-then-fill, hybrid) compared strictly, row by row, with the exact double
// references; move semantics; argument checks; two indexes used from two threads at once; the
// backend choice. The CPU backend always runs; the CUDA cases skip, saying why, without a device.
// CUDA-only matters (output locations, streams, staging, memory) are in test_index_gpu.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <exception>
#include <functional>
#include <iostream>
#include <limits>
#include <ostream>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "gpu_test.hpp"
#include "index_test_util.hpp"
#include "pcnn/device.hpp"
#include "pcnn/error.hpp"
#include "pcnn/index.hpp"
#include "pcnn/recenter.hpp"
#include "pcnn/testing/reference.hpp"

namespace pcnn {
namespace {

using test::Input;
using test::options;
using test::same_hybrid;
using test::same_knn;
using test::same_radius;
using test::view;

// One owning object: copies would share (and double-free) the device state.
static_assert(!std::is_copy_constructible_v<Index>, "Index must not be copyable");
static_assert(!std::is_copy_assignable_v<Index>, "Index must not be copy-assignable");
static_assert(std::is_nothrow_move_constructible_v<Index>, "Index must move without throwing");
static_assert(std::is_nothrow_move_assignable_v<Index>, "Index must move without throwing");

const char* backend_name(Backend b) { return to_string(b); }

// ---- every search against the references, on both backends ----

constexpr int kSelf = -1;  // SearchCase::queries: search the indexed points themselves

struct SearchCase {
  Backend backend;
  Input input;
  int n;        // indexed points (a lattice is rounded to a cube)
  int queries;  // kSelf: self-searches; else a separate query set of this size
  Input query_input;
  int k;                // kNN k and hybrid max_nn
  double radius;        // radius and hybrid searches
  double bad_fraction;  // points made non-finite (NaN or infinite), indexed points and queries
  double offset;        // translation of every point (see test::translate)
  std::uint64_t seed;
  bool self() const { return queries == kSelf; }
};

std::ostream& operator<<(std::ostream& os, const SearchCase& c) {
  os << backend_name(c.backend) << " " << name(c.input) << " n=" << c.n;
  if (!c.self()) os << " queries=" << name(c.query_input) << ":" << c.queries;
  os << " k=" << c.k << " r=" << c.radius;
  if (c.bad_fraction > 0) os << " non-finite=" << c.bad_fraction;
  if (c.offset != 0) os << " translated by " << c.offset;
  return os << " seed=" << c.seed;
}

std::string case_name(const ::testing::TestParamInfo<SearchCase>& info) {
  const SearchCase& c = info.param;
  std::string s =
      std::string(backend_name(c.backend)) + "_" + name(c.input) + "_n" + std::to_string(c.n);
  if (!c.self()) s += "_q" + std::string(name(c.query_input)) + std::to_string(c.queries);
  s += "_k" + std::to_string(c.k);
  if (c.bad_fraction > 0) s += "_nonfinite";
  if (c.offset != 0) s += "_far";
  return s + "_seed" + std::to_string(c.seed);
}

std::vector<SearchCase> search_cases() {
  std::vector<SearchCase> v;
  const Input U = Input::uniform;
  auto add = [&](Input in, int n, int queries, Input qin, int k, double r, double bad,
                 double offset, std::uint64_t seed) {
    v.push_back({Backend::cpu, in, n, queries, qin, k, r, bad, offset, seed});
  };
  // Sizes 0 and 1, an empty query set, and k larger than the number of points.
  add(U, 0, kSelf, U, 4, 1.0, 0, 0, 40);
  add(U, 0, 50, U, 3, 5.0, 0, 0, 41);  // nothing indexed: every row padded or empty
  add(U, 1, kSelf, U, 4, 5.0, 0, 0, 42);
  add(U, 1, 20, U, 1, 60.0, 0, 0, 43);
  add(U, 5, kSelf, U, 8, 80.0, 0, 0, 44);
  add(U, 100, kSelf, U, 128, 20.0, 0, 0, 45);
  add(U, 3000, 0, U, 8, 5.0, 0, 0, 46);
  // k = 1, 8, 32, 128 on one cloud.
  for (int k : {1, 8, 32, 128}) add(U, 2500, kSelf, U, k, 9.0, 0, 0, 10u + k);
  // k = 1 self-searches, each point its own candidate: the CUDA backend looks each point's first
  // copy up by its curve key (first_copy_kernel) instead of walking, where the runs of one key
  // are short. Copies (also far from the origin), piles of them set aside as shadows (a long
  // run: the walk), non-finite points, near-ties, and one key shared by a whole pile (the walk).
  add(Input::duplicates, 4000, kSelf, U, 1, 0.0, 0, 0, 110);
  add(Input::identical, 500, kSelf, U, 1, 0.0, 0, 0, 111);
  add(Input::noreturns, 3000, kSelf, U, 1, 0.0, 0.1, 0, 112);
  add(Input::duplicates, 3000, kSelf, U, 1, 0.5, 0, 1e6, 113);
  add(Input::near_ties, 1728, kSelf, U, 1, 0.1, 0, 0, 114);
  add(Input::pile, 3000, kSelf, U, 1, 1e-3, 0, 0, 115);
  add(Input::denormal, 2000, kSelf, U, 1, 9e-39, 0, 0, 116);
  add(Input::lidar, 3000, kSelf, U, 1, 0.8, 0.05, 1e6, 117);
  add(Input::clustered, 3000, kSelf, U, 16, 1.5, 0, 0, 31);
  add(Input::lidar, 4000, kSelf, U, 8, 0.8, 0, 0, 32);
  add(Input::hotspot, 4000, kSelf, U, 12, 3.0, 0, 0, 33);
  // Exact ties: integer lattices (neighbors exactly at r), duplicates, one point many times.
  add(Input::lattice, 1728, kSelf, U, 8, 1.0, 0, 0, 50);
  add(Input::lattice, 1728, kSelf, U, 27, std::sqrt(3.0), 0, 0, 51);
  add(Input::lattice, 4096, kSelf, U, 64, 2.0, 0, 0, 52);
  add(Input::duplicates, 4000, kSelf, U, 8, 0.0, 0, 0, 53);  // r = 0 finds the copies
  add(Input::duplicates, 4000, kSelf, U, 20, 0.5, 0, 0, 54);
  add(Input::identical, 500, kSelf, U, 16, 0.0, 0, 0, 55);
  add(Input::identical, 300, kSelf, U, 128, 1.0, 0, 0, 56);
  add(Input::noreturns, 4000, kSelf, U, 8, 2.0, 0, 0, 57);  // 1334 at the origin
  add(Input::noreturns, 3000, kSelf, U, 128, 0.0, 0, 0, 58);
  add(Input::noreturns, 3000, 1000, Input::noreturns, 64, 3.0, 0.1, 0, 59);
  add(Input::noreturns, 2500, kSelf, U, 16, 4.0, 0, 1e6, 64);
  // Separate query sets.
  add(U, 4000, 1500, Input::clustered, 16, 6.0, 0, 0, 60);
  add(Input::lidar, 5000, 2000, Input::lidar, 1, 0.5, 0, 0, 61);
  add(Input::lattice, 1000, 1000, Input::lattice, 9, 1.0, 0, 0, 62);  // queries on the points
  add(Input::duplicates, 2000, 800, Input::duplicates, 12, 0.0, 0, 0, 63);
  // Non-finite points among the indexed points and the queries.
  add(U, 3000, kSelf, U, 8, 9.0, 0.1, 0, 70);
  add(Input::clustered, 3000, 1000, U, 12, 3.0, 0.2, 0, 71);
  add(U, 40, kSelf, U, 64, 50.0, 0.5, 0, 72);
  // A lattice has points exactly at the grid's corners, one of which (the Hilbert curve's end,
  // (hi, lo, lo)) has the largest key a finite point can have; NaNs with smaller indices must
  // still sort after it.
  add(Input::lattice, 1728, kSelf, U, 8, 1.0, 0.2, 0, 73);
  add(Input::lattice, 1000, 1000, Input::lattice, 9, 1.0, 0.2, 0, 74);
  // Shapes that break simple uniform grids.
  add(Input::outliers, 4000, kSelf, U, 8, 9.0, 0, 0, 80);
  add(Input::outliers, 3000, 2000, Input::outliers, 32, 9.0, 0, 0, 81);
  add(Input::plane, 3000, kSelf, U, 8, 1.0, 0, 0, 82);
  add(Input::line, 2000, kSelf, U, 32, 0.2, 0, 0, 83);
  // Translated by 1e6: float spacing 1/16 to 1/8 there, so many exact ties.
  add(U, 3000, kSelf, U, 8, 9.0, 0, 1e6, 90);
  add(Input::lattice, 1728, kSelf, U, 27, 1.0, 0, 1e6, 91);  // integers + 1e6: exact in float
  add(Input::clustered, 2500, 1000, Input::clustered, 16, 2.0, 0, 1e6, 92);
  add(Input::lidar, 3000, kSelf, U, 8, 0.8, 0.05, 1e6, 93);
  // Near-ties within a float ulp, and magnitudes where float squares underflow or overflow
  // (issue 14's adversarial clouds): strict against the double reference on both backends.
  add(Input::near_ties, 1728, kSelf, U, 19, 0.1, 0, 0, 100);
  add(Input::near_ties, 4096, kSelf, U, 8, 0.2, 0, 0, 101);
  add(Input::near_ties, 1728, 1728, Input::near_ties, 26, 0.15, 0, 0, 102);
  add(Input::tiny, 3000, kSelf, U, 8, 9e-30, 0, 0, 103);
  add(Input::denormal, 2000, kSelf, U, 8, 9e-39, 0, 0, 104);
  add(Input::huge, 3000, kSelf, U, 8, 9e25, 0, 0, 105);
  add(Input::clustered, 2500, 1000, Input::clustered, 16, 2.0, 0, 4.5e6, 106);  // UTM-like
  // Every case on the CUDA backend too.
  for (std::size_t i = 0, n = v.size(); i < n; ++i) {
    v.push_back(v[i]);
    v.back().backend = Backend::cuda;
  }
  return v;
}

struct Clouds {
  std::vector<float> refs, queries;
  PointsView rv() const { return view(refs); }
  PointsView qv() const { return view(queries); }
};

Clouds make_clouds(const SearchCase& c) {
  Clouds cl;
  cl.refs = test::make(c.input, c.n, c.seed);
  if (!c.self() && c.queries > 0) cl.queries = test::make(c.query_input, c.queries, c.seed + 1);
  if (c.bad_fraction > 0) {
    test::poison(cl.refs, c.bad_fraction, c.seed + 2);
    test::poison(cl.queries, c.bad_fraction, c.seed + 3);
  }
  if (c.offset != 0) {
    test::translate(cl.refs, c.offset);
    test::translate(cl.queries, c.offset);
  }
  return cl;
}

class IndexSearch : public ::testing::TestWithParam<SearchCase> {
 protected:
  void SetUp() override {
    if (GetParam().backend == Backend::cuda) PCNN_REQUIRE_DEVICE();
  }
};

TEST_P(IndexSearch, KnnRowsEqualTheReference) {
  const SearchCase c = GetParam();
  const Clouds cl = make_clouds(c);
  const PointsView rv = cl.rv(), qv = cl.qv();
  Index index(rv, options(c.backend));
  EXPECT_EQ(index.backend(), c.backend);
  EXPECT_EQ(index.size(), rv.count);
  EXPECT_EQ(index.finite_size(), test::count_finite(cl.refs));
  test::expect_knn_rows(index, rv, c.self() ? nullptr : &qv, c.k);
}

TEST_P(IndexSearch, RadiusRowsEqualTheReference) {
  const SearchCase c = GetParam();
  const Clouds cl = make_clouds(c);
  const PointsView rv = cl.rv(), qv = cl.qv();
  Index index(rv, options(c.backend));
  test::expect_radius_rows(index, rv, c.self() ? nullptr : &qv, c.radius);
}

TEST_P(IndexSearch, HybridRowsEqualTheReference) {
  const SearchCase c = GetParam();
  const Clouds cl = make_clouds(c);
  const PointsView rv = cl.rv(), qv = cl.qv();
  Index index(rv, options(c.backend));
  test::expect_hybrid_rows(index, rv, c.self() ? nullptr : &qv, c.radius, c.k);
}

INSTANTIATE_TEST_SUITE_P(Cases, IndexSearch, ::testing::ValuesIn(search_cases()), case_name);

// ---- behavior on each backend ----

class IndexBackend : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
    if (GetParam() == Backend::cuda) PCNN_REQUIRE_DEVICE();
  }
  IndexOptions opts() const { return options(GetParam()); }
};

std::string backend_param_name(const ::testing::TestParamInfo<Backend>& info) {
  return backend_name(info.param);
}

TEST_P(IndexBackend, AnEmptyIndexIsBuiltLater) {
  Index index(opts());
  EXPECT_EQ(index.backend(), GetParam());
  EXPECT_EQ(index.size(), 0);
  EXPECT_EQ(index.self_knn({4}).rows, 0);
  EXPECT_EQ(index.self_radius({1.0}).offsets, std::vector<std::int64_t>{0});
  const std::vector<float> qs = make_synthetic_cloud(SyntheticKind::uniform, 30, 1);
  const PointsView qv = view(qs);
  // Nothing indexed: every row padded, every radius row empty.
  const std::vector<float> none;
  EXPECT_TRUE(same_knn(index.knn(qv, {4}), reference_knn(view(none), &qv, {4})));
  EXPECT_EQ(index.radius(qv, {10.0}).offsets, std::vector<std::int64_t>(31, 0));
  const std::vector<float> pts = make_synthetic_cloud(SyntheticKind::uniform, 800, 2);
  index.build(view(pts));
  EXPECT_EQ(index.size(), 800);
  EXPECT_TRUE(same_knn(index.knn(qv, {4}), reference_knn(view(pts), &qv, {4})));
}

TEST_P(IndexBackend, RebuildReplacesThePoints) {
  Index index(opts());
  const std::vector<float> qs = make_synthetic_cloud(SyntheticKind::lidar, 1500, 3);
  const PointsView qv = view(qs);
  // Larger, smaller, empty, then the first size again: each build forgets the previous points.
  for (int n : {4000, 1000, 0, 4000}) {
    std::vector<float> pts = make_synthetic_cloud(SyntheticKind::lidar, n, 100 + n);
    test::poison(pts, 0.01, 5);
    index.build(view(pts));
    std::fill(pts.begin(), pts.end(), 0.f);  // the index keeps its own copy
    std::vector<float> again = make_synthetic_cloud(SyntheticKind::lidar, n, 100 + n);
    test::poison(again, 0.01, 5);
    SCOPED_TRACE("n = " + std::to_string(n));
    EXPECT_EQ(index.size(), n);
    EXPECT_EQ(index.finite_size(), test::count_finite(again));
    EXPECT_TRUE(same_knn(index.knn(qv, {6}), reference_knn(view(again), &qv, {6})));
    EXPECT_TRUE(
        same_knn(index.self_knn({5, true}), reference_knn(view(again), nullptr, {5, true})));
    EXPECT_TRUE(same_radius(index.radius(qv, {1.0}), reference_radius(view(again), &qv, {1.0})));
  }
}

TEST_P(IndexBackend, StridedPointsGiveThePackedResults) {
  const std::vector<float> packed = make_synthetic_cloud(SyntheticKind::uniform, 2500, 91);
  std::vector<float> strided;  // like pcl::PointXYZ: x y z and one padding float
  for (std::size_t i = 0; i < packed.size(); i += 3)
    strided.insert(strided.end(), {packed[i], packed[i + 1], packed[i + 2], -7.f});
  const PointsView pv = view(packed), sv = view(strided, 4);
  ASSERT_EQ(sv.count, 2500);
  const KnnResult want = reference_knn(pv, nullptr, {10, true});
  Index a(pv, opts()), b(sv, opts());
  EXPECT_TRUE(same_knn(a.self_knn({10, true}), want));
  EXPECT_TRUE(same_knn(b.self_knn({10, true}), want));
  const PointsView q4 = host_points(strided.data(), 700, 4), q3 = host_points(packed.data(), 700);
  EXPECT_TRUE(same_knn(b.knn(q4, {7}), reference_knn(pv, &q3, {7})));
  EXPECT_TRUE(same_radius(b.radius(q4, {8.0}), reference_radius(pv, &q3, {8.0})));
  EXPECT_TRUE(same_hybrid(a.hybrid(q4, {8.0, 5}), reference_hybrid(pv, &q3, {8.0, 5})));
}

TEST_P(IndexBackend, HybridIsTheRadiusSearchCutAtMaxNn) {
  const std::vector<float> pts = make_synthetic_cloud(SyntheticKind::uniform, 4000, 16);
  const PointsView v = view(pts);
  Index index(v, opts());
  const RadiusResult all = index.self_radius({9.0});
  const HybridResult cut = index.hybrid(v, {9.0, 16});
  ASSERT_EQ(cut.counts.size(), static_cast<std::size_t>(all.rows));
  for (std::int64_t q = 0; q < all.rows; ++q) {
    ASSERT_EQ(cut.counts[q], std::min<std::int64_t>(all.count(q), 16)) << "row " << q;
    for (std::int64_t j = 0; j < cut.counts[q]; ++j) {
      ASSERT_EQ(cut.knn.indices[q * 16 + j], all.indices[all.offsets[q] + j]) << "row " << q;
      ASSERT_EQ(cut.knn.sqdist[q * 16 + j], all.sqdist[all.offsets[q] + j]) << "row " << q;
    }
  }
}

TEST_P(IndexBackend, RadiusRowsOfEveryLength) {
  // Rows of every length at once: empty, short, a few hundred, over a thousand. The CUDA backend
  // sorts each band its own way: by a warp, one key a lane up to 32 and two up to 64 (from the
  // collect pass's scratch, or in the fill kernel), 32-bit keys four a lane up to 128 (from the
  // scratch too, or after the fill kernel), a warp merge sort of 8 keys a lane up to 256, a
  // segmented sort above.
  const std::vector<float> pts = make_synthetic_cloud(SyntheticKind::clustered, 5000, 14);
  const PointsView v = view(pts);
  Index index(v, opts());
  const RadiusResult got = index.self_radius({6.0});
  EXPECT_TRUE(same_radius(got, reference_radius(v, nullptr, {6.0})));
  const std::int64_t band_top[] = {32, 64, 128, 256, std::numeric_limits<std::int64_t>::max()};
  int in_band[5] = {0, 0, 0, 0, 0};
  for (std::int64_t q = 0; q < got.rows; ++q)
    ++in_band[std::lower_bound(band_top, band_top + 5, got.count(q)) - band_top];
  for (int b = 0; b < 5; ++b) EXPECT_GT(in_band[b], 0) << "no row of up to " << band_top[b];
  // Hybrid rows of every length: at max_nn 16 the CUDA backend collects each row, cutting the
  // ones that fill up on the way, and sorts them by a warp; at 100 it walks with a heap.
  for (int max_nn : {16, 100})
    EXPECT_TRUE(
        same_hybrid(index.self_hybrid({6.0, max_nn}), reference_hybrid(v, nullptr, {6.0, max_nn})))
        << "max_nn " << max_nn;
}

// Two points whose exact squared distances to the origin round to one float, the later index
// (a) the nearer, behind `nearer` points on the z axis within 1.4 of the origin and before
// `farther` ones on the x axis between 1.6 and 1.95 (beside a and b along the index's curve,
// so that they come in the same cells): the origin is point 0, the axis points 1..nearer, b
// nearer + 1, a nearer + 2, then the farther ones. b comes before a along the curve (a host
// model of the build and the walk, round 28's review), so a row whose sort missed the tie lists b
// first whether it keeps the walk's order or the indices'.
std::vector<float> float_tie_cloud(int nearer, int farther = 0) {
  const float b[3] = {1.1130372285842896f, 1.0055584907531738f, 0.f};
  const float a[3] = {1.0096721649169922f, 1.1093069314956665f, 0.f};
  auto sq = [](const float* p) {
    return double(p[0]) * double(p[0]) + double(p[1]) * double(p[1]) + double(p[2]) * double(p[2]);
  };
  EXPECT_EQ(static_cast<float>(sq(a)), static_cast<float>(sq(b)));
  EXPECT_LT(sq(a), sq(b));
  std::vector<float> pts = {0.f, 0.f, 0.f};
  for (int i = 1; i <= nearer; ++i)
    pts.insert(pts.end(), {0.f, 0.f, 1.4f * static_cast<float>(i) / static_cast<float>(nearer)});
  pts.insert(pts.end(), b, b + 3);
  pts.insert(pts.end(), a, a + 3);
  for (int i = 0; i < farther; ++i)
    pts.insert(pts.end(),
               {1.6f + 0.35f * static_cast<float>(i) / static_cast<float>(farther), 0.f, 0.f});
  return pts;
}

TEST_P(IndexBackend, FloatTiesPastAWarpOfARowAreOrderedExactly) {
  // The exactly nearer of the two tied points must come first. Behind 30 or 31 nearer ones they
  // come 31st and 32nd, or 32nd and 33rd: across the two halves of a row the CUDA backend sorts
  // in a warp, or in its second half, where a tie went unseen once (1 row in 1M). Behind 62, 94
  // and 100 (the tie at entries 63/64, 95/96, 101/102), in rows of 65 to 128, which the CUDA
  // backend sorts by 32-bit keys four a lane, striped (entry i * 32 + lane in a lane's item i: the
  // tie across items 1 and 2, 2 and 3, within item 3), and where those keys tie, as here, by a
  // warp merge sort of 64-bit keys four a lane, blocked (across lanes 15 and 16, 23 and 24, within
  // lane 25). Behind 150, by the merge sort of eight a lane (across lanes 18 and 19); behind 300,
  // by the segmented sort. Each through the one-walk search and through the count and fill passes
  // (forced by max_rows_per_pass).
  for (int nearer : {30, 31, 62, 94, 100, 150, 300}) {
    SCOPED_TRACE(nearer);
    const std::vector<float> pts = float_tie_cloud(nearer);
    const PointsView v = view(pts);
    Index index(v, opts());
    for (std::int64_t passes : {0, 1}) {
      const RadiusResult got = index.self_radius({1.5, false, passes});
      ASSERT_EQ(got.count(0), nearer + 3);
      EXPECT_EQ(got.indices[static_cast<std::size_t>(nearer + 1)], nearer + 2);  // a, then b
      EXPECT_EQ(got.indices[static_cast<std::size_t>(nearer + 2)], nearer + 1);
      EXPECT_TRUE(same_radius(got, reference_radius(v, nullptr, {1.5})));
    }
    test::expect_radius_rows(index, v, nullptr, 1.5);
  }
}

TEST_P(IndexBackend, HybridCutsAFloatTieByTheExactDistance) {
  // max_nn ends a row between the two tied points: it keeps the exactly nearer one (a), though
  // b has the smaller index; one more keeps both, a first. Rows of up to 64 are cut once, at
  // the end (the CUDA backend's collect walk, max_nn <= 32); longer ones also on the way, each
  // time a cell's hits would overflow the 64, keeping every point tied with the cut's last
  // (max_nn + 1 of them here): where that leaves no room for the cell, the heap walk takes the
  // row. max_nn 100 always takes the heap walk.
  for (int nearer : {20, 29, 30}) {
    for (int farther : {0, 40, 300}) {
      SCOPED_TRACE(std::to_string(nearer) + " nearer, " + std::to_string(farther) + " farther");
      const std::vector<float> pts = float_tie_cloud(nearer, farther);
      const PointsView v = view(pts);
      Index index(v, opts());
      for (int max_nn : {nearer + 2, nearer + 3, 100}) {
        SCOPED_TRACE(max_nn);
        const HybridResult got = index.self_hybrid({2.0, max_nn});
        ASSERT_EQ(got.counts[0], std::min(nearer + 3 + farther, max_nn));
        const auto at = [&](int j) { return got.knn.indices[static_cast<std::size_t>(j)]; };
        EXPECT_EQ(at(nearer + 1), nearer + 2);  // a
        if (max_nn > nearer + 2) {
          EXPECT_EQ(at(nearer + 2), nearer + 1);  // then b
        }
        EXPECT_TRUE(same_hybrid(got, reference_hybrid(v, nullptr, {2.0, max_nn})));
      }
    }
  }
}

TEST_P(IndexBackend, ForcedPassesGiveOnePassResults) {
  const std::vector<float> pts = make_synthetic_cloud(SyntheticKind::hotspot, 5000, 15);
  const std::vector<float> qs = make_synthetic_cloud(SyntheticKind::uniform, 3000, 17);
  const PointsView v = view(pts), qv = view(qs);
  Index index(v, opts());
  const KnnResult knn_one = index.self_knn({12, true});
  EXPECT_TRUE(same_knn(knn_one, reference_knn(v, nullptr, {12, true})));
  EXPECT_TRUE(same_knn(index.self_knn({12, true, 1000}), knn_one));
  EXPECT_TRUE(same_knn(index.knn(qv, {5, false, 128}), index.knn(qv, {5})));
  RadiusParams passes{5.0, true};
  passes.max_rows_per_pass = 1000;
  const RadiusResult radius_one = index.self_radius({5.0, true});
  EXPECT_TRUE(same_radius(radius_one, reference_radius(v, nullptr, {5.0, true})));
  EXPECT_TRUE(same_radius(index.self_radius(passes), radius_one));
  HybridParams hp{5.0, 8, true};
  const HybridResult hybrid_one = index.self_hybrid(hp);
  hp.max_rows_per_pass = 256;
  EXPECT_TRUE(same_hybrid(index.self_hybrid(hp), hybrid_one));
}

TEST_P(IndexBackend, TranslationByAMillionDoesNotChangeTheNeighbors) {
  // Georeferenced coordinates in double, re-centered to float: the same cloud near the origin
  // and a million meters away gives the same floats, so the same neighbors.
  const std::vector<float> base = make_synthetic_cloud(SyntheticKind::clustered, 4000, 90);
  std::vector<double> near(base.begin(), base.end()), far(near);
  for (std::size_t i = 0; i < far.size(); ++i) far[i] += 1e6 + 3e5 * double(i % 3);
  const auto n = static_cast<std::int64_t>(base.size() / 3);
  const std::vector<float> a = recenter(near.data(), n, bounding_box_center(near.data(), n));
  const std::vector<float> b = recenter(far.data(), n, bounding_box_center(far.data(), n));
  Index ia(view(a), opts()), ib(view(b), opts());
  const KnnResult ra = ia.self_knn({16, true}), rb = ib.self_knn({16, true});
  EXPECT_EQ(ra.indices, rb.indices);
  EXPECT_TRUE(same_knn(rb, reference_knn(view(b), nullptr, {16, true})));
  EXPECT_EQ(ia.self_radius({2.0}).indices, ib.self_radius({2.0}).indices);
}

TEST_P(IndexBackend, TwoThreadsEachWithItsOwnIndex) {
  struct Work {
    std::vector<float> pts, qs;
    KnnResult self_want, q_want;
    RadiusResult radius_want;
    std::string failure;
  };
  Work w[2];
  w[0].pts = make_synthetic_cloud(SyntheticKind::lidar, 4000, 301);
  w[0].qs = make_synthetic_cloud(SyntheticKind::lidar, 1500, 302);
  w[1].pts = make_synthetic_cloud(SyntheticKind::clustered, 3000, 303);
  w[1].qs = make_synthetic_cloud(SyntheticKind::uniform, 1000, 304);
  for (Work& x : w) {
    const PointsView qv = view(x.qs);
    x.self_want = reference_knn(view(x.pts), nullptr, {8, true});
    x.q_want = reference_knn(view(x.pts), &qv, {5});
    x.radius_want = reference_radius(view(x.pts), nullptr, {1.0});
  }
  const IndexOptions o = opts();
  auto run = [&o](Work& x) {
    try {
      Index index(view(x.pts), o);
      for (int rep = 0; rep < 4 && x.failure.empty(); ++rep) {
        if (rep == 2) index.build(view(x.pts));
        if (auto r = same_knn(index.self_knn({8, true}), x.self_want); !r)
          x.failure = "self_knn: " + std::string(r.message());
        else if (auto r2 = same_knn(index.knn(view(x.qs), {5}), x.q_want); !r2)
          x.failure = "knn: " + std::string(r2.message());
        else if (auto r3 = same_radius(index.self_radius({1.0}), x.radius_want); !r3)
          x.failure = "self_radius: " + std::string(r3.message());
      }
    } catch (const std::exception& e) {
      x.failure = std::string("threw: ") + e.what();
    }
  };
  std::thread t0(run, std::ref(w[0])), t1(run, std::ref(w[1]));
  t0.join();
  t1.join();
  EXPECT_EQ(w[0].failure, "");
  EXPECT_EQ(w[1].failure, "");
}

TEST_P(IndexBackend, MovedIndexWorksAndTheMovedFromOneThrows) {
  const std::vector<float> pts = make_synthetic_cloud(SyntheticKind::lidar, 3000, 95);
  const std::vector<float> other = make_synthetic_cloud(SyntheticKind::uniform, 500, 96);
  const PointsView v = view(pts);
  const KnnResult want = reference_knn(v, nullptr, {6, true});
  Index a(v, opts());
  Index b(std::move(a));
  EXPECT_EQ(b.size(), 3000);
  EXPECT_EQ(b.backend(), GetParam());
  EXPECT_TRUE(same_knn(b.self_knn({6, true}), want));
  // The moved-from index: a clear error, no crash.
  EXPECT_THROW(a.self_knn({6, true}), invalid_argument_error);  // NOLINT(bugprone-use-after-move)
  EXPECT_THROW(a.knn(v, {6}), invalid_argument_error);
  EXPECT_THROW(a.self_radius({1.0}), invalid_argument_error);
  EXPECT_THROW(a.self_hybrid({1.0, 4}), invalid_argument_error);
  EXPECT_THROW(a.build(v), invalid_argument_error);
  EXPECT_EQ(a.size(), 0);
  // Move assignment over an index with points of its own; then back into the moved-from one.
  Index c(view(other), opts());
  c = std::move(b);
  EXPECT_EQ(c.size(), 3000);
  EXPECT_TRUE(same_knn(c.self_knn({6, true}), want));
  a = std::move(c);
  EXPECT_TRUE(same_knn(a.self_knn({6, true}), want));
  a.build(view(other));
  EXPECT_EQ(a.size(), 500);
}

TEST_P(IndexBackend, InvalidArgumentsThrow) {
  const std::vector<float> pts = make_synthetic_cloud(SyntheticKind::uniform, 10, 93);
  const PointsView v = view(pts);
  Index index(v, opts());
  std::vector<std::int32_t> idx(10 * 4);
  std::vector<float> dist(10 * 4);
  const MatrixView<std::int32_t> iv{idx.data(), 10, 4};
  const MatrixView<float> dv{dist.data(), 10, 4};
  // k and max_nn out of 1..kMaxK.
  for (int k : {0, -3, kMaxK + 1}) {
    SCOPED_TRACE("k = " + std::to_string(k));
    EXPECT_THROW(index.self_knn({k}), invalid_argument_error);
    EXPECT_THROW(index.knn(v, {k}), invalid_argument_error);
    EXPECT_THROW(index.self_knn({k}, iv, dv), invalid_argument_error);
    EXPECT_THROW(index.knn_async(v, {k}, iv, dv), invalid_argument_error);
    EXPECT_THROW(index.self_hybrid({1.0, k}), invalid_argument_error);
    EXPECT_THROW(index.hybrid(v, {1.0, k}, iv, dv), invalid_argument_error);
  }
  // Row ranges beyond the index, said without overflowing (the sum of the caller's values).
  try {
    index.self_knn_rows(INT64_MAX, {4}, iv, dv);
    ADD_FAILURE() << "no error";
  } catch (const invalid_argument_error& e) {
    EXPECT_NE(std::string(e.what()).find("10 rows from row 9223372036854775807 do not lie in an "
                                         "index of 10 points"),
              std::string::npos)
        << e.what();
  }
  // Radius negative, NaN or infinite.
  for (double r : {-1.0, -1e-300, std::nan(""), std::numeric_limits<double>::infinity()}) {
    SCOPED_TRACE("radius = " + std::to_string(r));
    std::vector<std::int64_t> off(11);
    EXPECT_THROW(index.self_radius({r}), invalid_argument_error);
    EXPECT_THROW(index.radius(v, {r}), invalid_argument_error);
    EXPECT_THROW(index.self_radius_count({r}, {off.data(), 11}), invalid_argument_error);
    EXPECT_THROW(index.radius_count(v, {r}, {off.data(), 11}), invalid_argument_error);
    EXPECT_THROW(index.self_hybrid({r, 4}), invalid_argument_error);
    EXPECT_THROW(index.hybrid(v, {r, 4}, iv, dv), invalid_argument_error);
  }
  // Outputs of the wrong shape, or null.
  EXPECT_THROW(index.self_knn({4}, {idx.data(), 9, 4}, dv), invalid_argument_error);
  EXPECT_THROW(index.self_knn({4}, iv, {dist.data(), 10, 3}), invalid_argument_error);
  EXPECT_THROW(index.self_knn({3}, iv, dv), invalid_argument_error);
  EXPECT_THROW(index.knn(host_points(pts.data(), 9), {4}, iv, dv), invalid_argument_error);
  EXPECT_THROW(index.self_knn({4}, {nullptr, 10, 4}, dv), invalid_argument_error);
  EXPECT_THROW(index.self_hybrid({1.0, 4}, {idx.data(), 10, 5}, dv), invalid_argument_error);
  std::vector<std::int64_t> off(11);
  EXPECT_THROW(index.self_radius_count({1.0}, {off.data(), 10}), invalid_argument_error);
  EXPECT_THROW(index.self_radius_count({1.0}, {nullptr, 11}), invalid_argument_error);
  const std::int64_t total = index.self_radius_count({30.0}, {off.data(), 11});
  std::vector<std::int32_t> ri(static_cast<std::size_t>(total) + 1);
  std::vector<float> rd(static_cast<std::size_t>(total) + 1);
  EXPECT_THROW(
      index.self_radius_fill({30.0}, {off.data(), 10}, {ri.data(), total}, {rd.data(), total}),
      invalid_argument_error);
  EXPECT_THROW(
      index.self_radius_fill({30.0}, {off.data(), 11}, {ri.data(), total}, {rd.data(), total + 1}),
      invalid_argument_error);
  // Ranges: past the end, a negative first row, outputs of another size than the slice says,
  // and the slice of other rows (its counts are not these rows').
  const std::int64_t tail = off[10] - off[8];
  EXPECT_THROW(index.self_radius_fill_rows(9, {30.0}, {off.data() + 8, 3}, {ri.data(), tail},
                                           {rd.data(), tail}),
               invalid_argument_error);
  EXPECT_THROW(index.self_radius_fill_rows(-1, {30.0}, {off.data(), 3}, {ri.data(), off[2]},
                                           {rd.data(), off[2]}),
               invalid_argument_error);
  EXPECT_THROW(index.self_radius_fill_rows(8, {30.0}, {off.data() + 8, 3}, {ri.data(), tail + 1},
                                           {rd.data(), tail + 1}),
               invalid_argument_error);
  std::vector<std::int64_t> shifted{0, 0, off[10] - off[8]};  // all of rows 8-9 given to row 9
  if (off[9] != off[8]) {
    EXPECT_THROW(index.self_radius_fill_rows(8, {30.0}, {shifted.data(), 3}, {ri.data(), tail},
                                             {rd.data(), tail}),
                 invalid_argument_error);
  }
  EXPECT_THROW(index.self_hybrid_rows(8, {30.0, 4}, {ri.data(), 3, 4}, {rd.data(), 3, 4}),
               invalid_argument_error);
  // exclude_self on a separate query set.
  EXPECT_THROW(index.knn(v, {4, true}), invalid_argument_error);
  EXPECT_THROW(index.knn(v, {4, true}, iv, dv), invalid_argument_error);
  EXPECT_THROW(index.knn_async(v, {4, true}, iv, dv), invalid_argument_error);
  EXPECT_THROW(index.radius(v, {1.0, true}), invalid_argument_error);
  EXPECT_THROW(index.radius_count(v, {1.0, true}, {off.data(), 11}), invalid_argument_error);
  EXPECT_THROW(index.hybrid(v, {1.0, 4, true}), invalid_argument_error);
  // Bad point views: null data with a count, stride below 3, a negative count, both
  // coordinate types at once.
  const double pts64[9] = {};
  PointsView both = host_points(pts.data(), 3);
  both.data64 = pts64;
  for (const PointsView bad :
       {host_points(static_cast<const float*>(nullptr), 10), host_points(pts.data(), 3, 2),
        host_points(pts.data(), 3, 0), host_points(pts.data(), -1),
        host_points(static_cast<const double*>(nullptr), 10), both}) {
    SCOPED_TRACE("count " + std::to_string(bad.count) + " stride " + std::to_string(bad.stride));
    EXPECT_THROW(Index(bad, opts()), invalid_argument_error);
    EXPECT_THROW(index.build(bad), invalid_argument_error);
    EXPECT_THROW(index.knn(bad, {4}), invalid_argument_error);
    EXPECT_THROW(index.radius(bad, {1.0}), invalid_argument_error);
    EXPECT_THROW(index.hybrid(bad, {1.0, 4}), invalid_argument_error);
  }
  // Negative pass sizes and options.
  EXPECT_THROW(index.self_knn({4, false, -1}), invalid_argument_error);
  IndexOptions o = opts();
  o.threads = -1;
  EXPECT_THROW(Index{o}, invalid_argument_error);
  o = opts();
  o.chunk_rows = -1;
  EXPECT_THROW(Index{o}, invalid_argument_error);
  // A failed build keeps the index usable, over its previous points.
  EXPECT_EQ(index.size(), 10);
  EXPECT_TRUE(same_knn(index.self_knn({4, true}), reference_knn(v, nullptr, {4, true})));
}

TEST_P(IndexBackend, RejectedCallsLeaveTheOutputsAlone) {
  const std::vector<float> pts = make_synthetic_cloud(SyntheticKind::uniform, 50, 94);
  Index index(view(pts), opts());
  std::vector<std::int32_t> idx(50 * 4, 77);
  std::vector<float> dist(50 * 4, 7.f);
  EXPECT_THROW(index.self_knn({4}, {idx.data(), 50, 4}, {dist.data(), 49, 4}),
               invalid_argument_error);
  EXPECT_THROW(index.knn(view(pts), {4, true}, {idx.data(), 50, 4}, {dist.data(), 50, 4}),
               invalid_argument_error);
  EXPECT_THROW(index.self_hybrid({-2.0, 4}, {idx.data(), 50, 4}, {dist.data(), 50, 4}),
               invalid_argument_error);
  EXPECT_EQ(idx, std::vector<std::int32_t>(50 * 4, 77));
  EXPECT_EQ(dist, std::vector<float>(50 * 4, 7.f));
}

TEST_P(IndexBackend, TimingsNameTheBackend) {
  const std::vector<float> pts = make_synthetic_cloud(SyntheticKind::uniform, 5000, 92);
  Index index(view(pts), opts());
  EXPECT_EQ(index.last_timings().backend, GetParam());
  index.self_knn({8});
  const SearchTimings t = index.last_timings();
  EXPECT_EQ(t.backend, GetParam());
  EXPECT_GE(t.total_ms, 0.0);
  EXPECT_GE(t.search_ms, 0.f);
  EXPECT_GE(t.passes, 1);
  if (GetParam() == Backend::cuda) {
    EXPECT_NE(t.staging, Staging::automatic);
    EXPECT_GT(t.search_ms, 0.f);
    EXPECT_GT(t.download_bytes, 0);
  }
  index.self_radius({3.0});
  EXPECT_EQ(index.last_timings().backend, GetParam());
}

INSTANTIATE_TEST_SUITE_P(Backends, IndexBackend, ::testing::Values(Backend::cpu, Backend::cuda),
                         backend_param_name);

// ---- the backend choice, names ----

TEST(IndexBackendChoice, AutomaticIsCudaWithADeviceAndCpuWithout) {
  const DeviceInfo dev = query_device();
  Index index;  // Backend::automatic
  EXPECT_EQ(index.options().backend, Backend::automatic);
  EXPECT_EQ(index.backend(), dev.available ? Backend::cuda : Backend::cpu);
  if (!dev.available)
    std::cout << "[ INFO     ] no CUDA device (" << dev.reason
              << "): Backend::automatic resolved to cpu\n";
  const std::vector<float> pts = make_synthetic_cloud(SyntheticKind::clustered, 2000, 97);
  index.build(view(pts));
  EXPECT_TRUE(same_knn(index.self_knn({8, true}), reference_knn(view(pts), nullptr, {8, true})));
}

TEST(IndexBackendChoice, CudaWithoutADeviceThrowsNoDeviceError) {
  const DeviceInfo dev = query_device();
  if (dev.available) GTEST_SKIP() << "a CUDA device is present (" << dev.name << ")";
  EXPECT_THROW(Index{options(Backend::cuda)}, no_device_error);
  const std::vector<float> pts = make_synthetic_cloud(SyntheticKind::uniform, 10, 1);
  EXPECT_THROW(Index(view(pts), options(Backend::cuda)), no_device_error);
}

TEST(IndexNames, ParseAndPrint) {
  for (Backend b : {Backend::automatic, Backend::cuda, Backend::cpu})
    EXPECT_EQ(parse_backend(to_string(b)), b);
  EXPECT_EQ(parse_backend("cpu"), Backend::cpu);
  EXPECT_THROW(parse_backend("gpu"), invalid_argument_error);
  for (Staging s : {Staging::automatic, Staging::pageable, Staging::pinned, Staging::registered,
                    Staging::mapped})
    EXPECT_EQ(parse_staging(to_string(s)), s);
  EXPECT_EQ(parse_staging("registered"), Staging::registered);
  EXPECT_THROW(parse_staging("fast"), invalid_argument_error);
}

// ---- the CPU backend alone: no CUDA call is needed for exact results ----

TEST(CpuOnly, ExactWithAnyThreadCount) {
  std::vector<float> pts = make_synthetic_cloud(SyntheticKind::lidar, 5000, 98);
  test::poison(pts, 0.01, 99);
  const std::vector<float> qs = make_synthetic_cloud(SyntheticKind::lidar, 2000, 100);
  const PointsView v = view(pts), qv = view(qs);
  const KnnResult self_want = reference_knn(v, nullptr, {10, true});
  const KnnResult q_want = reference_knn(v, &qv, {4});
  const RadiusResult r_want = reference_radius(v, &qv, {0.7});
  const HybridResult h_want = reference_hybrid(v, nullptr, {0.7, 6, true});
  for (int threads : {1, 2, 3, 0}) {
    SCOPED_TRACE("threads = " + std::to_string(threads));
    IndexOptions o = options(Backend::cpu);  // explicit: query_device() is never called
    o.threads = threads;
    Index index(v, o);
    EXPECT_EQ(index.backend(), Backend::cpu);
    EXPECT_TRUE(same_knn(index.self_knn({10, true}), self_want));
    EXPECT_TRUE(same_knn(index.knn(qv, {4}), q_want));
    EXPECT_TRUE(same_radius(index.radius(qv, {0.7}), r_want));
    EXPECT_TRUE(same_hybrid(index.self_hybrid({0.7, 6, true}), h_want));
    EXPECT_EQ(index.memory_stats().device_allocations, 0);
    EXPECT_EQ(index.memory_stats().pinned_allocations, 0);
  }
}

TEST(CpuOnly, DeviceViewsAreRejected) {
  // Marked as device memory (the pointers are never read): the CPU backend takes host memory
  // only, and says so before touching anything.
  std::vector<float> pts = make_synthetic_cloud(SyntheticKind::uniform, 10, 101);
  const PointsView dv = device_points(pts.data(), 10);
  EXPECT_THROW(Index(dv, options(Backend::cpu)), invalid_argument_error);
  Index index(view(pts), options(Backend::cpu));
  EXPECT_THROW(index.build(dv), invalid_argument_error);
  EXPECT_EQ(index.size(), 10);
  std::vector<std::int32_t> idx(40);
  std::vector<float> dist(40);
  const MatrixView<std::int32_t> ih{idx.data(), 10, 4};
  const MatrixView<float> fh{dist.data(), 10, 4};
  const MatrixView<std::int32_t> id{idx.data(), 10, 4, Memory::device};
  const MatrixView<float> fd{dist.data(), 10, 4, Memory::device};
  EXPECT_THROW(index.knn(dv, {4}), invalid_argument_error);
  EXPECT_THROW(index.knn(dv, {4}, ih, fh), invalid_argument_error);
  EXPECT_THROW(index.radius(dv, {1.0}), invalid_argument_error);
  EXPECT_THROW(index.hybrid(dv, {1.0, 4}), invalid_argument_error);
  EXPECT_THROW(index.self_knn({4}, id, fd), invalid_argument_error);
  EXPECT_THROW(index.self_knn_async({4}, id, fd), invalid_argument_error);
  EXPECT_THROW(index.self_knn({4}, ih, fd), invalid_argument_error);  // mixed locations
  EXPECT_THROW(index.knn(view(pts), {4}, id, fd), invalid_argument_error);
  EXPECT_THROW(index.self_hybrid({1.0, 4}, id, fd), invalid_argument_error);
  std::vector<std::int64_t> off(11);
  EXPECT_THROW(index.self_radius_count({1.0}, {off.data(), 11, Memory::device}),
               invalid_argument_error);
  const std::int64_t total = index.self_radius_count({30.0}, {off.data(), 11});
  std::vector<std::int32_t> ri(static_cast<std::size_t>(total));
  std::vector<float> rd(static_cast<std::size_t>(total));
  EXPECT_THROW(index.self_radius_fill({30.0}, {off.data(), 11}, {ri.data(), total, Memory::device},
                                      {rd.data(), total, Memory::device}),
               invalid_argument_error);
  EXPECT_THROW(index.self_radius_fill({30.0}, {off.data(), 11, Memory::device}, {ri.data(), total},
                                      {rd.data(), total}),
               invalid_argument_error);
  EXPECT_TRUE(same_knn(index.self_knn({4}), reference_knn(view(pts), nullptr, {4})));
}

}  // namespace
}  // namespace pcnn
