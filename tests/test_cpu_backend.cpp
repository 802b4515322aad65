// The CPU backend through the Backend_ interface, compared entry by entry (exact indices, exact
// float distances) with a brute-force double reference written here.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/backend.hpp"
#include "pcnn/error.hpp"

namespace pcnn {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// The contract's squared distance. Every intermediate goes through a volatile so that no
// compiler flag can fuse a multiply into an add here: if the backend's build contracts, the
// two disagree on ties and near ties.
double ref_sqdist(const float* a, const float* b) {
  volatile double dx = double(a[0]) - double(b[0]);
  volatile double dy = double(a[1]) - double(b[1]);
  volatile double dz = double(a[2]) - double(b[2]);
  volatile double xx = dx * dx;
  volatile double yy = dy * dy;
  volatile double zz = dz * dz;
  volatile double xy = xx + yy;
  return xy + zz;
}

bool finite3(const float* p) {
  return std::isfinite(p[0]) && std::isfinite(p[1]) && std::isfinite(p[2]);
}

struct Cloud {
  std::vector<float> data;  // `stride` floats per point
  std::int64_t stride = 3;
  std::int64_t count() const { return static_cast<std::int64_t>(data.size()) / stride; }
  const float* point(std::int64_t i) const { return data.data() + i * stride; }
  PointsView view() const { return host_points(data.data(), count(), stride); }
};

// Every finite point's (d, index) against query `q`, sorted; `self` excluded (-1: none). d is
// limited to <= limit.
std::vector<std::pair<double, std::int32_t>> reference_row(const Cloud& refs, const float* q,
                                                           std::int64_t self, double limit) {
  std::vector<std::pair<double, std::int32_t>> all;
  if (!finite3(q)) return all;
  for (std::int64_t i = 0; i < refs.count(); ++i) {
    if (i == self || !finite3(refs.point(i))) continue;
    const double d = ref_sqdist(q, refs.point(i));
    if (d <= limit) all.emplace_back(d, static_cast<std::int32_t>(i));
  }
  std::sort(all.begin(), all.end());
  return all;
}

struct Dense {
  std::int64_t rows = 0;
  int k = 0;
  std::vector<std::int32_t> indices;
  std::vector<float> sqdist;
  Dense(std::int64_t r, int kk)
      : rows(r),
        k(kk),
        indices(static_cast<std::size_t>(r * kk), -7),
        sqdist(static_cast<std::size_t>(r * kk), -7.0f) {}
  MatrixView<std::int32_t> iv() { return {indices.data(), rows, k}; }
  MatrixView<float> dv() { return {sqdist.data(), rows, k}; }
};

// Reference dense rows: queries (nullptr: the points themselves, rows [first, first + rows)).
Dense reference_dense(const Cloud& refs, const Cloud* queries, int k, bool exclude_self,
                      double limit = std::numeric_limits<double>::infinity(),
                      std::int64_t first = 0, std::int64_t rows = -1) {
  const Cloud& qs = queries ? *queries : refs;
  if (rows < 0) rows = qs.count() - first;
  Dense out(rows, k);
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t q = first + r;
    const auto all = reference_row(refs, qs.point(q), exclude_self ? q : -1, limit);
    for (int j = 0; j < k; ++j) {
      const bool has = j < static_cast<int>(all.size());
      out.indices[r * k + j] = has ? all[j].second : -1;
      out.sqdist[r * k + j] = has ? static_cast<float>(all[j].first) : kInf;
    }
  }
  return out;
}

RadiusResult reference_radius(const Cloud& refs, const Cloud* queries, double radius,
                              bool exclude_self) {
  const Cloud& qs = queries ? *queries : refs;
  RadiusResult r;
  r.rows = qs.count();
  r.offsets.push_back(0);
  for (std::int64_t q = 0; q < qs.count(); ++q) {
    for (const auto& e : reference_row(refs, qs.point(q), exclude_self ? q : -1, radius * radius)) {
      r.indices.push_back(e.second);
      r.sqdist.push_back(static_cast<float>(e.first));
    }
    r.offsets.push_back(static_cast<std::int64_t>(r.indices.size()));
  }
  return r;
}

