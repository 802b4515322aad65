// pcnn::Index with float64 coordinates (PointsView::data64) on both backends: indexed points and
// queries of either type in any combination, every search compared strictly (the smallest-index
// rule) with the exact double references. The clouds are chosen so that rounding them to float
// changes the answers (shown first, so that these tests can fail): georeferenced coordinates with
// sub-millimeter spacing, exact ties on lattices that only double holds, near-ties closer than a
// float ulp, magnitudes beyond float's range (1e150, 1e-150, 1e-200), NaN and infinity mixed in.
// The CPU backend always runs; the CUDA cases skip, saying why, without a device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "gpu_test.hpp"
#include "index_test_util.hpp"
#include "pcnn/error.hpp"
#include "pcnn/index.hpp"
#include "pcnn/testing/reference.hpp"

namespace pcnn {
namespace {

using test::options;
using test::same_hybrid;
using test::same_knn;
using test::same_radius;

// ---- clouds in double ----

enum class Kind {
  utm,        // clusters of points 0.1 mm apart, spread over 100 m near (2.5e6, 5.4e6, 1e3)
  lattice,    // a shuffled lattice of spacing 0.25 near (1e7, 2e6, 3e5): exact ties, in double only
  sub_ulp,    // an integer lattice moved by up to 1e-9: near-ties 100x closer than a float ulp
  clustered,  // the synthetic clustered cloud, moved off the float grid by sub-ulp amounts
  huge,       // uniform scaled by 1e150: beyond float's range, squares still finite in double
  big,        // uniform scaled by 1e30: float coordinates, squares overflow float
  tiny,       // uniform scaled by 1e-150: beyond float's range, squares still normal in double
  vanishing,  // uniform scaled by 1e-200: squares underflow double too (ties at 0, by index)
  overflow,   // uniform scaled by 1e200: squares overflow double (every distance +inf, by index)
};

const char* name(Kind k) {
  switch (k) {
    case Kind::utm:
      return "utm";
    case Kind::lattice:
      return "lattice";
    case Kind::sub_ulp:
      return "sub_ulp";
    case Kind::clustered:
      return "clustered";
    case Kind::huge:
      return "huge";
    case Kind::big:
      return "big";
    case Kind::tiny:
      return "tiny";
    case Kind::vanishing:
      return "vanishing";
    case Kind::overflow:
      return "overflow";
  }
  return "?";
}

std::vector<double> lattice(int n, double spacing, const double origin[3], std::uint64_t seed) {
  const int m = std::max(1, static_cast<int>(std::lround(std::cbrt(n))));
  std::vector<double> xyz;
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < m; ++j)
      for (int l = 0; l < m; ++l)
        for (double c : {double(l), double(j), double(i)}) xyz.push_back(c);
  for (std::size_t i = 0; i < xyz.size(); ++i) xyz[i] = origin[i % 3] + xyz[i] * spacing;
  test::shuffle_points(xyz, seed);
  return xyz;
}

/// About `n` points of kind `kind` (lattices are rounded to a cube).
std::vector<double> make(Kind kind, int n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  switch (kind) {
    case Kind::utm: {
      // Random doubles (full mantissas): 0.1 mm apart within a cluster, 100 m across the cloud,
      // so that re-centered coordinates need ~36 bits and no float offset represents them.
      const double origin[3] = {2.5e6, 5.4e6, 1.0e3};
      std::vector<double> xyz;
      double center[3] = {};
      for (int i = 0; i < n; ++i) {
        if (i % 32 == 0)
          for (int a = 0; a < 3; ++a) center[a] = origin[a] + 50.0 * u(rng) * (a == 2 ? 0.2 : 1);
        for (int a = 0; a < 3; ++a) xyz.push_back(center[a] + 2e-4 * u(rng));
      }
      return xyz;
    }
    case Kind::lattice: {
      const double origin[3] = {1e7, 2e6, 3e5};
      return lattice(n, 0.25, origin, seed);
    }
    case Kind::sub_ulp: {
      const double origin[3] = {0, 0, 0};
      std::vector<double> xyz = lattice(n, 1.0, origin, seed);
      for (double& c : xyz) c += 1e-9 * u(rng);
      return xyz;
    }
    case Kind::clustered:
    case Kind::huge:
    case Kind::big:
    case Kind::tiny:
    case Kind::vanishing:
    case Kind::overflow: {
      const bool moved = kind == Kind::clustered;
      const std::vector<float> f =
          make_synthetic_cloud(moved ? SyntheticKind::clustered : SyntheticKind::uniform, n, seed);
      const double scale = kind == Kind::huge        ? 1e150
                           : kind == Kind::big       ? 1e30
                           : kind == Kind::tiny      ? 1e-150
                           : kind == Kind::vanishing ? 1e-200
                           : kind == Kind::overflow  ? 1e200
                                                     : 1.0;
      std::vector<double> xyz(f.size());
      for (std::size_t i = 0; i < f.size(); ++i)
        xyz[i] = double(f[i]) * scale + (moved ? 1e-9 * u(rng) : 0.0);
      return xyz;
    }
  }
  return {};
}

std::vector<float> to_float(const std::vector<double>& xyz) {
  return std::vector<float>(xyz.begin(), xyz.end());
}

/// A cloud held in the type a case asks for.
struct Cloud {
  bool is_double = true;
  std::vector<double> d;
  std::vector<float> f;
  Cloud() = default;
  Cloud(std::vector<double> xyz, bool as_double) : is_double(as_double) {
    if (as_double)
      d = std::move(xyz);
    else
      f = to_float(xyz);
  }
  PointsView view() const {
    return is_double ? host_points(d.data(), static_cast<std::int64_t>(d.size() / 3))
                     : host_points(f.data(), static_cast<std::int64_t>(f.size() / 3));
  }
};

// ---- the rounding to float would change the answers ----

// Rows of `a` and `b` whose indices differ.
std::int64_t rows_differing(const KnnResult& a, const KnnResult& b) {
  std::int64_t n = 0;
  for (std::int64_t q = 0; q < a.rows; ++q)
    n += !std::equal(a.indices.begin() + q * a.k, a.indices.begin() + (q + 1) * a.k,
                     b.indices.begin() + q * b.k);
  return n;
}

TEST(Float64Clouds, RoundingThemToFloatChangesTheAnswers) {
  // The references on the clouds as given and on the clouds rounded to float (and, for the
  // georeferenced one, re-centered at its mean first, as pcnn's loader once did): if these
  // agreed, the tests below could not tell a float search from an exact one. (The clustered
  // cloud is moved off the float grid only so that its mixed-type cases pass doubles that are
  // no floats; its neighbors are rarely that close.)
  for (Kind kind : {Kind::utm, Kind::lattice, Kind::sub_ulp, Kind::tiny}) {
    SCOPED_TRACE(name(kind));
    const std::vector<double> d = make(kind, 3000, 7);
    const std::vector<float> f = to_float(d);
    const Cloud exact(d, true), rounded(d, false);
    const KnnResult want = reference_knn(exact.view(), nullptr, {8, true});
    const KnnResult as_float = reference_knn(rounded.view(), nullptr, {8, true});
    EXPECT_GT(rows_differing(want, as_float), 0);
    if (kind == Kind::utm) {
      double mean[3] = {};
      const std::size_t n = d.size() / 3;
      for (std::size_t i = 0; i < d.size(); ++i) mean[i % 3] += d[i] / double(n);
      std::vector<double> local(d);
      for (std::size_t i = 0; i < local.size(); ++i) local[i] -= mean[i % 3];
      const Cloud recentered(local, false);
      const std::int64_t differ =
          rows_differing(want, reference_knn(recentered.view(), nullptr, {8, true}));
      EXPECT_GT(differ, 0) << "re-centered, then rounded to float";
      std::cout << "[ info     ] utm: " << rows_differing(want, as_float) << " of " << want.rows
                << " rows differ rounded to float, " << differ << " re-centered first\n";
    }
  }
}

TEST(Float64Clouds, TheReferenceReadsFloat64AsGiven) {
  // Float coordinates widened to double are the same coordinates: the same rows. Doubles that
  // are no floats give other rows (above), so the reference does read the doubles.
  std::vector<float> f = make_synthetic_cloud(SyntheticKind::clustered, 2000, 3);
  test::poison(f, 0.05, 4);
  const std::vector<double> d(f.begin(), f.end());
  const PointsView fv = host_points(f.data(), 2000), dv = host_points(d.data(), 2000);
  const PointsView fq = fv.slice(100, 300), dq = dv.slice(100, 300);
  const KnnResult want = reference_knn(fv, nullptr, {9, true});
  EXPECT_TRUE(same_knn(reference_knn(dv, nullptr, {9, true}), want));
  EXPECT_TRUE(same_knn(reference_knn(fv, &dq, {5}), reference_knn(dv, &fq, {5})));
  EXPECT_TRUE(
      same_radius(reference_radius(dv, nullptr, {1.5}), reference_radius(fv, nullptr, {1.5})));
  EXPECT_TRUE(
      same_hybrid(reference_hybrid(dv, &fq, {1.5, 7}), reference_hybrid(fv, &dq, {1.5, 7})));
}

// ---- every search against the references, on both backends ----

constexpr int kSelf = -1;

struct Case {
  Backend backend;
  Kind kind;
  int n;
  bool refs_double;
  int queries;  // kSelf: self-searches
  Kind query_kind;
  bool queries_double;
  int k;
  double radius;
  double bad_fraction;
  std::uint64_t seed;
  bool self() const { return queries == kSelf; }
};

std::ostream& operator<<(std::ostream& os, const Case& c) {
  os << to_string(c.backend) << " " << name(c.kind) << (c.refs_double ? " f64" : " f32")
     << " n=" << c.n;
  if (!c.self())
    os << " queries=" << name(c.query_kind) << (c.queries_double ? " f64" : " f32") << ":"
       << c.queries;
  os << " k=" << c.k << " r=" << c.radius;
  if (c.bad_fraction > 0) os << " non-finite=" << c.bad_fraction;
  return os << " seed=" << c.seed;
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  std::string s = std::string(to_string(c.backend)) + "_" + name(c.kind) +
                  (c.refs_double ? "64" : "32") + "_n" + std::to_string(c.n);
  if (!c.self())
    s += std::string("_q") + name(c.query_kind) + (c.queries_double ? "64" : "32") +
         std::to_string(c.queries);
  s += "_k" + std::to_string(c.k);
  if (c.bad_fraction > 0) s += "_nonfinite";
  return s + "_seed" + std::to_string(c.seed);
}

std::vector<Case> cases() {
  std::vector<Case> v;
  auto self = [&](Kind kind, int n, int k, double r, double bad, std::uint64_t seed) {
    v.push_back({Backend::cpu, kind, n, true, kSelf, kind, true, k, r, bad, seed});
  };
  auto queries = [&](Kind kind, int n, bool refs_double, int m, Kind qkind, bool q_double, int k,
                     double r, double bad, std::uint64_t seed) {
    v.push_back({Backend::cpu, kind, n, refs_double, m, qkind, q_double, k, r, bad, seed});
  };
  // Self-searches of float64 clouds.
  self(Kind::utm, 4000, 8, 1e-4, 0, 10);
  self(Kind::utm, 3000, 31, 2e-4, 0.05, 11);
  self(Kind::lattice, 1728, 19, 0.25, 0, 12);  // 6 at 0.25, 12 at 0.25 sqrt 2, ...: exact ties
  self(Kind::lattice, 4096, 27, 0.5, 0.1, 13);
  self(Kind::sub_ulp, 1728, 19, 1.0, 0, 14);
  self(Kind::sub_ulp, 1000, 7, 1.4142135, 0, 15);
  self(Kind::clustered, 3000, 16, 1.5, 0.05, 16);
  self(Kind::huge, 3000, 8, 9e150, 0, 17);
  self(Kind::big, 2000, 8, 9e30, 0, 18);
  self(Kind::tiny, 3000, 8, 9e-150, 0, 19);
  self(Kind::vanishing, 500, 8, 1e-200, 0, 20);
  self(Kind::overflow, 500, 8, 1e201, 0.05, 24);  // r² = +inf: every finite point is in
  self(Kind::utm, 1, 4, 1.0, 0, 21);
  self(Kind::utm, 0, 4, 1.0, 0, 22);
  self(Kind::utm, 40, 64, 1.0, 0.5, 23);
  // Separate queries, each type against each.
  queries(Kind::utm, 4000, true, 1500, Kind::utm, true, 12, 1e-4, 0, 30);
  queries(Kind::utm, 4000, true, 1500, Kind::utm, false, 12, 0.3, 0, 31);  // float queries
  queries(Kind::utm, 4000, false, 1500, Kind::utm, true, 12, 0.3, 0, 32);  // float points
  queries(Kind::sub_ulp, 1728, true, 1000, Kind::sub_ulp, false, 9, 1.0, 0, 33);
  queries(Kind::sub_ulp, 1728, false, 1000, Kind::sub_ulp, true, 9, 1.0, 0, 34);
  queries(Kind::clustered, 3000, false, 2000, Kind::clustered, true, 16, 2.0, 0.1, 35);
  queries(Kind::clustered, 3000, true, 2000, Kind::clustered, false, 16, 2.0, 0.1, 36);
  queries(Kind::lattice, 1000, true, 1000, Kind::lattice, true, 9, 0.25, 0.1, 37);
  queries(Kind::tiny, 2000, true, 500, Kind::tiny, true, 8, 9e-150, 0, 38);
  queries(Kind::huge, 2000, true, 500, Kind::huge, true, 8, 9e150, 0, 39);
  queries(Kind::utm, 0, true, 50, Kind::utm, true, 3, 1.0, 0, 40);  // nothing indexed
  // Every case on the CUDA backend too.
  for (std::size_t i = 0, n = v.size(); i < n; ++i) {
    v.push_back(v[i]);
    v.back().backend = Backend::cuda;
  }
  return v;
}

struct Clouds {
  Cloud refs, queries;
};

Clouds make_clouds(const Case& c) {
  std::vector<double> r = make(c.kind, c.n, c.seed);
  std::vector<double> q;
  if (!c.self()) q = make(c.query_kind, c.queries, c.seed + 1);
  if (c.bad_fraction > 0) {
    test::poison(r, c.bad_fraction, c.seed + 2);
    test::poison(q, c.bad_fraction, c.seed + 3);
  }
  return {Cloud(std::move(r), c.refs_double), Cloud(std::move(q), c.queries_double)};
}

class Float64Search : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    if (GetParam().backend == Backend::cuda) PCNN_REQUIRE_DEVICE();
  }
};

