// The partitioned index (several parts, tiles) against one pcnn::Index over the whole cloud:
// byte-identical rows on adversarial clouds — duplicates cut across parts, lattices full of exact
// ties, identical points, non-finite points, k larger than the cloud, far outliers — and against
// the exact double-precision reference.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "dist/part.hpp"
#include "gpu_test.hpp"
#include "pcnn/distributed.hpp"
#include "pcnn/error.hpp"
#include "pcnn/index.hpp"
#include "pcnn/memory.hpp"
#include "pcnn/testing/reference.hpp"
#include "pcnn/testing/synthetic.hpp"
#include "test_clouds.hpp"

namespace pcnn {
namespace {

enum class Cloud { uniform, duplicates, lattice, identical, poisoned, outliers, plane, tiny };

std::vector<float> make_cloud(Cloud c, int n, std::uint64_t seed) {
  switch (c) {
    case Cloud::uniform:
      return make_synthetic_cloud(SyntheticKind::uniform, n, seed);
    case Cloud::duplicates:
      return test::duplicates(n / 8, 8, seed);
    case Cloud::lattice:
      return test::lattice(static_cast<int>(std::cbrt(double(n)) + 0.5));
    case Cloud::identical: {
      std::vector<float> xyz;
      for (int i = 0; i < n; ++i) xyz.insert(xyz.end(), {1.5f, -2.25f, 3.0f});
      return xyz;
    }
    case Cloud::poisoned: {
      auto xyz = make_synthetic_cloud(SyntheticKind::clustered, n, seed);
      test::poison(xyz, 0.05, seed);
      return xyz;
    }
    case Cloud::outliers:
      return test::with_outliers(n, seed);
    case Cloud::plane:
      return test::plane(n, seed);
    case Cloud::tiny:
      return make_synthetic_cloud(SyntheticKind::uniform, 5, seed);
  }
  return {};
}

const char* name(Cloud c) {
  static const char* names[] = {"uniform",  "duplicates", "lattice", "identical",
                                "poisoned", "outliers",   "plane",   "tiny"};
  return names[static_cast<int>(c)];
}

struct Case {
  Cloud cloud;
  int n;
  int k;
  int parts;
  bool tiles;  // parts searched one after the other (larger than a device)
  bool exclude_self;
  bool queries;  // a separate query set (shifted, with points outside the box)
};

std::ostream& operator<<(std::ostream& os, const Case& c) {
  return os << name(c.cloud) << " n=" << c.n << " k=" << c.k << " parts=" << c.parts
            << (c.tiles ? " tiles" : "") << (c.exclude_self ? " exclude_self" : "")
            << (c.queries ? " queries" : "");
}

// Rows must be equal byte for byte: indices and the float bits of the distances.
void expect_identical(const KnnResult& a, const KnnResult& b, const char* what) {
  ASSERT_EQ(a.rows, b.rows);
  ASSERT_EQ(a.k, b.k);
  for (std::int64_t r = 0; r < a.rows; ++r) {
    const std::size_t o = static_cast<std::size_t>(r) * a.k;
    const bool same_idx =
        std::memcmp(&a.indices[o], &b.indices[o], a.k * sizeof(std::int32_t)) == 0;
    const bool same_d = std::memcmp(&a.sqdist[o], &b.sqdist[o], a.k * sizeof(float)) == 0;
    if (!same_idx || !same_d) {
      std::string row;
      for (int j = 0; j < a.k; ++j)
        row += " (" + std::to_string(a.indices[o + j]) + " " + std::to_string(a.sqdist[o + j]) +
               " | " + std::to_string(b.indices[o + j]) + " " + std::to_string(b.sqdist[o + j]) +
               ")";
      FAIL() << what << ": row " << r << " differs:" << row;
    }
  }
}

// Whether replicas on `devices` can cut a self-search along their order: memory pools on every
// device, and every device able to reach every other's memory.
bool cut_possible(const std::vector<int>& devices) {
  if (devices.size() < 2 || devices.size() > 8) return false;
  for (const int d : devices) {
    int pools = 0;
    if (cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, d) != cudaSuccess || !pools)
      return false;
    for (const int e : devices) {
      int can = 1;
      if (d != e && (cudaDeviceCanAccessPeer(&can, e, d) != cudaSuccess || !can)) return false;
    }
  }
  return true;
}

class PartitionedKnn : public ::testing::TestWithParam<Case> {};

// Spatial parts; on CUDA, untiled, also replicas of the whole cloud sharing out the rows.
std::vector<Layout> layouts(Backend backend, bool tiles) {
  if (backend == Backend::cuda && !tiles) return {Layout::spatial, Layout::replicated};
  return {Layout::spatial};
}

// `parts` tiles, or `parts` devices (CUDA: all device 0, each with its own pool or replica; the
// lead's machine has two).
PartitionedOptions parted_options(const IndexOptions& io, int parts, bool tiles, Layout layout) {
  PartitionedOptions po;
  po.index = io;
  po.layout = layout;
  po.sample = 257;  // a small sample: cuts fall between duplicates and on lattice planes
  if (tiles)
    po.tiles = parts;
  else
    po.devices = std::vector<int>(static_cast<std::size_t>(parts), 0);
  return po;
}

const char* name(Layout layout) {
  return layout == Layout::replicated ? "replicas vs one index" : "parts vs one index";
}

void run_case(const Case& c, Backend backend) {
  const std::vector<float> xyz = make_cloud(c.cloud, c.n, 17 + c.n);
  const PointsView refs = host_points(xyz.data(), static_cast<std::int64_t>(xyz.size() / 3));
  std::vector<float> qxyz;
  if (c.queries) {
    qxyz = make_synthetic_cloud(SyntheticKind::uniform, c.n / 2 + 3, 99);
    for (std::size_t i = 0; i < qxyz.size(); ++i) qxyz[i] = qxyz[i] * 1.5f + 7.0f;  // beyond
    if (c.cloud == Cloud::lattice || c.cloud == Cloud::duplicates)
      qxyz.insert(qxyz.end(), xyz.begin(), xyz.begin() + std::min<std::size_t>(xyz.size(), 300));
    qxyz.insert(qxyz.end(), {NAN, 0.f, 0.f});
  }
  const PointsView qv = host_points(qxyz.data(), static_cast<std::int64_t>(qxyz.size() / 3));
  const KnnParams params{c.k, c.exclude_self};

  IndexOptions io;
  io.backend = backend;
  Index single(refs, io);
  const KnnResult want = c.queries ? single.knn(qv, params) : single.self_knn(params);

  for (const Layout layout : layouts(backend, c.tiles)) {
    PartitionedIndex parted(refs, parted_options(io, c.parts, c.tiles, layout));
    EXPECT_EQ(parted.replicated(), layout == Layout::replicated);
    EXPECT_EQ(parted.parts(), c.parts);
    const KnnResult got = c.queries ? parted.knn(qv, params) : parted.self_knn(params);
    expect_identical(got, want, name(layout));
    // Replicas cut a self-search along their order, here on one device, where the cloud is not
    // stored in spatial order: always for clouds made in random order (of 1,000 points or more:
    // a cloud of one point has no neighbors to break), never where the cut is
    // not possible (the lattice, duplicates and the like may be either way: *SpatialOrder*).
    const bool cut = layout == Layout::replicated && !c.queries &&
                     cut_possible(std::vector<int>(static_cast<std::size_t>(c.parts), 0));
    if ((c.cloud == Cloud::uniform || c.cloud == Cloud::poisoned) && c.n >= 1000) {
      EXPECT_EQ(parted.last_timings().by_position, cut);
    } else if (parted.last_timings().by_position) {
      EXPECT_TRUE(cut);
    }
  }
  // And the single index is the exact reference (so the comparison above means exactness).
  const KnnResult exact = reference_knn(refs, c.queries ? &qv : nullptr, params);
  expect_identical(want, exact, "one index vs exact reference");
}

TEST_P(PartitionedKnn, IdenticalToOneIndexCpu) { run_case(GetParam(), Backend::cpu); }

TEST_P(PartitionedKnn, IdenticalToOneIndexCuda) {
  PCNN_REQUIRE_DEVICE();
  run_case(GetParam(), Backend::cuda);
}

INSTANTIATE_TEST_SUITE_P(Adversarial, PartitionedKnn,
                         ::testing::Values(Case{Cloud::uniform, 3000, 8, 2, false, false, false},
                                           Case{Cloud::uniform, 3000, 8, 7, false, true, false},
                                           Case{Cloud::uniform, 3000, 5, 3, true, false, true},
                                           Case{Cloud::duplicates, 4000, 8, 3, false, false, false},
                                           Case{Cloud::duplicates, 4000, 12, 5, true, true, false},
                                           Case{Cloud::duplicates, 2000, 8, 4, false, false, true},
                                           Case{Cloud::lattice, 4096, 6, 2, false, false, false},
                                           Case{Cloud::lattice, 4096, 27, 8, false, true, false},
                                           Case{Cloud::lattice, 2744, 7, 5, true, false, true},
                                           Case{Cloud::identical, 500, 8, 4, false, false, false},
                                           Case{Cloud::identical, 500, 16, 3, true, true, false},
                                           Case{Cloud::poisoned, 3000, 8, 4, false, false, false},
                                           Case{Cloud::poisoned, 3000, 8, 3, true, false, true},
                                           Case{Cloud::outliers, 3000, 4, 6, false, false, false},
                                           Case{Cloud::plane, 2000, 8, 3, false, true, false},
                                           Case{Cloud::tiny, 5, 8, 4, false, false, false},
                                           Case{Cloud::tiny, 5, 3, 9, true, false, true},
                                           Case{Cloud::uniform, 1, 2, 2, false, false, false}));

// The forwarding test: boxes never over-estimate, so no neighbor is missed; and the merge really
// is needed (a query near a cut is forwarded).
TEST(Partitioning, BoxDistanceNeverExceedsAPointDistance) {
  const auto xyz = make_synthetic_cloud(SyntheticKind::clustered, 2000, 5);
  std::vector<std::int32_t> ids;
  for (std::int32_t i = 0; i < 2000; i += 3) ids.push_back(i);
  const Box box = bounding_box(host_points(xyz.data(), 2000), ids);
  const auto q = make_synthetic_cloud(SyntheticKind::uniform, 500, 6);
  for (int j = 0; j < 500; ++j)
    for (std::int32_t i : ids) {
      const float* p = &xyz[3 * i];
      const float* a = &q[3 * j];
      const double dx = double(a[0]) - p[0], dy = double(a[1]) - p[1], dz = double(a[2]) - p[2];
      ASSERT_LE(box_sqdist(box, a), (dx * dx + dy * dy) + dz * dz);
    }
  EXPECT_EQ(box_sqdist(Box{}, q.data()), INFINITY);  // an empty box holds nothing
}

// A public helper: ids outside the points, or a view it cannot read, are the caller's error (an
// id outside was read from past the points: a segfault).
TEST(Partitioning, BoundingBoxRefusesIdsOutsideThePoints) {
  const auto xyz = make_synthetic_cloud(SyntheticKind::uniform, 100, 5);
  const PointsView v = host_points(xyz.data(), 100);
  for (const std::int32_t bad : {-1, 100, 50000000, INT32_MIN})
    EXPECT_THROW(bounding_box(v, {0, bad}), invalid_argument_error) << bad;
  EXPECT_THROW(bounding_box(host_points(static_cast<const float*>(nullptr), 100), {0}),
               invalid_argument_error);
  const Box b = bounding_box(v, {0, 99});
  for (int a = 0; a < 3; ++a) EXPECT_EQ(b.lo[a], std::min(xyz[a], xyz[297 + a]));
}

TEST(Partitioning, DeterministicAndBalanced) {
  const auto xyz = make_synthetic_cloud(SyntheticKind::lidar, 20000, 3);
  const PointsView v = host_points(xyz.data(), 20000);
  const auto a = Partitioning(v, 4).assign(v);
  const auto b = Partitioning(v, 4).assign(v);
  ASSERT_EQ(a, b);
  std::size_t total = 0;
  for (const auto& part : a) {
    total += part.size();
    EXPECT_NEAR(double(part.size()), 5000.0, 500.0);  // a sample of every point: within 10 %
    EXPECT_TRUE(std::is_sorted(part.begin(), part.end()));
  }
  EXPECT_EQ(total, 20000u);
  // Identical points still split by index.
  std::vector<float> same(3 * 1000, 2.0f);
  const auto c =
      Partitioning(host_points(same.data(), 1000), 4).assign(host_points(same.data(), 1000));
  for (const auto& part : c) EXPECT_NEAR(double(part.size()), 250.0, 30.0);
}

// The partitioning's passes run in slices of the points, a thread each (one per 64k points, up to
// the CPUs). Cuts, parts and bounds must be what one serial pass gives, whatever the number of
// slices: MPI ranks compute them each on their own. The reference below is the documented rule,
// written serially: every step-th finite point (step = ceil(finite / sample)) sampled in index
// order, sorted by (Morton code, index), cut c at the sample's c/parts quantile.
TEST(Partitioning, SlicedPassesEqualOneSerialPass) {
  std::vector<float> xyz = make_synthetic_cloud(SyntheticKind::clustered, 300000, 12);
  for (std::size_t i = 0; i < xyz.size(); i += 3 * 7) xyz[i + 1] = NAN;  // every 7th point
  const auto n = static_cast<std::int64_t>(xyz.size() / 3);
  const PointsView v = host_points(xyz.data(), n);
  const int parts = 5;
  const std::int64_t sample = 1000;
  const Partitioning cut(v, parts, sample);
  const auto finite = [&](std::int64_t i) {
    return std::isfinite(xyz[3 * i]) && std::isfinite(xyz[3 * i + 1]) &&
           std::isfinite(xyz[3 * i + 2]);
  };
  const auto point = [&](std::int64_t i, double* p) {
    for (int a = 0; a < 3; ++a) p[a] = xyz[3 * i + a];
  };
  std::int64_t nf = 0;
  for (std::int64_t i = 0; i < n; ++i) nf += finite(i);
  const std::int64_t step = (nf + sample - 1) / sample;
  std::vector<std::pair<std::uint64_t, std::int64_t>> keys;
  for (std::int64_t i = 0, seen = 0; i < n; ++i) {
    if (!finite(i)) continue;
    double p[3];
    point(i, p);
    if (seen++ % step == 0) keys.emplace_back(cut.morton_code(p), i);
  }
  std::sort(keys.begin(), keys.end());
  std::vector<std::vector<std::int32_t>> want(parts);
  for (std::int64_t i = 0; i < n; ++i) {
    int part = static_cast<int>(i % parts);
    if (finite(i)) {
      double p[3];
      point(i, p);
      const std::pair<std::uint64_t, std::int64_t> key{cut.morton_code(p), i};
      part = 0;
      for (int c = 1; c < parts; ++c) part += keys[keys.size() * c / parts] <= key;
    }
    want[part].push_back(static_cast<std::int32_t>(i));
  }
  auto got = cut.assign(v);
  ASSERT_EQ(got, want);
  // Each part, then every point as one more "part": a part here is too small for two slices.
  got.emplace_back(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) got.back()[static_cast<std::size_t>(i)] = std::int32_t(i);
  for (std::size_t p = 0; p < got.size(); ++p) {
    // Bounds: the box of each of the 64 second-level octants that holds a finite point.
    const dist::Bounds b = dist::bounds_of(cut, v, &got[p]);
    std::map<std::uint64_t, Box> octants;
    for (const std::int32_t i : got[p]) {
      if (!finite(i)) continue;
      double q[3];
      point(i, q);
      Box& o = octants.try_emplace(cut.morton_code(q) >> 57).first->second;
      if (o.empty) o.lo = o.hi = {q[0], q[1], q[2]};
      o.empty = false;
      for (int a = 0; a < 3; ++a)
        o.lo[a] = std::min(o.lo[a], q[a]), o.hi[a] = std::max(o.hi[a], q[a]);
    }
    ASSERT_EQ(b.cells.size(), octants.size()) << "part " << p;
    std::size_t j = 0;
    for (const auto& [code, o] : octants) {
      EXPECT_EQ(b.cells[j].lo, o.lo) << "part " << p << " octant " << code;
      EXPECT_EQ(b.cells[j].hi, o.hi) << "part " << p << " octant " << code;
      ++j;
    }
    // A part's packed points: its ids' coordinates, in order.
    dist::Part part;
    part.take(cut, v, got[p]);
    ASSERT_EQ(part.xyz.f.size(), 3 * got[p].size());
    for (std::size_t k = 0; k < got[p].size(); ++k)
      for (int a = 0; a < 3; ++a) {
        const float want_c = xyz[3 * static_cast<std::size_t>(got[p][k]) + a];
        const float got_c = part.xyz.f[3 * k + a];
        ASSERT_TRUE(got_c == want_c || (std::isnan(got_c) && std::isnan(want_c))) << k;
      }
  }
}

// Two spatial parts on the CPU backend.
PartitionedOptions two_cpu_parts() {
  PartitionedOptions po;
  po.index.backend = Backend::cpu;
  po.devices = {0, 1};
  return po;
}

TEST(Partitioning, ForwardsQueriesNearACut) {
  const auto xyz = make_synthetic_cloud(SyntheticKind::uniform, 5000, 8);
  PartitionedIndex index(host_points(xyz.data(), 5000), two_cpu_parts());
  (void)index.self_knn(KnnParams{8});
  const PartitionedTimings& t = index.last_timings();
  ASSERT_EQ(t.parts.size(), 2u);
  EXPECT_GT(t.queries_forwarded, 0);
  EXPECT_LT(t.queries_forwarded, 2500);  // only those near the cut
  EXPECT_EQ(t.parts[0].points + t.parts[1].points, 5000);
  EXPECT_EQ(t.parts[0].queries_received, t.parts[1].queries_forwarded);
}

TEST(Partitioning, AMovedFromIndexThrowsAndTheMovedOneSearches) {
  const auto xyz = make_synthetic_cloud(SyntheticKind::uniform, 100, 8);
  PartitionedIndex a(host_points(xyz.data(), 100), two_cpu_parts());
  PartitionedIndex b(std::move(a));
  EXPECT_THROW((void)a.size(), invalid_argument_error);  // NOLINT(bugprone-use-after-move)
  EXPECT_THROW((void)a.self_knn(KnnParams{4}), invalid_argument_error);
  EXPECT_EQ(b.size(), 100);
  EXPECT_EQ(b.self_knn(KnnParams{4}).rows, 100);
}

TEST(Partitioning, InvalidArguments) {
  const auto xyz = make_synthetic_cloud(SyntheticKind::uniform, 100, 8);
  PartitionedIndex index(host_points(xyz.data(), 100), two_cpu_parts());
  EXPECT_THROW((void)index.self_knn(KnnParams{0}), invalid_argument_error);
  EXPECT_THROW((void)index.self_knn(KnnParams{kMaxK + 1}), invalid_argument_error);
  const PointsView q = host_points(xyz.data(), 10);
  EXPECT_THROW((void)index.knn(q, KnnParams{4, true}), invalid_argument_error);
  EXPECT_THROW(Partitioning(host_points(xyz.data(), 100), 0), invalid_argument_error);
  EXPECT_THROW((void)parse_devices("0,x", Backend::cpu), invalid_argument_error);
  EXPECT_THROW((void)parse_devices("", Backend::cpu), invalid_argument_error);
  EXPECT_EQ(parse_devices("0,1", Backend::cpu), (std::vector<int>{0, 1}));
}

// ---- radius and hybrid: the same adversarial clouds ----

// Radius rows equal byte for byte: offsets, indices and the float bits of the distances.
void expect_identical(const RadiusResult& a, const RadiusResult& b, const char* what) {
  ASSERT_EQ(a.rows, b.rows) << what;
  ASSERT_EQ(a.offsets, b.offsets) << what << ": row sizes differ";
  for (std::int64_t q = 0; q < a.rows; ++q) {
    const std::int64_t o = a.offsets[q], n = a.offsets[q + 1] - o;
    if (n == 0) continue;  // a search with no pairs has empty vectors: no &v[o] to take
    if (std::memcmp(&a.indices[o], &b.indices[o], n * sizeof(std::int32_t)) != 0 ||
        std::memcmp(&a.sqdist[o], &b.sqdist[o], n * sizeof(float)) != 0) {
      std::string row;
      for (std::int64_t j = o; j < o + n; ++j)
        row += " (" + std::to_string(a.indices[j]) + " " + std::to_string(a.sqdist[j]) + " | " +
               std::to_string(b.indices[j]) + " " + std::to_string(b.sqdist[j]) + ")";
      FAIL() << what << ": row " << q << " differs:" << row;
    }
  }
}

void expect_identical(const HybridResult& a, const HybridResult& b, const char* what) {
  expect_identical(a.knn, b.knn, what);
  EXPECT_EQ(a.counts, b.counts) << what;
}

// Radius, its counts, and hybrid of `parted` against `single`, and `single` against the exact
// references (so that identity means exactness).
void expect_radius_and_hybrid(PartitionedIndex& parted, Index& single, PointsView refs,
                              const PointsView* q, double radius, int max_nn, bool exclude_self) {
  const RadiusParams rp{radius, exclude_self};
  const RadiusResult want = q ? single.radius(*q, rp) : single.self_radius(rp);
  const RadiusResult got = q ? parted.radius(*q, rp) : parted.self_radius(rp);
  expect_identical(got, want, "radius: partitioned vs one index");
  expect_identical(want, reference_radius(refs, q, rp), "radius: one index vs exact reference");
  std::vector<std::int64_t> offsets(static_cast<std::size_t>(want.rows) + 1, -1);
  const ArrayView<std::int64_t> ov{offsets.data(), want.rows + 1};
  const std::int64_t total = q ? parted.radius_count(*q, rp, ov) : parted.self_radius_count(rp, ov);
  EXPECT_EQ(total, want.offsets.back());
  EXPECT_EQ(offsets, want.offsets) << "radius counts";
  const HybridParams hp{radius, max_nn, exclude_self};
  const HybridResult hwant = q ? single.hybrid(*q, hp) : single.self_hybrid(hp);
  const HybridResult hgot = q ? parted.hybrid(*q, hp) : parted.self_hybrid(hp);
  expect_identical(hgot, hwant, "hybrid: partitioned vs one index");
  expect_identical(hwant, reference_hybrid(refs, q, hp), "hybrid: one index vs exact reference");
}

class PartitionedRadius : public ::testing::TestWithParam<Case> {};

void run_radius_case(const Case& c, Backend backend) {
  const std::vector<float> xyz = make_cloud(c.cloud, c.n, 17 + c.n);
  const PointsView refs = host_points(xyz.data(), static_cast<std::int64_t>(xyz.size() / 3));
  std::vector<float> qxyz = make_synthetic_cloud(SyntheticKind::uniform, c.n / 3 + 3, 98);
  for (float& v : qxyz) v = v * 0.03f + 0.5f;  // around the clouds, some beyond
  qxyz.insert(qxyz.end(), xyz.begin(), xyz.begin() + std::min<std::size_t>(xyz.size(), 300));
  qxyz.insert(qxyz.end(), {NAN, 0.f, 0.f});
  const PointsView qv = host_points(qxyz.data(), static_cast<std::int64_t>(qxyz.size() / 3));
  IndexOptions io;
  io.backend = backend;
  Index single(refs, io);
  // The radius: the k-th distance of a middle row (not an outlier) (exact lattice distances stay on
  // the boundary).
  double radius = 1.0;
  if (refs.count > 0) {
    const KnnResult r = single.self_knn(KnnParams{c.k});
    const float d = r.sqdist[static_cast<std::size_t>((r.rows / 2 + 1) % r.rows) * c.k + c.k - 1];
    if (std::isfinite(d)) radius = std::sqrt(double(d));
  }
  for (const Layout layout : layouts(backend, c.tiles)) {
    SCOPED_TRACE(name(layout));
    PartitionedIndex parted(refs, parted_options(io, c.parts, c.tiles, layout));
    expect_radius_and_hybrid(parted, single, refs, c.queries ? &qv : nullptr, radius, c.k,
                             c.exclude_self && !c.queries);
  }
}

TEST_P(PartitionedRadius, IdenticalToOneIndexCpu) { run_radius_case(GetParam(), Backend::cpu); }

TEST_P(PartitionedRadius, IdenticalToOneIndexCuda) {
  PCNN_REQUIRE_DEVICE();
  run_radius_case(GetParam(), Backend::cuda);
}

INSTANTIATE_TEST_SUITE_P(Adversarial, PartitionedRadius,
                         ::testing::Values(Case{Cloud::uniform, 3000, 8, 3, false, false, false},
                                           Case{Cloud::uniform, 3000, 8, 5, true, true, false},
                                           Case{Cloud::uniform, 2000, 5, 3, false, false, true},
                                           Case{Cloud::duplicates, 4000, 8, 3, false, true, false},
                                           Case{Cloud::duplicates, 2000, 12, 4, true, false, true},
                                           Case{Cloud::lattice, 4096, 6, 2, false, false, false},
                                           Case{Cloud::lattice, 2744, 19, 5, true, true, false},
                                           Case{Cloud::lattice, 2744, 7, 4, false, false, true},
                                           Case{Cloud::identical, 300, 8, 3, false, true, false},
                                           Case{Cloud::poisoned, 3000, 8, 4, false, false, false},
                                           Case{Cloud::poisoned, 3000, 8, 3, true, false, true},
                                           Case{Cloud::outliers, 3000, 4, 6, false, false, false},
                                           Case{Cloud::tiny, 5, 8, 4, false, false, false},
                                           Case{Cloud::uniform, 1, 2, 2, false, true, false}));

// ---- float64 coordinates: parts keep and search them as stored ----

enum class Cloud64 {
  utm,        // clusters 0.1 mm across near (2.5e6, 5.4e6, 1e3): float rounding changes answers
  lattice,    // a shuffled lattice of spacing 0.25 near (1e7, 2e6, 3e5): exact ties in double
  poisoned,   // utm with NaN and infinity mixed in
  vanishing,  // uniform scaled by 1e-200: squares underflow double (ties at 0, by index)
  overflow,   // uniform scaled by 1e201: squares overflow double (every distance +inf)
};

const char* name(Cloud64 c) {
  static const char* names[] = {"utm", "lattice", "poisoned", "vanishing", "overflow"};
  return names[static_cast<int>(c)];
}

std::vector<double> make_cloud64(Cloud64 c, int n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  std::vector<double> xyz;
  switch (c) {
    case Cloud64::utm:
    case Cloud64::poisoned: {
      const double origin[3] = {2.5e6, 5.4e6, 1.0e3};
      double center[3] = {};
      for (int i = 0; i < n; ++i) {
        if (i % 32 == 0)
          for (int a = 0; a < 3; ++a) center[a] = origin[a] + 50.0 * u(rng) * (a == 2 ? 0.2 : 1);
        for (int a = 0; a < 3; ++a) xyz.push_back(center[a] + 2e-4 * u(rng));
      }
      if (c == Cloud64::poisoned) test::poison(xyz, 0.05, seed);
      return xyz;
    }
    case Cloud64::lattice: {
      const int m = static_cast<int>(std::cbrt(double(n)) + 0.5);
      const double origin[3] = {1e7, 2e6, 3e5};
      for (int i = 0; i < m; ++i)
        for (int j = 0; j < m; ++j)
          for (int l = 0; l < m; ++l)
            for (int a = 0; a < 3; ++a)
              xyz.push_back(origin[a] + 0.25 * (a == 0 ? l : a == 1 ? j : i));
      // Shuffled, so that index order is not spatial order.
      for (std::size_t i = xyz.size() / 3; i > 1; --i) {
        const std::size_t k = static_cast<std::size_t>(rng() % i);
        for (int a = 0; a < 3; ++a) std::swap(xyz[3 * (i - 1) + a], xyz[3 * k + a]);
      }
      return xyz;
    }
    case Cloud64::vanishing:
    case Cloud64::overflow: {
      const double scale = c == Cloud64::vanishing ? 1e-200 : 1e201;
      for (float v : make_synthetic_cloud(SyntheticKind::uniform, n, seed))
        xyz.push_back(double(v) * scale);
      return xyz;
    }
  }
  return xyz;
}

struct Case64 {
  Cloud64 cloud;
  int n, k, parts;
  bool tiles, exclude_self;
  int queries;  // 0: self-search; 1: float64 queries; 2: float32 queries (rounded)
  double radius;
};

std::ostream& operator<<(std::ostream& os, const Case64& c) {
  return os << name(c.cloud) << " n=" << c.n << " k=" << c.k << " parts=" << c.parts
            << (c.tiles ? " tiles" : "") << (c.exclude_self ? " exclude_self" : "")
            << (c.queries == 1   ? " float64 queries"
                : c.queries == 2 ? " float32 queries"
                                 : "")
            << " r=" << c.radius;
}

class PartitionedFloat64 : public ::testing::TestWithParam<Case64> {};

void run_case64(const Case64& c, Backend backend) {
  const std::vector<double> xyz = make_cloud64(c.cloud, c.n, 31 + c.n);
  const PointsView refs = host_points(xyz.data(), static_cast<std::int64_t>(xyz.size() / 3));
  std::vector<double> q64 = make_cloud64(c.cloud, c.n / 2 + 1, 77);
  q64.insert(q64.end(), xyz.begin(), xyz.begin() + std::min<std::size_t>(xyz.size(), 150));
  const std::vector<float> q32(q64.begin(), q64.end());
  const std::int64_t nq = static_cast<std::int64_t>(q64.size() / 3);
  const PointsView qv = c.queries == 1 ? host_points(q64.data(), nq) : host_points(q32.data(), nq);
  const PointsView* q = c.queries ? &qv : nullptr;
  IndexOptions io;
  io.backend = backend;
  Index single(refs, io);
  const KnnParams kp{c.k, c.exclude_self};
  const KnnResult want = q ? single.knn(*q, kp) : single.self_knn(kp);
  expect_identical(want, reference_knn(refs, q, kp), "kNN: one index vs exact reference");
  for (const Layout layout : layouts(backend, c.tiles)) {
    SCOPED_TRACE(name(layout));
    PartitionedIndex parted(refs, parted_options(io, c.parts, c.tiles, layout));
    expect_identical(q ? parted.knn(*q, kp) : parted.self_knn(kp), want,
                     "kNN: partitioned vs one index");
    expect_radius_and_hybrid(parted, single, refs, q, c.radius, c.k, c.exclude_self);
  }
}

// The float64 clouds are ones float rounding would change (shown first: these tests can fail).
TEST(PartitionedFloat64Clouds, RoundingThemToFloatChangesTheAnswers) {
  for (Cloud64 c : {Cloud64::utm, Cloud64::lattice}) {
    const std::vector<double> xyz = make_cloud64(c, 3000, 5);
    const std::vector<float> rounded(xyz.begin(), xyz.end());
    const std::int64_t n = static_cast<std::int64_t>(xyz.size() / 3);
    const KnnResult exact = reference_knn(host_points(xyz.data(), n), nullptr, KnnParams{8});
    const KnnResult f = reference_knn(host_points(rounded.data(), n), nullptr, KnnParams{8});
    EXPECT_NE(exact.indices, f.indices) << name(c);
  }
}

TEST_P(PartitionedFloat64, IdenticalToOneIndexCpu) { run_case64(GetParam(), Backend::cpu); }

TEST_P(PartitionedFloat64, IdenticalToOneIndexCuda) {
  PCNN_REQUIRE_DEVICE();
  run_case64(GetParam(), Backend::cuda);
}

INSTANTIATE_TEST_SUITE_P(
    Adversarial, PartitionedFloat64,
    ::testing::Values(Case64{Cloud64::utm, 4000, 8, 3, false, false, 0, 1e-4},
                      Case64{Cloud64::utm, 3000, 16, 4, true, true, 0, 2e-4},
                      Case64{Cloud64::utm, 3000, 8, 2, false, false, 1, 1e-4},
                      Case64{Cloud64::utm, 3000, 8, 3, false, false, 2, 0.3},
                      Case64{Cloud64::lattice, 1728, 19, 3, false, false, 0, 0.25},
                      Case64{Cloud64::lattice, 2744, 27, 5, true, true, 0, 0.5},
                      Case64{Cloud64::lattice, 1728, 9, 4, false, false, 1, 0.25},
                      Case64{Cloud64::poisoned, 3000, 8, 3, false, false, 0, 1e-4},
                      Case64{Cloud64::poisoned, 3000, 8, 4, true, false, 1, 2e-4},
                      Case64{Cloud64::vanishing, 600, 8, 3, false, false, 0, 1e-200},
                      Case64{Cloud64::vanishing, 600, 8, 2, true, false, 1, 1e-200},
                      Case64{Cloud64::overflow, 500, 8, 3, false, false, 0, 1e201},
                      Case64{Cloud64::overflow, 500, 8, 2, true, false, 1, 1e201}));

TEST(Partitioning, Float64ViewsAreReadAsStored) {
  // Two points a float cannot tell apart, in different parts of the same box: their codes and
  // boxes differ as the doubles do.
  std::vector<double> xyz;
  for (int i = 0; i < 1000; ++i) xyz.insert(xyz.end(), {2.5e6 + i * 1e-4, 5.4e6, 1e3});
  const PointsView v = host_points(xyz.data(), 1000);
  const Partitioning parts(v, 4);
  const auto ids = parts.assign(v);
  for (const auto& part : ids) EXPECT_NEAR(double(part.size()), 250.0, 40.0);
  const Box box = bounding_box(v, ids[1]);
  EXPECT_EQ(box.lo[0], xyz[3 * ids[1].front()]);
  EXPECT_EQ(box.hi[0], xyz[3 * ids[1].back()]);
}

// Replicas of the whole cloud: the CPU backend has no devices to replicate over; on CUDA they
// read float64 coordinates as one index does, rows split unevenly.
TEST(Replicated, RefusedOnTheCpuBackendAndParsed) {
  const auto xyz = make_synthetic_cloud(SyntheticKind::uniform, 100, 8);
  PartitionedOptions po;
  po.index.backend = Backend::cpu;
  po.devices = {0, 1};
  po.layout = Layout::replicated;
  EXPECT_THROW(PartitionedIndex(host_points(xyz.data(), 100), po), invalid_argument_error);
  po.layout = Layout::automatic;
  EXPECT_FALSE(PartitionedIndex(host_points(xyz.data(), 100), po).replicated());
  EXPECT_EQ(parse_layout("replicated"), Layout::replicated);
  EXPECT_EQ(parse_layout("spatial"), Layout::spatial);
  EXPECT_EQ(parse_layout("auto"), Layout::automatic);
  EXPECT_THROW((void)parse_layout("mirror"), invalid_argument_error);
}

TEST(Replicated, Float64RowsEqualOneIndexCuda) {
  PCNN_REQUIRE_DEVICE();
  // UTM-like doubles: 0.1 mm steps on 5e5 / 5e6 that float rounding would merge.
  std::vector<double> xyz64;
  const auto base = make_synthetic_cloud(SyntheticKind::clustered, 2001, 4);
  for (std::size_t i = 0; i < base.size(); i += 3)
    xyz64.insert(xyz64.end(), {512345.0 + base[i] * 1e-3, 5412345.0 + base[i + 1] * 1e-3,
                               230.0 + base[i + 2] * 1e-3});
  const PointsView refs = host_points(xyz64.data(), 2001);
  const std::vector<double> q64(xyz64.begin(), xyz64.begin() + 3 * 777);
  const PointsView qv = host_points(q64.data(), 777);
  IndexOptions io;
  io.backend = Backend::cuda;
  Index single(refs, io);
  PartitionedOptions po;
  po.index = io;
  po.devices = {0, 0, 0};
  PartitionedIndex replicas(refs, po);  // automatic: replicated on CUDA
  ASSERT_TRUE(replicas.replicated());
  for (const KnnParams params : {KnnParams{9, true}, KnnParams{1, false}})
    expect_identical(replicas.self_knn(params), single.self_knn(params), "self, replicas");
  expect_identical(replicas.knn(qv, KnnParams{6}), single.knn(qv, KnnParams{6}), "queries");
  expect_identical(single.self_knn(KnnParams{9, true}),
                   reference_knn(refs, nullptr, KnnParams{9, true}), "one index vs reference");
}

// Device memory of one device for a test, freed on that device.
struct DeviceBlock {
  void* p = nullptr;
  int device = 0;
  DeviceBlock(int d, std::size_t bytes) : device(d) {
    int was = 0;
    EXPECT_EQ(cudaGetDevice(&was), cudaSuccess);
    EXPECT_EQ(cudaSetDevice(d), cudaSuccess);
    EXPECT_EQ(cudaMalloc(&p, std::max<std::size_t>(bytes, 4)), cudaSuccess);
    EXPECT_EQ(cudaSetDevice(was), cudaSuccess);
  }
  ~DeviceBlock() {
    int was = 0;
    cudaGetDevice(&was);
    cudaSetDevice(device);
    cudaFree(p);
    cudaSetDevice(was);
  }
  DeviceBlock(const DeviceBlock&) = delete;
  DeviceBlock& operator=(const DeviceBlock&) = delete;
};

// Runs `search` into device rows of `replicas` and returns them copied back into one host result.
template <typename Search>
KnnResult rows_on_devices(PartitionedIndex& replicas, std::int64_t rows, int k,
                          const Search& search) {
  std::vector<DeviceRows> shares = replicas.device_rows(rows);
  EXPECT_EQ(static_cast<int>(shares.size()), replicas.parts());
  std::vector<std::unique_ptr<DeviceBlock>> blocks;
  for (DeviceRows& s : shares) {
    const std::size_t bytes = static_cast<std::size_t>(s.rows) * k * 4;
    blocks.push_back(std::make_unique<DeviceBlock>(s.device, bytes));
    blocks.push_back(std::make_unique<DeviceBlock>(s.device, bytes));
    s.indices = {static_cast<std::int32_t*>(blocks[blocks.size() - 2]->p), s.rows, k,
                 Memory::device};
    s.sqdist = {static_cast<float*>(blocks.back()->p), s.rows, k, Memory::device};
  }
  search(shares);
  KnnResult got{rows, k, std::vector<std::int32_t>(static_cast<std::size_t>(rows) * k, -2),
                std::vector<float>(static_cast<std::size_t>(rows) * k)};
  std::int64_t next = 0;
  for (const DeviceRows& s : shares) {
    EXPECT_EQ(s.first_row, next);
    next += s.rows;
    const std::size_t bytes = static_cast<std::size_t>(s.rows) * k * 4;
    EXPECT_EQ(cudaMemcpy(got.indices.data() + s.first_row * k, s.indices.data, bytes,
                         cudaMemcpyDeviceToHost),
              cudaSuccess);
    EXPECT_EQ(cudaMemcpy(got.sqdist.data() + s.first_row * k, s.sqdist.data, bytes,
                         cudaMemcpyDeviceToHost),
              cudaSuccess);
  }
  EXPECT_EQ(next, rows);
  return got;
}

// Rows kept on the devices: each replica writes its share into memory of its own device (both
// GPUs where two exist, else three replicas on device 0); copied back, every share is the host
// call's rows byte for byte, for kNN and hybrid, self and separate queries.
TEST(Replicated, RowsKeptOnTheDevicesEqualHostRowsCuda) {
  PCNN_REQUIRE_DEVICE();
  const auto xyz = make_synthetic_cloud(SyntheticKind::clustered, 5003, 21);
  const PointsView refs = host_points(xyz.data(), 5003);
  auto qxyz = make_synthetic_cloud(SyntheticKind::uniform, 1201, 22);
  qxyz.insert(qxyz.end(), xyz.begin(), xyz.begin() + 300);  // exact matches among the queries
  const PointsView qv = host_points(qxyz.data(), 1301);
  PartitionedOptions po;
  po.index.backend = Backend::cuda;
  po.devices = device_count() >= 2 ? std::vector<int>{0, 1} : std::vector<int>{0, 0, 0};
  PartitionedIndex replicas(refs, po);
  ASSERT_TRUE(replicas.replicated());

  const auto on_devices = [&](std::int64_t rows, int k, const auto& search) {
    return rows_on_devices(replicas, rows, k, search);
  };
  const KnnParams self{9, true}, sep{5};
  const HybridParams hself{2.0, 12, true}, hsep{6.0, 7};
  expect_identical(on_devices(5003, 9,
                              [&](const auto& s) {
                                replicas.self_knn_on_devices(self, s);
                                EXPECT_EQ(replicas.last_timings().by_position,
                                          cut_possible(po.devices));
                              }),
                   replicas.self_knn(self), "self kNN on the devices");
  expect_identical(on_devices(1301, 5, [&](const auto& s) { replicas.knn_on_devices(qv, sep, s); }),
                   replicas.knn(qv, sep), "kNN of queries on the devices");
  expect_identical(
      on_devices(5003, 12, [&](const auto& s) { replicas.self_hybrid_on_devices(hself, s); }),
      replicas.self_hybrid(hself).knn, "self hybrid on the devices");
  expect_identical(
      on_devices(1301, 7, [&](const auto& s) { replicas.hybrid_on_devices(qv, hsep, s); }),
      replicas.hybrid(qv, hsep).knn, "hybrid of queries on the devices");
  // And the host rows are one index's (so the comparisons above mean exactness).
  expect_identical(replicas.self_knn(self), reference_knn(refs, nullptr, self), "vs reference");
}

// Replicas' self-search cut along the index's order (each replica searches a piece of the curve
// and writes every row into the share of the device owning it): one index's rows byte for byte,
// for kNN of several k with and without exclude_self and for hybrid, on a cloud with exact copies
// and non-finite points (1 %, and 60 %: then the non-finite points, sorted last, span more than
// one replica's rows), in passes of 1,024 positions too (passes that start off the 128-query
// blocks); two replicas on one device, and where two devices exist, three replicas on two
// devices, and a second index on the same devices searched after the first is gone. Nine
// replicas (past RowShares::kMax) take contiguous shares of the rows instead, with the same rows.
TEST(Replicated, SelfSearchCutAlongTheOrderEqualsOneIndexCuda) {
  PCNN_REQUIRE_DEVICE();
  for (const double poisoned : {0.01, 0.6}) {
    auto xyz = make_synthetic_cloud(SyntheticKind::clustered, 200003, 61);
    xyz.insert(xyz.end(), xyz.begin(), xyz.begin() + 3 * 5000);  // exact copies of 5,000 points
    test::poison(xyz, poisoned, 62);
    const auto n = static_cast<std::int64_t>(xyz.size() / 3);
    const PointsView refs = host_points(xyz.data(), n);
    IndexOptions io;
    io.backend = Backend::cuda;
    Index single(refs, io);
    // A radius that cuts some rows short of max_nn and fills others: the median 8th distance.
    KnnResult eight = single.self_knn(KnnParams{8, true});
    std::vector<float> d8;
    for (std::int64_t r = 0; r < n; ++r)
      if (std::isfinite(eight.sqdist[r * 8 + 7])) d8.push_back(eight.sqdist[r * 8 + 7]);
    ASSERT_FALSE(d8.empty());
    std::nth_element(d8.begin(), d8.begin() + d8.size() / 2, d8.end());
    const HybridParams hybrid{std::sqrt(double(d8[d8.size() / 2])), 16, true};
    std::vector<std::vector<int>> device_sets = {{0, 0}, std::vector<int>(9, 0)};
    if (device_count() >= 2) device_sets.push_back({1, 0, 1});
    for (const std::vector<int>& devices : device_sets)
      for (const std::int64_t chunk : {std::int64_t(0), std::int64_t(1000)}) {
        if (devices.size() == 9 && chunk) continue;
        PartitionedOptions po;
        po.index = io;
        po.index.chunk_rows = chunk;
        po.devices = devices;
        po.layout = Layout::replicated;
        std::optional<PartitionedIndex> first;
        if (devices.size() == 3) first.emplace(refs, po);  // then dropped: see below
        PartitionedIndex replicas(refs, po);
        first.reset();
        const std::string on = std::to_string(devices.size()) + " replicas, " +
                               std::to_string(poisoned) + " poisoned, chunk " +
                               std::to_string(chunk);
        const bool cut = cut_possible(devices);  // never for nine replicas
        for (const KnnParams p : {KnnParams{1, false}, KnnParams{8, true}, KnnParams{40, false}}) {
          expect_identical(replicas.self_knn(p), single.self_knn(p),
                           (on + ", k = " + std::to_string(p.k)).c_str());
          EXPECT_EQ(replicas.last_timings().by_position, cut) << on;
        }
        expect_identical(replicas.self_hybrid(hybrid).knn, single.self_hybrid(hybrid).knn,
                         (on + ", hybrid").c_str());
        EXPECT_EQ(replicas.last_timings().by_position, cut) << on;
      }
  }
}

// A cloud stored in spatial order (eight boxes far apart, stored box after box) has contiguous
// shares that are runs of the index's order: replicas search them as they are for host rows
// (their blocks come down while later passes search), and cut the order for rows kept on the
// devices (nothing to overlap there). The same points shuffled are cut for host rows too. Every
// way, one index's rows byte for byte.
TEST(Replicated, CloudInSpatialOrderSearchesContiguousSharesForHostRowsCuda) {
  PCNN_REQUIRE_DEVICE();
  std::vector<float> boxes;
  for (int b = 0; b < 8; ++b) {
    std::vector<float> box = make_synthetic_cloud(SyntheticKind::uniform, 20000, 80 + b);
    for (std::size_t i = 0; i < box.size(); i += 3) box[i] += 1000.0f * b;
    boxes.insert(boxes.end(), box.begin(), box.end());
  }
  std::vector<float> shuffled(boxes.size());
  std::vector<std::int64_t> order(boxes.size() / 3);
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = static_cast<std::int64_t>(i);
  std::shuffle(order.begin(), order.end(), std::mt19937_64(88));
  for (std::size_t i = 0; i < order.size(); ++i)
    std::copy_n(boxes.begin() + order[i] * 3, 3, shuffled.begin() + static_cast<long>(i) * 3);
  std::vector<std::vector<int>> device_sets = {{0, 0}};
  if (device_count() >= 2) device_sets.push_back({1, 0});
  const KnnParams p{8, true};
  for (const bool spatial : {true, false}) {
    const std::vector<float>& xyz = spatial ? boxes : shuffled;
    const PointsView refs = host_points(xyz.data(), static_cast<std::int64_t>(order.size()));
    IndexOptions io;
    io.backend = Backend::cuda;
    const KnnResult want = Index(refs, io).self_knn(p);
    for (const std::vector<int>& devices : device_sets) {
      PartitionedOptions po;
      po.index = io;
      po.devices = devices;
      po.layout = Layout::replicated;
      PartitionedIndex replicas(refs, po);
      const std::string on = std::string(spatial ? "spatial" : "shuffled") + " order, devices " +
                             std::to_string(devices[0]) + "," + std::to_string(devices[1]);
      const bool cut = cut_possible(devices);
      expect_identical(replicas.self_knn(p), want, (on + ", host rows").c_str());
      EXPECT_EQ(replicas.last_timings().by_position, cut && !spatial) << on;
      const auto rows = static_cast<std::int64_t>(order.size());
      expect_identical(rows_on_devices(replicas, rows, p.k,
                                       [&](const auto& sh) {
                                         replicas.self_knn_on_devices(p, sh);
                                         EXPECT_EQ(replicas.last_timings().by_position, cut) << on;
                                       }),
                       want, (on + ", device rows").c_str());
    }
  }
}

// A CUDA part's rows made global on the device are the same in one call and one piece as in
// many calls (each a sparse slice of the part, sorted on its own) and many pieces through the
// two page-locked buffers, self-search and separate queries, and equal the index's own rows.
TEST(PartCuda, RowsAreTheSameInAnyCallsAndPiecesCuda) {
  PCNN_REQUIRE_DEVICE();
  const auto xyz = make_synthetic_cloud(SyntheticKind::clustered, 6007, 31);
  const PointsView all = host_points(xyz.data(), 6007);
  const Partitioning cut(all, 2, 257);
  const auto ids = cut.assign(all);
  dist::Part part;
  part.take(cut, all, ids[1]);
  IndexOptions io;
  io.backend = Backend::cuda;
  part.build(io);
  const std::int64_t m = part.size();
  const auto qxyz = make_synthetic_cloud(SyntheticKind::uniform, 2503, 32);
  const dist::Packed packed = [&] {
    dist::Packed p(false);
    const PointsView qv = host_points(qxyz.data(), 2503);
    for (std::int64_t i = 0; i < 2503; ++i) p.push(qv, i);
    return p;
  }();
  const dist::Coords qc = packed.coords();
  for (const bool self : {true, false}) {
    const std::int64_t rows = self ? m : 2503;
    const KnnParams params{7, self};
    const auto run = [&](std::int64_t call_rows, std::int64_t piece_rows) {
      KnnResult r{rows, 7, std::vector<std::int32_t>(static_cast<std::size_t>(rows) * 7, -2),
                  std::vector<float>(static_cast<std::size_t>(rows) * 7)};
      dist::GlobalRows how;
      how.call_rows = call_rows;
      how.piece_rows = piece_rows;
      dist::knn_global_cuda(part, self ? nullptr : &qc, rows, params, 3, r.indices.data(),
                            r.sqdist.data(), how);
      return r;
    };
    const KnnResult once = run(0, 0);
    // The index's own rows, local indices made global.
    KnnResult want = self ? part.index->self_knn(params)
                          : part.index->knn(host_points(qxyz.data(), 2503), params);
    for (std::int32_t& i : want.indices)
      if (i >= 0) i = part.ids[static_cast<std::size_t>(i)];
    expect_identical(once, want, self ? "self, one call" : "queries, one call");
    expect_identical(run(0, 333), once, "one call, pieces of 333 rows");
    expect_identical(run(1000, 0), once, "calls of 1000 rows");
    expect_identical(run(1000, 250), once, "calls of 1000 rows, pieces of 250");
    expect_identical(run(997, 1), once, "pieces of one row");
    // Rows placed straight at their rows of a larger output (row j at row 2 (rows - 1 - j):
    // reversed, every other row left alone), in calls and pieces.
    std::vector<std::int32_t> place(static_cast<std::size_t>(rows));
    for (std::int64_t j = 0; j < rows; ++j)
      place[j] = static_cast<std::int32_t>(2 * (rows - 1 - j));
    const std::size_t cells = static_cast<std::size_t>(2 * rows) * 7;
    KnnResult placed{2 * rows, 7, std::vector<std::int32_t>(cells, -2), std::vector<float>(cells)};
    KnnResult want_placed = placed;
    for (std::int64_t j = 0; j < rows; ++j)
      for (int c = 0; c < 7; ++c) {
        want_placed.indices[place[j] * 7 + c] = once.indices[j * 7 + c];
        want_placed.sqdist[place[j] * 7 + c] = once.sqdist[j * 7 + c];
      }
    dist::GlobalRows how;
    how.place = place.data();
    how.call_rows = 1000;
    how.piece_rows = 250;
    dist::knn_global_cuda(part, self ? nullptr : &qc, rows, params, 3, placed.indices.data(),
                          placed.sqdist.data(), how);
    expect_identical(placed, want_placed, "rows placed in reverse, with gaps");
  }
}

// Device rows are refused where they cannot be: the spatial layout, shares that are not
// device_rows()'s, host memory, the wrong width.
TEST(Replicated, RowsOnTheDevicesRefusedWhenTheyDoNotMatchCuda) {
  PCNN_REQUIRE_DEVICE();
  const auto xyz = make_synthetic_cloud(SyntheticKind::uniform, 1000, 23);
  const PointsView refs = host_points(xyz.data(), 1000);
  PartitionedOptions po;
  po.index.backend = Backend::cuda;
  po.devices = {0, 0};
  po.layout = Layout::spatial;
  EXPECT_THROW((void)PartitionedIndex(refs, po).device_rows(1000), invalid_argument_error);
  po.layout = Layout::replicated;
  PartitionedIndex replicas(refs, po);
  EXPECT_THROW((void)replicas.device_rows(-1), invalid_argument_error);
  DeviceBlock idx(0, 1000 * 4 * 4), d2(0, 1000 * 4 * 4);
  const auto filled = [&](int k) {
    std::vector<DeviceRows> s = replicas.device_rows(1000);
    for (DeviceRows& r : s) {
      r.indices = {static_cast<std::int32_t*>(idx.p) + r.first_row * k, r.rows, k, Memory::device};
      r.sqdist = {static_cast<float*>(d2.p) + r.first_row * k, r.rows, k, Memory::device};
    }
    return s;
  };
  EXPECT_NO_THROW(replicas.self_knn_on_devices(KnnParams{4}, filled(4)));
  auto bad = filled(4);
  bad[1].first_row -= 1;
  EXPECT_THROW(replicas.self_knn_on_devices(KnnParams{4}, bad), invalid_argument_error);
  bad = filled(4);
  bad.pop_back();
  EXPECT_THROW(replicas.self_knn_on_devices(KnnParams{4}, bad), invalid_argument_error);
  bad = filled(4);
  bad[0].sqdist.memory = Memory::host;
  EXPECT_THROW(replicas.self_knn_on_devices(KnnParams{4}, bad), invalid_argument_error);
  EXPECT_THROW(replicas.self_knn_on_devices(KnnParams{3}, filled(4)), invalid_argument_error);
  std::vector<std::int32_t> host_idx(4000);
  bad = filled(4);
  bad[0].indices.data = host_idx.data();  // says device, is host memory
  EXPECT_THROW(replicas.self_knn_on_devices(KnnParams{4}, bad), invalid_argument_error);
  bad = filled(4);
  bad[1].sqdist.data = bad[0].sqdist.data + 2;  // overlaps share 0's distances
  EXPECT_THROW(replicas.self_knn_on_devices(KnnParams{4}, bad), invalid_argument_error);
  bad = filled(4);
  bad[1].sqdist.data = reinterpret_cast<float*>(bad[1].indices.data);  // one memory, two views
  EXPECT_THROW(replicas.self_knn_on_devices(KnnParams{4}, bad), invalid_argument_error);

  // An empty share: one query over two replicas (the first searches nothing).
  const std::vector<float> one_q(xyz.begin() + 30, xyz.begin() + 33);
  std::vector<DeviceRows> tiny = replicas.device_rows(1);
  ASSERT_EQ(tiny[0].rows, 0);
  ASSERT_EQ(tiny[1].rows, 1);
  tiny[1].indices = {static_cast<std::int32_t*>(idx.p), 1, 4, Memory::device};
  tiny[1].sqdist = {static_cast<float*>(d2.p), 1, 4, Memory::device};
  tiny[0].indices.memory = tiny[0].sqdist.memory = Memory::device;
  tiny[0].indices.cols = tiny[0].sqdist.cols = 4;
  replicas.knn_on_devices(host_points(one_q.data(), 1), KnnParams{4}, tiny);
  KnnResult got{1, 4, std::vector<std::int32_t>(4), std::vector<float>(4)};
  ASSERT_EQ(cudaMemcpy(got.indices.data(), idx.p, 16, cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(got.sqdist.data(), d2.p, 16, cudaMemcpyDeviceToHost), cudaSuccess);
  expect_identical(got, replicas.knn(host_points(one_q.data(), 1), KnnParams{4}), "empty share");
}

// A view on another device than its share's is refused before any share is searched.
TEST(Replicated, RowsOnAnotherDeviceAreRefusedCuda) {
  PCNN_REQUIRE_DEVICE();
  if (device_count() < 2) GTEST_SKIP() << "needs two CUDA devices, found " << device_count();
  const auto xyz = make_synthetic_cloud(SyntheticKind::uniform, 1000, 24);
  PartitionedOptions po;
  po.index.backend = Backend::cuda;
  po.devices = {0, 1};
  PartitionedIndex replicas(host_points(xyz.data(), 1000), po);
  DeviceBlock on0(0, 1000 * 4 * 4), on0d(0, 1000 * 4 * 4);
  std::vector<DeviceRows> s = replicas.device_rows(1000);
  for (DeviceRows& r : s) {  // every share on device 0's memory
    r.indices = {static_cast<std::int32_t*>(on0.p) + r.first_row * 4, r.rows, 4, Memory::device};
    r.sqdist = {static_cast<float*>(on0d.p) + r.first_row * 4, r.rows, 4, Memory::device};
  }
  EXPECT_THROW(replicas.self_knn_on_devices(KnnParams{4}, s), invalid_argument_error);
}

}  // namespace
}  // namespace pcnn

