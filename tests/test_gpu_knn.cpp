// GPU kNN against the exact double-precision reference. Skips (saying why) without a device.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <memory>
#include <ostream>
#include <string>

#include "gpu_test.hpp"
#include "pcnn/device.hpp"
#include "pcnn/error.hpp"
#include "pcnn/knn.hpp"
#include "pcnn/knn_index.hpp"
#include "pcnn/recenter.hpp"
#include "pcnn/reference.hpp"
#include "test_clouds.hpp"

namespace pcnn {
namespace {

enum class Input {
  uniform,
  clustered,
  lidar,
  lattice,
  duplicates,
  outliers,   // uniform in a 100 m cube, plus a few points kilometers away
  identical,  // every point the same
  plane,      // a tilted plane
  line,       // points on a line
};

const char* name(Input in) {
  switch (in) {
    case Input::uniform:
      return "uniform";
    case Input::clustered:
      return "clustered";
    case Input::lidar:
      return "lidar";
    case Input::lattice:
      return "lattice";
    case Input::duplicates:
      return "duplicates";
    case Input::outliers:
      return "outliers";
    case Input::identical:
      return "identical";
    case Input::plane:
      return "plane";
    case Input::line:
      return "line";
  }
  return "?";
}

std::vector<float> make(Input in, int n, std::uint64_t seed) {
  switch (in) {
    case Input::uniform:
      return make_synthetic_cloud(SyntheticKind::uniform, n, seed);
    case Input::clustered:
      return make_synthetic_cloud(SyntheticKind::clustered, n, seed);
    case Input::lidar:
      return make_synthetic_cloud(SyntheticKind::lidar, n, seed);
    case Input::lattice:
      return test::lattice(static_cast<int>(std::lround(std::cbrt(n))));
    case Input::duplicates:
      return test::duplicates(n / 8 > 0 ? n / 8 : 1, 8, seed);
    case Input::outliers:
      return test::with_outliers(n, seed);
    case Input::identical:
      return std::vector<float>(static_cast<std::size_t>(n) * 3, 2.5f);
    case Input::plane:
      return test::plane(n, seed);
    case Input::line:
      return test::line(n, seed);
  }
  return {};
}

struct KnnCase {
  Algorithm algorithm;
  Input input;
  int n;        // references (lattice: rounded to a cube)
  int queries;  // 0: self-search
  Input query_input;
  int k;
  bool exclude_self;
  double bad_fraction;  // points made non-finite, in references and queries
  std::uint64_t seed;
};

std::ostream& operator<<(std::ostream& os, const KnnCase& c) {
  os << to_string(c.algorithm) << " " << name(c.input) << " n=" << c.n;
  if (c.queries) os << " queries=" << name(c.query_input) << ":" << c.queries;
  return os << " k=" << c.k << (c.exclude_self ? " exclude-self" : "")
            << (c.bad_fraction > 0 ? " with non-finite points" : "") << " seed=" << c.seed;
}

class GpuKnn : public ::testing::TestWithParam<KnnCase> {
 protected:
  void SetUp() override { PCNN_REQUIRE_DEVICE(); }
};

TEST_P(GpuKnn, MatchesDoubleReference) {
  const KnnCase c = GetParam();
  std::vector<float> refs = make(c.input, c.n, c.seed);
  std::vector<float> qs =
      c.queries ? make(c.query_input, c.queries, c.seed + 1) : std::vector<float>{};
  if (c.bad_fraction > 0) {
    test::poison(refs, c.bad_fraction, c.seed + 2);
    test::poison(qs, c.bad_fraction, c.seed + 3);
  }
  const PointsView rv{refs.data(), static_cast<std::int64_t>(refs.size() / 3), 3};
  const PointsView qv{qs.data(), static_cast<std::int64_t>(qs.size() / 3), 3};
  const PointsView* qp = c.queries ? &qv : nullptr;
  const KnnParams params{c.k, c.exclude_self};

  GpuKnnTimings t;
  const KnnResult gpu = gpu_knn(rv, qp, params, c.algorithm, &t);
  EXPECT_EQ(t.algorithm, c.algorithm);
  const KnnResult ref = reference_knn(rv, qp, params);
  ASSERT_EQ(gpu.rows, ref.rows);
  ASSERT_EQ(gpu.indices.size(), ref.indices.size());
  const KnnAgreement ag = compare_knn(rv, qp, gpu, ref, c.exclude_self);
  EXPECT_TRUE(ag.all_agree()) << ag.first_problem;
  // Where float distances are exact (integer lattices, exact duplicates), ties must resolve
  // exactly as the reference does: to the smaller index.
  if (c.input == Input::lattice || c.input == Input::duplicates || c.input == Input::identical) {
    EXPECT_EQ(ag.identical_rows, ag.rows) << "tie-break differs from (distance, index) order";
  }
}

std::vector<KnnCase> cases() {
  std::vector<KnnCase> v;
  const Algorithm B = Algorithm::brute_force, G = Algorithm::grid;
  for (int k : {1, 2, 8, 33, 64, 128})
    v.push_back({B, Input::uniform, 3000, 0, Input::uniform, k, false, 0, 10u + k});
  for (int k : {1, 8, 33, 64})
    v.push_back({B, Input::uniform, 3000, 0, Input::uniform, k, true, 0, 20u + k});
  v.push_back({B, Input::clustered, 5000, 0, Input::uniform, 16, true, 0, 31});
  v.push_back({B, Input::lidar, 6000, 0, Input::uniform, 8, false, 0, 32});
  v.push_back({B, Input::uniform, 20000, 0, Input::uniform, 8, false, 0, 33});
  v.push_back({B, Input::uniform, 20000, 0, Input::uniform, 64, true, 0, 34});
  // Sizes 0 and 1, and k larger than the number of points.
  v.push_back({B, Input::uniform, 0, 0, Input::uniform, 4, false, 0, 40});
  v.push_back({B, Input::uniform, 1, 0, Input::uniform, 4, false, 0, 41});
  v.push_back({B, Input::uniform, 1, 0, Input::uniform, 4, true, 0, 42});
  v.push_back({B, Input::uniform, 5, 0, Input::uniform, 8, false, 0, 43});
  v.push_back({B, Input::uniform, 100, 0, Input::uniform, 128, true, 0, 44});
  v.push_back({B, Input::uniform, 0, 50, Input::uniform, 3, false, 0, 45});
  // Exact ties.
  v.push_back({B, Input::lattice, 1728, 0, Input::uniform, 8, false, 0, 50});
  v.push_back({B, Input::lattice, 1728, 0, Input::uniform, 27, true, 0, 51});
  v.push_back({B, Input::lattice, 4096, 0, Input::uniform, 64, false, 0, 52});
  v.push_back({B, Input::duplicates, 4000, 0, Input::uniform, 8, false, 0, 53});
  v.push_back({B, Input::duplicates, 4000, 0, Input::uniform, 8, true, 0, 54});
  v.push_back({B, Input::duplicates, 4000, 0, Input::uniform, 20, true, 0, 55});
  // A separate query set.
  v.push_back({B, Input::uniform, 4000, 1500, Input::clustered, 16, false, 0, 60});
  v.push_back({B, Input::lidar, 5000, 2000, Input::lidar, 1, false, 0, 61});
  v.push_back({B, Input::lattice, 1000, 700, Input::uniform, 9, false, 0, 62});
  // Non-finite points in references and queries.
  v.push_back({B, Input::uniform, 3000, 0, Input::uniform, 8, true, 0.1, 70});
  v.push_back({B, Input::clustered, 3000, 1000, Input::uniform, 12, false, 0.2, 71});
  v.push_back({B, Input::uniform, 40, 0, Input::uniform, 64, false, 0.5, 72});
  // Every case above for both algorithms.
  for (std::size_t i = 0, n = v.size(); i < n; ++i) {
    v.push_back(v[i]);
    v.back().algorithm = G;
  }
  // Inputs that break simple uniform grids: far outliers, degenerate shapes, one point many
  // times; k from 1 to 64.
  for (Algorithm alg : {B, G}) {
    for (int k : {1, 8, 64}) {
      v.push_back({alg, Input::outliers, 6000, 0, Input::uniform, k, true, 0, 80u + k});
      v.push_back({alg, Input::plane, 5000, 0, Input::uniform, k, false, 0, 81u + k});
      v.push_back({alg, Input::line, 3000, 0, Input::uniform, k, true, 0, 82u + k});
    }
    v.push_back({alg, Input::identical, 500, 0, Input::uniform, 16, false, 0, 83});
    v.push_back({alg, Input::identical, 500, 0, Input::uniform, 16, true, 0, 84});
    v.push_back({alg, Input::outliers, 4000, 3000, Input::outliers, 32, false, 0, 85});
    v.push_back({alg, Input::lidar, 8000, 0, Input::uniform, 33, true, 0.05, 86});
  }
  // Larger clouds, where the tree has several levels.
  v.push_back({G, Input::lidar, 60000, 0, Input::uniform, 16, true, 0, 87});
  v.push_back({G, Input::clustered, 50000, 20000, Input::lidar, 8, false, 0, 88});
  return v;
}

// Readable names (grid_lidar_n6000_k8_self_seed32), so that a failure says what it was and a
// --gtest_filter can pick cases by size.
std::string case_name(const ::testing::TestParamInfo<KnnCase>& info) {
  const KnnCase& c = info.param;
  std::string s =
      std::string(to_string(c.algorithm)) + "_" + name(c.input) + "_n" + std::to_string(c.n);
  if (c.queries) s += "_q" + std::string(name(c.query_input)) + std::to_string(c.queries);
  s += "_k" + std::to_string(c.k) + (c.exclude_self ? "_noself" : "") +
       (c.bad_fraction > 0 ? "_nonfinite" : "") + "_seed" + std::to_string(c.seed);
  return s;
}

INSTANTIATE_TEST_SUITE_P(Cases, GpuKnn, ::testing::ValuesIn(cases()), case_name);

TEST(GpuKnnTranslation, TranslatedByAMillionGivesTheSameNeighbors) {
  PCNN_REQUIRE_DEVICE();
  const std::vector<float> base = make_synthetic_cloud(SyntheticKind::clustered, 8000, 90);
  std::vector<double> near(base.begin(), base.end()), far(near);
  for (std::size_t i = 0; i < far.size(); ++i) far[i] += 1e6 + 3e5 * (i % 3);
  const auto n = static_cast<std::int64_t>(base.size() / 3);
  const std::vector<float> a = recenter(near.data(), n, bounding_box_center(near.data(), n));
  const std::vector<float> b = recenter(far.data(), n, bounding_box_center(far.data(), n));
  const KnnParams params{16, true};
  const KnnResult ra = gpu_knn({a.data(), n, 3}, nullptr, params, Algorithm::grid);
  const KnnResult rb = gpu_knn({b.data(), n, 3}, nullptr, params, Algorithm::grid);
  EXPECT_EQ(ra.indices, rb.indices);
  const KnnResult ref = reference_knn({a.data(), n, 3}, nullptr, params);
  const PointsView av{a.data(), n, 3};
  EXPECT_TRUE(compare_knn(av, nullptr, rb, ref, true).all_agree());
}

TEST(GpuKnnLayout, StridedPointsGiveTheSameResultAsPacked) {
  PCNN_REQUIRE_DEVICE();
  const std::vector<float> packed = make_synthetic_cloud(SyntheticKind::uniform, 2500, 91);
  std::vector<float> strided;  // like pcl::PointXYZ: x y z and one padding float
  for (std::size_t i = 0; i < packed.size(); i += 3)
    strided.insert(strided.end(), {packed[i], packed[i + 1], packed[i + 2], -7.f});
  const KnnParams params{10, false};
  for (Algorithm alg : {Algorithm::brute_force, Algorithm::grid}) {
    const KnnResult a = gpu_knn({packed.data(), 2500, 3}, nullptr, params, alg);
    const KnnResult b = gpu_knn({strided.data(), 2500, 4}, nullptr, params, alg);
    EXPECT_EQ(a.indices, b.indices) << to_string(alg);
    EXPECT_EQ(a.sqdist, b.sqdist) << to_string(alg);
  }
}

TEST(GpuKnnTimings, PartsAreReported) {
  PCNN_REQUIRE_DEVICE();
  const std::vector<float> pts = make_synthetic_cloud(SyntheticKind::uniform, 5000, 92);
  GpuKnnTimings t;
  gpu_knn({pts.data(), 5000, 3}, nullptr, {8, false}, Algorithm::grid, &t);
  EXPECT_EQ(t.algorithm, Algorithm::grid);
  EXPECT_GT(t.search_ms, 0.f);
  EXPECT_GE(t.upload_ms, 0.f);
  EXPECT_GE(t.download_ms, 0.f);
}

// Argument checks come before any device work, so these run without a GPU too.
TEST(GpuKnnAlgorithms, GridAndBruteForceAgreeExactlyOnALargerCloud) {
  PCNN_REQUIRE_DEVICE();
  const std::vector<float> pts = make_synthetic_cloud(SyntheticKind::lidar, 100000, 93);
  const PointsView v{pts.data(), 100000, 3};
  const KnnResult a = gpu_knn(v, nullptr, {12, true}, Algorithm::brute_force);
  const KnnResult b = gpu_knn(v, nullptr, {12, true}, Algorithm::grid);
  const KnnAgreement ag = compare_knn(v, nullptr, a, b, true);
  EXPECT_TRUE(ag.all_agree()) << ag.first_problem;
  // Same float distances and the same tie-break: the rows are the same, not just equivalent.
  EXPECT_EQ(ag.identical_rows, ag.rows);
}

TEST(KnnAlgorithmChoice, NamesAndAutomaticChoice) {
  EXPECT_EQ(parse_algorithm("grid"), Algorithm::grid);
  EXPECT_EQ(parse_algorithm("brute"), Algorithm::brute_force);
  EXPECT_EQ(parse_algorithm("auto"), Algorithm::automatic);
  EXPECT_THROW(parse_algorithm("kdtree"), error);
  EXPECT_EQ(choose_algorithm(100, 100), Algorithm::brute_force);
  EXPECT_EQ(choose_algorithm(1000000, 1000000), Algorithm::grid);
}

TEST(KnnArguments, InvalidArgumentsThrow) {
  const std::vector<float> pts = make_synthetic_cloud(SyntheticKind::uniform, 10, 93);
  const PointsView v{pts.data(), 10, 3};
  EXPECT_THROW(gpu_knn(v, nullptr, {0, false}), error);
  EXPECT_THROW(gpu_knn(v, nullptr, {-3, false}), error);
  EXPECT_THROW(gpu_knn(v, nullptr, {kMaxK + 1, false}), error);
  EXPECT_THROW(gpu_knn({nullptr, 10, 3}, nullptr, {4, false}), error);
  EXPECT_THROW(gpu_knn({pts.data(), 3, 2}, nullptr, {4, false}), error);
  EXPECT_THROW(gpu_knn({pts.data(), -1, 3}, nullptr, {4, false}), error);
  EXPECT_THROW(gpu_knn(v, &v, {4, true}), error);
  EXPECT_THROW(reference_knn(v, nullptr, {0, false}), error);
}

}  // namespace
}  // namespace pcnn