// Strict row-by-row comparison; reports the first few differences.
void expect_same(const Dense& want, const Dense& got, const std::string& what) {
  ASSERT_EQ(want.indices.size(), got.indices.size()) << what;
  int reported = 0;
  for (std::int64_t r = 0; r < want.rows; ++r)
    for (int j = 0; j < want.k; ++j) {
      const std::size_t e = static_cast<std::size_t>(r * want.k + j);
      const bool same = want.indices[e] == got.indices[e] &&
                        (want.sqdist[e] == got.sqdist[e] ||
                         (std::isnan(want.sqdist[e]) && std::isnan(got.sqdist[e])));
      if (!same && reported++ < 5)
        ADD_FAILURE() << what << ": row " << r << " column " << j << ": want (" << want.indices[e]
                      << ", " << want.sqdist[e] << ") got (" << got.indices[e] << ", "
                      << got.sqdist[e] << ")";
    }
}

void expect_same(const RadiusResult& want, const RadiusResult& got, const std::string& what) {
  ASSERT_EQ(want.rows, got.rows) << what;
  ASSERT_EQ(want.offsets, got.offsets) << what;
  EXPECT_EQ(want.indices, got.indices) << what;
  EXPECT_EQ(want.sqdist, got.sqdist) << what;
}

std::unique_ptr<Index::Backend_> make(int threads) {
  IndexOptions o;
  o.backend = Backend::cpu;
  o.threads = threads;
  return detail::make_cpu_backend(o);
}

// ---- clouds ----

enum class Shape { uniform, identical, lattice, line, nan_mixed, translated, tiny, clusters };

const char* name(Shape s) {
  switch (s) {
    case Shape::uniform:
      return "uniform";
    case Shape::identical:
      return "identical";
    case Shape::lattice:
      return "lattice";
    case Shape::line:
      return "line";
    case Shape::nan_mixed:
      return "nan_mixed";
    case Shape::translated:
      return "translated";
    case Shape::tiny:
      return "tiny";
    case Shape::clusters:
      return "clusters";
  }
  return "?";
}

Cloud make_cloud(Shape shape, std::int64_t n, std::uint64_t seed, std::int64_t stride = 3) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(0.0f, 10.0f);
  Cloud c;
  c.stride = stride;
  c.data.assign(static_cast<std::size_t>(n * stride), 42.0f);  // padding floats are ignored
  auto set = [&](std::int64_t i, float x, float y, float z) {
    c.data[i * stride] = x;
    c.data[i * stride + 1] = y;
    c.data[i * stride + 2] = z;
  };
  switch (shape) {
    case Shape::uniform:
      for (std::int64_t i = 0; i < n; ++i) set(i, u(rng), u(rng), u(rng));
      break;
    case Shape::identical:
      for (std::int64_t i = 0; i < n; ++i) set(i, 1.25f, -3.5f, 0.1f);
      break;
    case Shape::lattice: {
      // A shuffled integer lattice scaled by 0.1: many exact ties, and near ties from the
      // rounding of 0.1 multiples.
      const std::int64_t side = static_cast<std::int64_t>(std::ceil(std::cbrt(double(n))));
      std::vector<std::int64_t> cell(static_cast<std::size_t>(side * side * side));
      for (std::size_t i = 0; i < cell.size(); ++i) cell[i] = static_cast<std::int64_t>(i);
      std::shuffle(cell.begin(), cell.end(), rng);
      for (std::int64_t i = 0; i < n; ++i) {
        const std::int64_t v = cell[static_cast<std::size_t>(i)];
        set(i, float(v % side) * 0.1f, float((v / side) % side) * 0.1f,
            float(v / (side * side)) * 0.1f);
      }
      break;
    }
    case Shape::line:
      for (std::int64_t i = 0; i < n; ++i) {
        const float t = float(std::uniform_int_distribution<int>(0, 200)(rng)) * 0.05f;
        set(i, t, 2.0f * t, -t);
      }
      break;
    case Shape::nan_mixed:
      for (std::int64_t i = 0; i < n; ++i) {
        set(i, u(rng), u(rng), u(rng));
        const int r = std::uniform_int_distribution<int>(0, 9)(rng);
        if (r == 0) c.data[i * stride + std::uniform_int_distribution<int>(0, 2)(rng)] = kNaN;
        if (r == 1) c.data[i * stride] = (i % 2) ? kInf : -kInf;
      }
      break;
    case Shape::translated:
      // Far from the origin, the floats are coarse (0.0625 apart): ties galore.
      for (std::int64_t i = 0; i < n; ++i)
        set(i, 1e6f + u(rng), -1e6f + u(rng), 1e6f + 0.5f * u(rng));
      break;
    case Shape::tiny:
      // Squares near 1e-40 would underflow float arithmetic; double keeps them.
      for (std::int64_t i = 0; i < n; ++i)
        set(i, u(rng) * 1e-20f, u(rng) * 1e-20f, u(rng) * 1e-20f);
      break;
    case Shape::clusters:
      // Groups of identical points (exact ties at distance 0 and beyond) mixed with noise.
      for (std::int64_t i = 0; i < n; ++i) {
        if (i % 3 == 0) {
          set(i, u(rng), u(rng), u(rng));
        } else {
          const float g = float(std::uniform_int_distribution<int>(0, 20)(rng));
          set(i, g * 0.5f, 1.0f, g * 0.25f);
        }
      }
      break;
  }
  return c;
}