TEST_P(Float64Search, KnnRowsEqualTheReference) {
  const Case c = GetParam();
  const Clouds cl = make_clouds(c);
  const PointsView rv = cl.refs.view(), qv = cl.queries.view();
  Index index(rv, options(c.backend));
  EXPECT_EQ(index.size(), rv.count);
  EXPECT_EQ(index.finite_size(), test::count_finite(rv));
  test::expect_knn_rows(index, rv, c.self() ? nullptr : &qv, c.k);
}

TEST_P(Float64Search, RadiusRowsEqualTheReference) {
  const Case c = GetParam();
  const Clouds cl = make_clouds(c);
  const PointsView rv = cl.refs.view(), qv = cl.queries.view();
  Index index(rv, options(c.backend));
  test::expect_radius_rows(index, rv, c.self() ? nullptr : &qv, c.radius);
}

TEST_P(Float64Search, HybridRowsEqualTheReference) {
  const Case c = GetParam();
  const Clouds cl = make_clouds(c);
  const PointsView rv = cl.refs.view(), qv = cl.queries.view();
  Index index(rv, options(c.backend));
  test::expect_hybrid_rows(index, rv, c.self() ? nullptr : &qv, c.radius, c.k);
}

INSTANTIATE_TEST_SUITE_P(Cases, Float64Search, ::testing::ValuesIn(cases()), case_name);