namespace pcnn {
namespace {

TEST(GpuKnnIndex, ReusedAcrossFramesMatchesOneShotSearch) {
  PCNN_REQUIRE_DEVICE();
  const std::vector<float> map = make_synthetic_cloud(SyntheticKind::lidar, 40000, 95);
  const PointsView mv{map.data(), 40000, 3};
  KnnIndex index(mv);
  EXPECT_EQ(index.size(), 40000);
  EXPECT_EQ(index.finite_size(), 40000);
  for (std::uint64_t frame = 0; frame < 3; ++frame) {
    std::vector<float> scan = make_synthetic_cloud(SyntheticKind::lidar, 5000, 200 + frame);
    test::poison(scan, 0.01, frame);
    const PointsView sv{scan.data(), 5000, 3};
    GpuKnnTimings t;
    const KnnResult a = index.query(sv, {6, false}, &t);
    const KnnResult b = gpu_knn(mv, &sv, {6, false}, Algorithm::grid);
    EXPECT_EQ(a.indices, b.indices) << "frame " << frame;
    EXPECT_EQ(a.sqdist, b.sqdist) << "frame " << frame;
    EXPECT_GT(t.search_ms, 0.f);
  }
  KnnIndex moved = std::move(index);
  EXPECT_EQ(moved.size(), 40000);
  EXPECT_THROW(moved.query(mv, {4, true}), error);
}

}  // namespace
}  // namespace pcnn

namespace pcnn {
namespace {

TEST(GpuKnnIndex, OutlivesTheStreamItWasBuiltOn) {
  PCNN_REQUIRE_DEVICE();
  const std::vector<float> map = make_synthetic_cloud(SyntheticKind::uniform, 20000, 96);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  auto index = std::make_unique<KnnIndex>(PointsView{map.data(), 20000, 3}, stream);
  const KnnResult a = index->query({map.data(), 100, 3}, {4, false}, nullptr, stream);
  ASSERT_EQ(cudaStreamDestroy(stream), cudaSuccess);
  const KnnResult b = index->query({map.data(), 100, 3}, {4, false});  // the default stream
  EXPECT_EQ(a.indices, b.indices);
  index.reset();  // frees on the default stream: no use of the destroyed one
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

}  // namespace
}  // namespace pcnn