// ---- the parameterized kNN comparison ----

enum class Mode { self, self_exclude, separate };

struct KnnCase {
  Shape shape;
  std::int64_t n;
  Mode mode;
  int k;
  int threads;
};

std::ostream& operator<<(std::ostream& os, const KnnCase& c) {
  return os << name(c.shape) << " n=" << c.n << " "
            << (c.mode == Mode::self           ? "self"
                : c.mode == Mode::self_exclude ? "self_exclude"
                                               : "separate")
            << " k=" << c.k << " threads=" << c.threads;
}

class CpuKnn : public ::testing::TestWithParam<KnnCase> {};

TEST_P(CpuKnn, MatchesBruteForce) {
  const KnnCase c = GetParam();
  const Cloud refs = make_cloud(c.shape, c.n, 1000 + c.n);
  // Separate queries: a cloud of the same kind (ties with the indexed points included) plus a
  // few exact copies of indexed points.
  Cloud queries = make_cloud(c.shape, std::max<std::int64_t>(1, c.n / 2), 77 + c.n);
  for (std::int64_t i = 0; i < std::min<std::int64_t>({c.n, queries.count(), 5}); ++i)
    for (int a = 0; a < 3; ++a) queries.data[i * 3 + a] = refs.point(i * 7 % c.n)[a];
  const bool separate = c.mode == Mode::separate;
  const bool exclude = c.mode == Mode::self_exclude;

  auto backend = make(c.threads);
  SearchTimings t;
  backend->build(refs.view(), nullptr, t);
  EXPECT_EQ(t.backend, Backend::cpu);
  EXPECT_EQ(backend->size(), c.n);
  std::int64_t finite = 0;
  for (std::int64_t i = 0; i < c.n; ++i) finite += finite3(refs.point(i));
  EXPECT_EQ(backend->finite_size(), finite);

  const Dense want = reference_dense(refs, separate ? &queries : nullptr, c.k, exclude);
  Dense got(want.rows, c.k);
  KnnParams p;
  p.k = c.k;
  p.exclude_self = exclude;
  const PointsView qv = queries.view();
  backend->knn(separate ? &qv : nullptr, 0, p, got.iv(), got.dv(), nullptr, true, t);
  EXPECT_EQ(t.backend, Backend::cpu);
  expect_same(want, got, "knn");
}

std::vector<KnnCase> knn_cases() {
  std::vector<KnnCase> cases;
  const Shape shapes[] = {Shape::uniform,   Shape::identical,  Shape::lattice, Shape::line,
                          Shape::nan_mixed, Shape::translated, Shape::tiny,    Shape::clusters};
  for (Shape s : shapes)
    for (Mode m : {Mode::self, Mode::self_exclude, Mode::separate})
      for (int k : {1, 8, 33}) cases.push_back({s, 1500, m, k, 2});
  for (int k : {1, 2, 3, 7, 16, 17, 31, 32, 64, 127, 128})
    cases.push_back({Shape::lattice, 2000, Mode::self_exclude, k, 2});
  for (std::int64_t n : {1, 2, 5, 16, 17, 31, 33, 100})
    for (Mode m : {Mode::self, Mode::self_exclude, Mode::separate})
      cases.push_back({Shape::uniform, n, m, 8, 1});
  cases.push_back({Shape::uniform, 3000, Mode::separate, 128, 1});
  cases.push_back({Shape::identical, 3000, Mode::self_exclude, 128, 2});
  cases.push_back({Shape::nan_mixed, 3000, Mode::self, 20, 3});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Clouds, CpuKnn, ::testing::ValuesIn(knn_cases()));