namespace pcnn {
namespace {

// Replicas on distinct devices upload a share of the points each and take the others' from
// their peers (dist::SpreadPoints): strided float points starting mid-page and float64 points,
// the same rows as one index, self and separate queries.
TEST(Replicated, PointsSpreadOverTheDevicesEqualOneIndexCuda) {
  PCNN_REQUIRE_DEVICE();
  if (device_count() < 2) GTEST_SKIP() << "needs two CUDA devices, found " << device_count();
  const std::int64_t n = 300007;
  const auto cloud = make_synthetic_cloud(SyntheticKind::clustered, n, 51);
  std::vector<float> strided(1 + static_cast<std::size_t>(n) * 5, 3.0f);
  for (std::int64_t i = 0; i < n; ++i)
    std::copy_n(&cloud[3 * i], 3, &strided[1 + 5 * i]);  // one float in: not page-aligned
  std::vector<double> xyz64;
  for (std::int64_t i = 0; i < n; ++i)
    xyz64.insert(xyz64.end(), {512345.0 + cloud[3 * i] * 1e-3, 5412345.0 + cloud[3 * i + 1] * 1e-3,
                               230.0 + cloud[3 * i + 2] * 1e-3});
  const auto q = make_synthetic_cloud(SyntheticKind::uniform, 5001, 52);
  IndexOptions io;
  io.backend = Backend::cuda;
  PartitionedOptions po;
  po.index = io;
  po.devices = {1, 0};
  for (const PointsView refs :
       {host_points(strided.data() + 1, n, 5), host_points(xyz64.data(), n)}) {
    Index single(refs, io);
    PartitionedIndex replicas(refs, po);
    ASSERT_TRUE(replicas.replicated());
    expect_identical(replicas.self_knn({8, true}), single.self_knn({8, true}),
                     refs.is_double() ? "float64, self" : "strided, self");
    if (!refs.is_double())
      expect_identical(replicas.knn(host_points(q.data(), 5001), {5}),
                       single.knn(host_points(q.data(), 5001), {5}), "strided, queries");
  }
}

// Shares of more than two 32 MB chunks (the chunks reused): 11.2M points, 67 MB a device.
TEST(Replicated, LargeSharesThroughTheChunksEqualOneIndexCuda) {
  PCNN_REQUIRE_DEVICE();
  if (device_count() < 2) GTEST_SKIP() << "needs two CUDA devices, found " << device_count();
  const std::int64_t n = 11200000;
  const auto cloud = make_synthetic_cloud(SyntheticKind::uniform, n, 53);
  IndexOptions io;
  io.backend = Backend::cuda;
  PartitionedOptions po;
  po.index = io;
  po.devices = {0, 1};
  const PointsView refs = host_points(cloud.data(), n);
  PartitionedIndex replicas(refs, po);
  ASSERT_TRUE(replicas.replicated());
  expect_identical(replicas.self_knn({1, true}), Index(refs, io).self_knn({1, true}),
                   "11.2M, self");
}

// What the replicated layout does, without it: shares of a self-search's rows (exact ties
// everywhere on a lattice, k = 27 excluding self), first one index after the other, then eight
// indexes of one device at once from eight threads.
TEST(Replicated, SelfRowsOfALatticeEqualTheWholeSearchCuda) {
  PCNN_REQUIRE_DEVICE();
  const std::vector<float> xyz = test::lattice(16);
  const std::int64_t n = static_cast<std::int64_t>(xyz.size() / 3);
  const PointsView refs = host_points(xyz.data(), n);
  IndexOptions io;
  io.backend = Backend::cuda;
  const KnnParams params{27, true};
  Index single(refs, io);
  const KnnResult want = single.self_knn(params);
  KnnResult got = want;
  for (const bool threads : {false, true}) {
    std::fill(got.indices.begin(), got.indices.end(), -2);
    std::vector<Index> indexes;
    for (int d = 0; d < 8; ++d)
      indexes.emplace_back(refs, io);  // built in turn (see build_replicas)
    const PageLock l1(got.indices.data(), got.indices.size() * 4);
    const PageLock l2(got.sqdist.data(), got.sqdist.size() * 4);
    dist::for_each(8, threads, [&](int d) {
      const std::int64_t a = n * d / 8, b = n * (d + 1) / 8;
      indexes[d].self_knn_rows(a, params, {got.indices.data() + a * 27, b - a, 27},
                               {got.sqdist.data() + a * 27, b - a, 27});
    });
    expect_identical(got, want, threads ? "shares from eight threads" : "shares in turn");
  }
}

}  // namespace
}  // namespace pcnn