// ---- behavior on each backend ----

class Float64Backend : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
    if (GetParam() == Backend::cuda) PCNN_REQUIRE_DEVICE();
  }
  IndexOptions opts() const { return options(GetParam()); }
};

TEST_P(Float64Backend, StridedPointsGiveThePackedResults) {
  const std::vector<double> packed = make(Kind::utm, 3000, 50);
  std::vector<double> strided;
  for (std::size_t i = 0; i < packed.size(); i += 3)
    strided.insert(strided.end(), {packed[i], packed[i + 1], packed[i + 2], -1e300, 7.0});
  const PointsView pv = host_points(packed.data(), 3000), sv = host_points(strided.data(), 3000, 5);
  Index ip(pv, opts()), is(sv, opts());
  const KnnResult want = reference_knn(pv, nullptr, {10, true});
  EXPECT_TRUE(same_knn(is.self_knn({10, true}), want));
  const PointsView q = sv.slice(2000, 1000);
  EXPECT_TRUE(same_knn(ip.knn(q, {6}), reference_knn(pv, &q, {6})));
  EXPECT_TRUE(same_radius(is.self_radius({1e-4}), reference_radius(pv, nullptr, {1e-4})));
}

TEST_P(Float64Backend, RebuildSwitchesTheCoordinateType) {
  // float, then double, then float again: each build searches its own points as given.
  const std::vector<double> d = make(Kind::sub_ulp, 1000, 60);
  const std::vector<float> f = to_float(d);
  const PointsView dv = host_points(d.data(), 1000), fv = host_points(f.data(), 1000);
  Index index(fv, opts());
  const KnnResult want_f = reference_knn(fv, nullptr, {9, true});
  const KnnResult want_d = reference_knn(dv, nullptr, {9, true});
  ASSERT_GT(rows_differing(want_f, want_d), 0);
  EXPECT_TRUE(same_knn(index.self_knn({9, true}), want_f));
  index.build(dv);
  EXPECT_TRUE(same_knn(index.self_knn({9, true}), want_d));
  EXPECT_TRUE(same_knn(index.knn(fv, {9}), reference_knn(dv, &fv, {9})));
  index.build(fv);
  EXPECT_TRUE(same_knn(index.self_knn({9, true}), want_f));
  EXPECT_TRUE(same_knn(index.knn(dv, {9}), reference_knn(fv, &dv, {9})));
}