// ---- radius, count/fill and hybrid ----

struct RadiusCase {
  Shape shape;
  std::int64_t n;
  bool separate;
  bool exclude_self;
  double radius;
  int max_nn;  // hybrid
};

std::ostream& operator<<(std::ostream& os, const RadiusCase& c) {
  return os << name(c.shape) << " n=" << c.n << (c.separate ? " separate" : " self")
            << (c.exclude_self ? " exclude_self" : "") << " radius=" << c.radius
            << " max_nn=" << c.max_nn;
}

class CpuRadius : public ::testing::TestWithParam<RadiusCase> {};

TEST_P(CpuRadius, MatchesBruteForce) {
  const RadiusCase c = GetParam();
  const Cloud refs = make_cloud(c.shape, c.n, 5000 + c.n);
  Cloud queries = make_cloud(c.shape, std::max<std::int64_t>(1, c.n / 3), 99);
  for (std::int64_t i = 0; i < std::min<std::int64_t>({c.n, queries.count(), 5}); ++i)
    for (int a = 0; a < 3; ++a) queries.data[i * 3 + a] = refs.point(i * 11 % c.n)[a];
  const PointsView qv = queries.view();
  const PointsView* qp = c.separate ? &qv : nullptr;
  const Cloud* qc = c.separate ? &queries : nullptr;

  auto backend = make(2);
  SearchTimings t;
  backend->build(refs.view(), nullptr, t);

  RadiusParams rp;
  rp.radius = c.radius;
  rp.exclude_self = c.exclude_self;
  const RadiusResult want = reference_radius(refs, qc, c.radius, c.exclude_self);
  const RadiusResult got = backend->radius(qp, rp, nullptr, t);
  EXPECT_EQ(t.backend, Backend::cpu);
  expect_same(want, got, "radius");

  // Count-then-fill gives the same rows.
  std::vector<std::int64_t> offsets(static_cast<std::size_t>(want.rows) + 1, -5);
  const std::int64_t total =
      backend->radius_count(qp, rp, {offsets.data(), want.rows + 1}, nullptr, t);
  EXPECT_EQ(total, want.offsets.back());
  EXPECT_EQ(offsets, want.offsets);
  RadiusResult filled;
  filled.rows = want.rows;
  filled.offsets = offsets;
  filled.indices.assign(static_cast<std::size_t>(total), -9);
  filled.sqdist.assign(static_cast<std::size_t>(total), -9.0f);
  backend->radius_fill(qp, 0, rp, {offsets.data(), want.rows + 1}, {filled.indices.data(), total},
                       {filled.sqdist.data(), total}, nullptr, t);
  expect_same(want, filled, "radius_count/radius_fill");

  // Hybrid: the max_nn nearest within the radius.
  HybridParams hp;
  hp.radius = c.radius;
  hp.max_nn = c.max_nn;
  hp.exclude_self = c.exclude_self;
  const Dense hwant = reference_dense(refs, qc, c.max_nn, c.exclude_self, c.radius * c.radius);
  Dense hgot(hwant.rows, c.max_nn);
  backend->hybrid(qp, 0, hp, hgot.iv(), hgot.dv(), nullptr, t);
  expect_same(hwant, hgot, "hybrid");
}

std::vector<RadiusCase> radius_cases() {
  std::vector<RadiusCase> cases;
  const Shape shapes[] = {Shape::uniform,   Shape::identical,  Shape::lattice, Shape::line,
                          Shape::nan_mixed, Shape::translated, Shape::tiny,    Shape::clusters};
  for (Shape s : shapes) {
    const double unit = s == Shape::tiny ? 1e-20 : 1.0;
    for (bool separate : {false, true})
      for (double r : {0.0, 0.1, 0.3, 1.0, 2.5})
        cases.push_back({s, 1200, separate, !separate && r > 0.2, r * unit, 8});
  }
  // The radius of the lattice spacing exactly, and past the whole cloud.
  cases.push_back({Shape::lattice, 1000, false, false, double(0.1f), 32});
  cases.push_back({Shape::lattice, 1000, false, true, 0.2, 1});
  cases.push_back({Shape::uniform, 800, false, false, 100.0, 128});
  cases.push_back({Shape::uniform, 800, true, false, 1e30, 5});
  cases.push_back({Shape::identical, 600, false, true, 0.0, 128});
  cases.push_back({Shape::uniform, 1, false, false, 1.0, 4});
  cases.push_back({Shape::uniform, 1, false, true, 1.0, 4});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Clouds, CpuRadius, ::testing::ValuesIn(radius_cases()));

