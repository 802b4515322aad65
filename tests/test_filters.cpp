// GPU statistics against the long-double reference, and GPU outlier filters against PCL's
// filters: the same inlier sets. GPU tests skip (saying why) without a device.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <ostream>
#include <vector>

#include "gpu_test.hpp"
#include "pcnn/device.hpp"
#include "pcnn/error.hpp"
#include "pcnn/filters.hpp"
#include "pcnn/stats.hpp"
#include "pcnn/testing/baseline.hpp"
#include "pcnn/testing/stats_reference.hpp"
#include "pcnn/testing/synthetic.hpp"
#include "test_clouds.hpp"

namespace pcnn {
namespace {

void expect_close(double got, double want, double rel, const char* what) {
  EXPECT_NEAR(got, want, rel * std::max(1.0, std::fabs(want))) << what;
}

class Stats : public ::testing::TestWithParam<int> {};

TEST_P(Stats, MatchReference) {
  PCNN_REQUIRE_DEVICE();
  const int n = GetParam();
  for (double offset : {0.0, 1e6}) {
    std::vector<float> xyz = make_synthetic_cloud(SyntheticKind::clustered, n, 11 + n);
    test::poison(xyz, 0.05, 12);
    for (std::size_t i = 0; i < xyz.size(); ++i) xyz[i] += static_cast<float>(offset);
    const PointsView v{xyz.data(), n, 3};
    const CloudStats g = gpu_cloud_stats(v);
    const CloudStats r = reference_cloud_stats(v);
    ASSERT_EQ(g.count, n);
    ASSERT_EQ(g.finite, r.finite) << "offset " << offset;
    if (r.finite == 0) continue;
    for (int a = 0; a < 3; ++a) {
      EXPECT_EQ(g.min[a], r.min[a]);
      EXPECT_EQ(g.max[a], r.max[a]);
      expect_close(g.centroid[a], r.centroid[a], 1e-12, "centroid");
    }
    // Raw sums of products lose digits to cancellation at a 1e6 offset (double keeps ~1e-16
    // of 1e12); the result must still be good to 1e-6 of the spread.
    const double scale = std::max(1.0, r.covariance[0] + r.covariance[3] + r.covariance[5]);
    for (int c = 0; c < 6; ++c)
      EXPECT_NEAR(g.covariance[c], r.covariance[c], (offset ? 1e-6 : 1e-10) * scale)
          << "covariance " << c << " offset " << offset;
    const CloudStats again = gpu_cloud_stats(v);
    EXPECT_EQ(again.covariance, g.covariance) << "not deterministic";
  }
}

TEST(StatsDevice, DeviceViewsGiveTheHostViewResult) {
  PCNN_REQUIRE_DEVICE();
  const int n = 50000;
  std::vector<float> xyz = make_synthetic_cloud(SyntheticKind::lidar, n, 13);
  test::poison(xyz, 0.02, 14);
  std::vector<float> strided;  // like pcl::PointXYZ
  for (std::size_t i = 0; i < xyz.size(); i += 3)
    strided.insert(strided.end(), {xyz[i], xyz[i + 1], xyz[i + 2], 0.f});
  float *packed_d = nullptr, *strided_d = nullptr;
  ASSERT_EQ(cudaMalloc(&packed_d, xyz.size() * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&strided_d, strided.size() * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(packed_d, xyz.data(), xyz.size() * sizeof(float), cudaMemcpyHostToDevice),
            cudaSuccess);
  ASSERT_EQ(
      cudaMemcpy(strided_d, strided.data(), strided.size() * sizeof(float), cudaMemcpyHostToDevice),
      cudaSuccess);
  const CloudStats h = gpu_cloud_stats(host_points(xyz.data(), n));
  const CloudStats d = gpu_cloud_stats(device_points(packed_d, n));
  const CloudStats s = gpu_cloud_stats(device_points(strided_d, n, 4));
  const CloudStats r = reference_cloud_stats(host_points(xyz.data(), n));
  // The same points in the same layout: the same deterministic reduction, to the bit.
  EXPECT_EQ(d.count, n);
  EXPECT_EQ(d.finite, h.finite);
  EXPECT_EQ(d.min, h.min);
  EXPECT_EQ(d.max, h.max);
  EXPECT_EQ(d.centroid, h.centroid);
  EXPECT_EQ(d.covariance, h.covariance);
  // Strided in device memory: against the reference.
  EXPECT_EQ(s.finite, r.finite);
  const double scale = std::max(1.0, r.covariance[0] + r.covariance[3] + r.covariance[5]);
  for (int a = 0; a < 3; ++a) {
    EXPECT_EQ(s.min[a], r.min[a]);
    EXPECT_EQ(s.max[a], r.max[a]);
    expect_close(s.centroid[a], r.centroid[a], 1e-12, "strided centroid");
  }
  for (int c = 0; c < 6; ++c) EXPECT_NEAR(s.covariance[c], r.covariance[c], 1e-10 * scale) << c;
  EXPECT_THROW(gpu_cloud_stats(device_points(static_cast<const float*>(nullptr), 10)),
               invalid_argument_error);
  EXPECT_EQ(cudaFree(packed_d), cudaSuccess);
  EXPECT_EQ(cudaFree(strided_d), cudaSuccess);
}

INSTANTIATE_TEST_SUITE_P(Sizes, Stats, ::testing::Values(0, 1, 31, 32, 33, 1025, 100003));

TEST(StatsLarge, TenMillionPointsStrided) {
  PCNN_REQUIRE_DEVICE();
  const int n = 10000000;
  std::vector<float> xyz = make_synthetic_cloud(SyntheticKind::uniform, n, 5);
  std::vector<float> strided;  // stride 4, like pcl::PointXYZ
  strided.reserve(4 * static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < xyz.size(); i += 3)
    strided.insert(strided.end(), {xyz[i], xyz[i + 1], xyz[i + 2], 0.f});
  const CloudStats a = gpu_cloud_stats({xyz.data(), n, 3});
  const CloudStats b = gpu_cloud_stats({strided.data(), n, 4});
  const CloudStats r = reference_cloud_stats({xyz.data(), n, 3});
  EXPECT_EQ(a.finite, n);
  for (int a3 = 0; a3 < 3; ++a3) {
    expect_close(a.centroid[a3], r.centroid[a3], 1e-12, "centroid");
    expect_close(b.centroid[a3], r.centroid[a3], 1e-12, "strided centroid");
  }
  for (int c = 0; c < 6; ++c) EXPECT_NEAR(a.covariance[c], r.covariance[c], 1e-8 * 833);
}

struct FilterCase {
  SyntheticKind kind;
  int n;
  double bad_fraction;
  int mean_k;
  double std_mul;
  double radius;
  int min_neighbors;
};
std::ostream& operator<<(std::ostream& os, const FilterCase& c) {
  return os << to_string(c.kind) << " n=" << c.n << " bad=" << c.bad_fraction
            << " sor(k=" << c.mean_k << ", mul=" << c.std_mul << ") ror(r=" << c.radius
            << ", min=" << c.min_neighbors << ")";
}

class Filters : public ::testing::TestWithParam<FilterCase> {};

TEST_P(Filters, SameInliersAsPcl) {
  PCNN_REQUIRE_DEVICE();
  const FilterCase c = GetParam();
  std::vector<float> xyz = make_synthetic_cloud(c.kind, c.n, 77);
  test::poison(xyz, c.bad_fraction, 78);
  const PointsView v{xyz.data(), c.n, 3};

  const FilterResult g = gpu_statistical_outlier_removal(v, {c.mean_k, c.std_mul});
  const FilterResult p = pcl_statistical_outlier_removal(v, {c.mean_k, c.std_mul});
  EXPECT_EQ(g.kept, p.kept) << "SOR kept " << g.kept.size() << " vs PCL " << p.kept.size();
  EXPECT_LT(g.kept.size(), static_cast<std::size_t>(c.n)) << "SOR removed nothing";

  const FilterResult gr = gpu_radius_outlier_removal(v, {c.radius, c.min_neighbors});
  const FilterResult pr = pcl_radius_outlier_removal(v, {c.radius, c.min_neighbors});
  EXPECT_EQ(gr.kept, pr.kept) << "ROR kept " << gr.kept.size() << " vs PCL " << pr.kept.size();
  EXPECT_LT(gr.kept.size(), static_cast<std::size_t>(c.n)) << "ROR removed nothing";
  EXPECT_GT(gr.kept.size(), 0u) << "ROR kept nothing";
}

INSTANTIATE_TEST_SUITE_P(
    Clouds, Filters,
    ::testing::Values(FilterCase{SyntheticKind::uniform, 20000, 0, 8, 1.0, 4.0, 4},
                      FilterCase{SyntheticKind::uniform, 20000, 0.02, 16, 0.5, 5.0, 6},
                      FilterCase{SyntheticKind::clustered, 30000, 0, 16, 1.0, 1.0, 8},
                      FilterCase{SyntheticKind::clustered, 30000, 0.01, 4, 2.0, 0.6, 2},
                      FilterCase{SyntheticKind::lidar, 50000, 0, 16, 1.0, 0.2, 5},
                      FilterCase{SyntheticKind::lidar, 50000, 0.03, 32, 1.5, 0.3, 10}));

TEST(FilterArguments, InvalidParametersThrow) {
  const std::vector<float> xyz = make_synthetic_cloud(SyntheticKind::uniform, 100, 1);
  const PointsView v{xyz.data(), 100, 3};
  EXPECT_THROW(gpu_statistical_outlier_removal(v, {0, 1.0}), error);
  EXPECT_THROW(gpu_statistical_outlier_removal(v, {200, 1.0}), error);
  EXPECT_THROW(gpu_statistical_outlier_removal(v, {8, NAN}), error);
  EXPECT_THROW(gpu_radius_outlier_removal(v, {0.0, 3}), error);
  EXPECT_THROW(gpu_radius_outlier_removal(v, {-1.0, 3}), error);
  EXPECT_THROW(gpu_radius_outlier_removal(v, {1.0, -1}), error);
}

}  // namespace
}  // namespace pcnn