TEST_P(Float64Backend, SquaresOverflowingDoubleTieAtInfinityByIndex) {
  // Points near 1e300 on a line: every squared distance from the origin overflows double, so the
  // reference ranks them all at +inf by index (0, 1, 2, ...), while their float filter distances
  // differ (point j lies farther the smaller j is). A search that trusts its float order keeps
  // the far end of the line. k = 32 fills the list from one cell; k = 1 goes through the outlier
  // search (one query far from 31 others sitting on points).
  const int n = 100;
  std::vector<double> d;
  for (int j = 0; j < n; ++j) d.insert(d.end(), {1e300 * (1 + (n - 1 - j) / 1000.0), 0.0, 0.0});
  const PointsView dv = host_points(d.data(), n);
  Index index(dv, opts());
  const std::vector<double> origin = {0.0, 0.0, 0.0};
  const PointsView ov = host_points(origin.data(), 1);
  const KnnResult want32 = reference_knn(dv, &ov, {32});
  ASSERT_EQ(want32.indices[31], 31);  // the reference's tie rule at +inf
  EXPECT_TRUE(same_knn(index.knn(ov, {32}), want32));
  std::vector<double> q;
  for (int j = 0; j < 31; ++j) q.insert(q.end(), {d[3 * j], 0.0, 0.0});
  q.insert(q.end(), {0.0, 0.0, 0.0});
  const PointsView qv = host_points(q.data(), 32);
  EXPECT_TRUE(same_knn(index.knn(qv, {1}), reference_knn(dv, &qv, {1})));
}