// ---- specific cases ----

TEST(CpuBackend, EmptyIndex) {
  auto backend = make(2);
  SearchTimings t;
  backend->build(PointsView{}, nullptr, t);
  EXPECT_EQ(backend->size(), 0);
  EXPECT_EQ(backend->finite_size(), 0);
  const Cloud queries = make_cloud(Shape::uniform, 10, 1);
  const PointsView qv = queries.view();
  Dense got(10, 3);
  KnnParams p;
  p.k = 3;
  backend->knn(&qv, 0, p, got.iv(), got.dv(), nullptr, true, t);
  for (std::size_t e = 0; e < got.indices.size(); ++e) {
    EXPECT_EQ(got.indices[e], -1);
    EXPECT_EQ(got.sqdist[e], kInf);
  }
  Dense self(0, 3);
  backend->knn(nullptr, 0, p, self.iv(), self.dv(), nullptr, true, t);
  RadiusParams rp;
  rp.radius = 5;
  const RadiusResult r = backend->radius(&qv, rp, nullptr, t);
  EXPECT_EQ(r.rows, 10);
  EXPECT_EQ(r.offsets, std::vector<std::int64_t>(11, 0));
  const RadiusResult rs = backend->radius(nullptr, rp, nullptr, t);
  EXPECT_EQ(rs.rows, 0);
  EXPECT_EQ(rs.offsets, std::vector<std::int64_t>(1, 0));
}

TEST(CpuBackend, OnlyNonFinitePoints) {
  Cloud c;
  c.data = {kNaN, 0, 0, 1, kInf, 2, 0, 0, -kInf};
  auto backend = make(1);
  SearchTimings t;
  backend->build(c.view(), nullptr, t);
  EXPECT_EQ(backend->size(), 3);
  EXPECT_EQ(backend->finite_size(), 0);
  Dense got(3, 2);
  KnnParams p;
  p.k = 2;
  backend->knn(nullptr, 0, p, got.iv(), got.dv(), nullptr, true, t);
  expect_same(reference_dense(c, nullptr, 2, false), got, "knn");
}

TEST(CpuBackend, NonFiniteQueriesGetPaddedRows) {
  const Cloud refs = make_cloud(Shape::uniform, 300, 3);
  Cloud queries;
  queries.data = {1, 2, 3, kNaN, 1, 1, 4, kInf, 4, -kInf, 0, 0, 5, 5, 5};
  auto backend = make(2);
  SearchTimings t;
  backend->build(refs.view(), nullptr, t);
  const PointsView qv = queries.view();
  Dense got(5, 4);
  KnnParams p;
  p.k = 4;
  backend->knn(&qv, 0, p, got.iv(), got.dv(), nullptr, true, t);
  expect_same(reference_dense(refs, &queries, 4, false), got, "knn");
  for (int j = 0; j < 4; ++j) EXPECT_EQ(got.indices[1 * 4 + j], -1);
}

TEST(CpuBackend, StridedPoints) {
  // pcl::PointXYZ-like layout: 4 floats per point, the fourth ignored.
  const Cloud refs = make_cloud(Shape::lattice, 1000, 8, 4);
  const Cloud queries = make_cloud(Shape::uniform, 200, 9, 8);
  auto backend = make(2);
  SearchTimings t;
  backend->build(refs.view(), nullptr, t);
  const PointsView qv = queries.view();
  Dense got(200, 10);
  KnnParams p;
  p.k = 10;
  backend->knn(&qv, 0, p, got.iv(), got.dv(), nullptr, true, t);
  expect_same(reference_dense(refs, &queries, 10, false), got, "knn");
}

TEST(CpuBackend, SelfRowSlices) {
  const Cloud refs = make_cloud(Shape::nan_mixed, 2000, 21);
  auto backend = make(2);
  SearchTimings t;
  backend->build(refs.view(), nullptr, t);
  KnnParams p;
  p.k = 6;
  p.exclude_self = true;
  for (std::int64_t first : {0, 1, 777, 1990})
    for (std::int64_t rows : {0, 1, 10, 300}) {
      if (first + rows > 2000) continue;
      Dense got(rows, 6);
      backend->knn(nullptr, first, p, got.iv(), got.dv(), nullptr, true, t);
      expect_same(reference_dense(refs, nullptr, 6, true, std::numeric_limits<double>::infinity(),
                                  first, rows),
                  got, "rows " + std::to_string(first) + "+" + std::to_string(rows));
    }
}

