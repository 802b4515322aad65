// The partitioned index (several parts, tiles) against one pcnn::Index over the whole cloud:
// byte-identical rows on adversarial clouds — duplicates cut across parts, lattices full of exact
// ties, identical points, non-finite points, k larger than the cloud, far outliers — and against
// the exact double-precision reference.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <ostream>
#include <string>
#include <vector>

#include "dist/part.hpp"
#include "gpu_test.hpp"
#include "pcnn/distributed.hpp"
#include "pcnn/error.hpp"
#include "pcnn/index.hpp"
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

class PartitionedKnn : public ::testing::TestWithParam<Case> {};

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

  // Spatial parts; on CUDA, untiled, also replicas of the whole cloud sharing out the rows.
  std::vector<Layout> layouts{Layout::spatial};
  if (backend == Backend::cuda && !c.tiles) layouts.push_back(Layout::replicated);
  for (const Layout layout : layouts) {
    PartitionedOptions po;
    po.index = io;
    po.layout = layout;
    po.sample = 257;  // a small sample: cuts fall between duplicates and on lattice planes
    if (c.tiles)
      po.tiles = c.parts;
    else
      po.devices = std::vector<int>(static_cast<std::size_t>(c.parts), 0);
    // CUDA: the parts may share device 0 (each with its own pool): the lead's machine has two.
    PartitionedIndex parted(refs, po);
    EXPECT_EQ(parted.replicated(), layout == Layout::replicated);
    EXPECT_EQ(parted.parts(), c.parts);
    const KnnResult got = c.queries ? parted.knn(qv, params) : parted.self_knn(params);
    expect_identical(got, want,
                     layout == Layout::replicated ? "replicas vs one index" : "parts vs one index");
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

TEST(Partitioning, ForwardsQueriesNearACut) {
  const auto xyz = make_synthetic_cloud(SyntheticKind::uniform, 5000, 8);
  PartitionedOptions po;
  po.index.backend = Backend::cpu;
  po.devices = {0, 1};
  PartitionedIndex index(host_points(xyz.data(), 5000), po);
  (void)index.self_knn(KnnParams{8});
  const PartitionedTimings& t = index.last_timings();
  ASSERT_EQ(t.parts.size(), 2u);
  EXPECT_GT(t.queries_forwarded, 0);
  EXPECT_LT(t.queries_forwarded, 2500);  // only those near the cut
  EXPECT_EQ(t.parts[0].points + t.parts[1].points, 5000);
  EXPECT_EQ(t.parts[0].queries_received, t.parts[1].queries_forwarded);
}

TEST(Partitioning, InvalidArguments) {
  const auto xyz = make_synthetic_cloud(SyntheticKind::uniform, 100, 8);
  PartitionedOptions po;
  po.index.backend = Backend::cpu;
  po.devices = {0, 1};
  PartitionedIndex index(host_points(xyz.data(), 100), po);
  EXPECT_THROW((void)index.self_knn(KnnParams{0}), invalid_argument_error);
  EXPECT_THROW((void)index.self_knn(KnnParams{kMaxK + 1}), invalid_argument_error);
  const PointsView q = host_points(xyz.data(), 10);
  EXPECT_THROW((void)index.knn(q, KnnParams{4, true}), invalid_argument_error);
  EXPECT_THROW(Partitioning(host_points(xyz.data(), 100), 0), invalid_argument_error);
  EXPECT_THROW((void)parse_devices("0,x", Backend::cpu), invalid_argument_error);
  EXPECT_THROW((void)parse_devices("", Backend::cpu), invalid_argument_error);
  EXPECT_EQ(parse_devices("0,1", Backend::cpu), (std::vector<int>{0, 1}));
}

// Spatial parts take float32 coordinates: float64 views (references or queries) are refused with
// a message that says so, never read as floats.
TEST(Partitioning, RefusesFloat64Views) {
  const auto xyz = make_synthetic_cloud(SyntheticKind::uniform, 100, 8);
  const std::vector<double> xyz64(xyz.begin(), xyz.end());
  const PointsView v64 = host_points(xyz64.data(), 100);
  PartitionedOptions po;
  po.index.backend = Backend::cpu;
  po.devices = {0, 1};
  try {
    PartitionedIndex refused(v64, po);
    ADD_FAILURE() << "a float64 view was accepted";
  } catch (const invalid_argument_error& e) {
    EXPECT_NE(std::string(e.what()).find("float64"), std::string::npos) << e.what();
  }
  EXPECT_THROW(Partitioning(v64, 2), invalid_argument_error);
  PartitionedIndex index(host_points(xyz.data(), 100), po);
  EXPECT_THROW((void)index.partitioning().assign(v64), invalid_argument_error);
  EXPECT_THROW((void)index.knn(host_points(xyz64.data(), 10), KnnParams{4}),
               invalid_argument_error);
  EXPECT_EQ(index.knn(host_points(xyz.data(), 10), KnnParams{4}).rows, 10);  // float32 still works
}

// Replicas of the whole cloud: the CPU backend has no devices to replicate over; on CUDA they
// read float64 coordinates as one index does (spatial parts do not yet), rows split unevenly.
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

}  // namespace
}  // namespace pcnn

namespace pcnn {
namespace {

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
    const dist::PortableLock l1(got.indices.data(), got.indices.size() * 4);
    const dist::PortableLock l2(got.sqdist.data(), got.sqdist.size() * 4);
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