INSTANTIATE_TEST_SUITE_P(Backends, Float64Backend, ::testing::Values(Backend::cpu, Backend::cuda),
                         [](const ::testing::TestParamInfo<Backend>& info) {
                           return std::string(to_string(info.param));
                         });

// ---- the CPU backend alone ----

TEST(Float64CpuOnly, ExactWithAnyThreadCount) {
  std::vector<double> pts = make(Kind::utm, 5000, 70);
  test::poison(pts, 0.01, 71);
  const std::vector<double> qs = make(Kind::utm, 2000, 72);
  const PointsView v = host_points(pts.data(), 5000), qv = host_points(qs.data(), 2000);
  const KnnResult self_want = reference_knn(v, nullptr, {10, true});
  const KnnResult q_want = reference_knn(v, &qv, {4});
  const RadiusResult r_want = reference_radius(v, &qv, {3e-4});
  for (int threads : {1, 3}) {
    SCOPED_TRACE("threads = " + std::to_string(threads));
    IndexOptions o = options(Backend::cpu);
    o.threads = threads;
    Index index(v, o);
    EXPECT_TRUE(same_knn(index.self_knn({10, true}), self_want));
    EXPECT_TRUE(same_knn(index.knn(qv, {4}), q_want));
    EXPECT_TRUE(same_radius(index.radius(qv, {3e-4}), r_want));
  }
}

}  // namespace
}  // namespace pcnn