// Queries are searched in groups by starting leaf: many queries in one leaf (more than a group
// holds), queries far outside the cloud, and queries on the cloud's own points.
TEST(CpuBackend, ClusteredAndFarQueries) {
  const Cloud refs = make_cloud(Shape::lattice, 2500, 51);
  Cloud queries;
  std::mt19937_64 rng(52);
  std::uniform_real_distribution<float> tiny(-0.01f, 0.01f);
  for (int i = 0; i < 3000; ++i) {
    const float base[3] = {0.5f, 0.5f, 0.5f};
    for (int a = 0; a < 3; ++a) queries.data.push_back(i % 3 == 0 ? base[a] : base[a] + tiny(rng));
  }
  for (float far : {1e3f, -1e4f, 3e7f})
    for (int i = 0; i < 40; ++i) {
      queries.data.push_back(far + float(i));
      queries.data.push_back(0.3f);
      queries.data.push_back(-far);
    }
  const std::int64_t m = queries.count();
  auto backend = make(2);
  SearchTimings t;
  backend->build(refs.view(), nullptr, t);
  const PointsView qv = queries.view();
  // Rows for a smaller k are prefixes of the rows for a larger one (the order is total).
  const Dense want40 = reference_dense(refs, &queries, 40, false);
  for (int k : {1, 9, 40}) {
    Dense got(m, k);
    KnnParams p;
    p.k = k;
    backend->knn(&qv, 0, p, got.iv(), got.dv(), nullptr, true, t);
    Dense want(m, k);
    for (std::int64_t r = 0; r < m; ++r)
      for (int j = 0; j < k; ++j) {
        want.indices[r * k + j] = want40.indices[r * 40 + j];
        want.sqdist[r * k + j] = want40.sqdist[r * 40 + j];
      }
    expect_same(want, got, "k=" + std::to_string(k));
  }
  RadiusParams rp;
  rp.radius = 0.15;
  expect_same(reference_radius(refs, &queries, rp.radius, false),
              backend->radius(&qv, rp, nullptr, t), "radius");
}

// Queries off the cloud: a noisy ground plane, and queries in a cube around it (most in the air
// above it or below it, some past its edges), so that many locate to the same leaves, far from
// them; such runs are split into small groups, or searched alone.
TEST(CpuBackend, QueriesOffTheCloud) {
  Cloud refs;
  std::mt19937_64 rng(61);
  std::uniform_real_distribution<float> ground(0.f, 20.f), noise(-0.02f, 0.02f), air(-10.f, 30.f),
      height(-20.f, 20.f);
  for (int i = 0; i < 4000; ++i) {
    refs.data.push_back(ground(rng));
    refs.data.push_back(ground(rng));
    refs.data.push_back(noise(rng));
  }
  Cloud queries;
  for (int i = 0; i < 2500; ++i) {
    queries.data.push_back(air(rng));
    queries.data.push_back(air(rng));
    queries.data.push_back(height(rng));
  }
  auto backend = make(2);
  SearchTimings t;
  backend->build(refs.view(), nullptr, t);
  const PointsView qv = queries.view();
  for (int k : {1, 8, 33}) {
    Dense got(queries.count(), k);
    KnnParams p;
    p.k = k;
    backend->knn(&qv, 0, p, got.iv(), got.dv(), nullptr, true, t);
    expect_same(reference_dense(refs, &queries, k, false), got, "k=" + std::to_string(k));
  }
  RadiusParams rp;
  rp.radius = 6.0;
  expect_same(reference_radius(refs, &queries, rp.radius, false),
              backend->radius(&qv, rp, nullptr, t), "radius");
}

TEST(CpuBackend, ThreadCountDoesNotChangeResults) {
  const Cloud refs = make_cloud(Shape::lattice, 3000, 31);
  const Cloud queries = make_cloud(Shape::lattice, 5000, 32);  // enough to be ordered by leaf
  const PointsView qv = queries.view();
  std::vector<Dense> results;
  std::vector<RadiusResult> radii;
  for (int threads : {1, 2, 3, 8}) {
    auto backend = make(threads);
    SearchTimings t;
    backend->build(refs.view(), nullptr, t);
    KnnParams p;
    p.k = 12;
    results.emplace_back(5000, 12);
    backend->knn(&qv, 0, p, results.back().iv(), results.back().dv(), nullptr, true, t);
    RadiusParams rp;
    rp.radius = 0.25;
    rp.exclude_self = true;
    radii.push_back(backend->radius(nullptr, rp, nullptr, t));
  }
  expect_same(reference_dense(refs, &queries, 12, false), results[0], "threads 1");
  for (std::size_t i = 1; i < results.size(); ++i) {
    EXPECT_EQ(results[0].indices, results[i].indices);
    EXPECT_EQ(results[0].sqdist, results[i].sqdist);
    expect_same(radii[0], radii[i], "radius");
  }
}

TEST(CpuBackend, RebuildReplacesPoints) {
  auto backend = make(2);
  SearchTimings t;
  for (std::int64_t n : {500, 2000, 100, 100}) {
    const Cloud refs = make_cloud(Shape::clusters, n, 40 + n);
    backend->build(refs.view(), nullptr, t);
    EXPECT_EQ(t.backend, Backend::cpu);
    EXPECT_GE(t.build_ms, 0.0f);
    EXPECT_EQ(backend->size(), n);
    Dense got(n, 5);
    KnnParams p;
    p.k = 5;
    backend->knn(nullptr, 0, p, got.iv(), got.dv(), nullptr, true, t);
    expect_same(reference_dense(refs, nullptr, 5, false), got, "n=" + std::to_string(n));
  }
}

// Identical points: every distance ties, so the rows are the smallest indices. Tie-aware
// pruning must keep this near-linear; a quadratic search would take minutes here.
TEST(CpuBackend, ManyIdenticalPointsAreFast) {
  const std::int64_t n = 100000;
  const Cloud refs = make_cloud(Shape::identical, n, 0);
  auto backend = make(0);
  SearchTimings t;
  const auto t0 = std::chrono::steady_clock::now();
  backend->build(refs.view(), nullptr, t);
  Dense got(n, 8);
  KnnParams p;
  p.k = 8;
  p.exclude_self = true;
  backend->knn(nullptr, 0, p, got.iv(), got.dv(), nullptr, true, t);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, 20.0);
  for (std::int64_t q = 0; q < n; ++q) {
    int want = 0;
    for (int j = 0; j < 8; ++j, ++want) {
      if (want == q) ++want;
      ASSERT_EQ(got.indices[q * 8 + j], want) << "row " << q;
      ASSERT_EQ(got.sqdist[q * 8 + j], 0.0f);
    }
  }
  // Hybrid with radius 0 finds the same.
  HybridParams hp;
  hp.radius = 0;
  hp.max_nn = 8;
  hp.exclude_self = true;
  Dense hybrid(n, 8);
  backend->hybrid(nullptr, 0, hp, hybrid.iv(), hybrid.dv(), nullptr, t);
  EXPECT_EQ(hybrid.indices, got.indices);
}

TEST(CpuBackend, InvalidArguments) {
  IndexOptions o;
  o.threads = -1;
  EXPECT_THROW(detail::make_cpu_backend(o), invalid_argument_error);

  auto backend = make(2);
  SearchTimings t;
  const Cloud refs = make_cloud(Shape::uniform, 100, 1);
  PointsView device = refs.view();
  device.memory = Memory::device;
  EXPECT_THROW(backend->build(device, nullptr, t), invalid_argument_error);
  backend->build(refs.view(), nullptr, t);

  // Offsets that do not belong to these parameters are refused, not trusted.
  RadiusParams rp;
  rp.radius = 1.0;
  std::vector<std::int64_t> offsets(101, 0);
  const std::int64_t total = backend->radius_count(nullptr, rp, {offsets.data(), 101}, nullptr, t);
  ASSERT_GT(total, 0);
  std::vector<std::int32_t> idx(static_cast<std::size_t>(total));
  std::vector<float> d2(static_cast<std::size_t>(total));
  rp.radius = 2.0;
  EXPECT_THROW(backend->radius_fill(nullptr, 0, rp, {offsets.data(), 101}, {idx.data(), total},
                                    {d2.data(), total}, nullptr, t),
               invalid_argument_error);
}

}  // namespace
}  // namespace pcnn
