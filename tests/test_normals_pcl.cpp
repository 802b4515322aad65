// pcnn's normals against PCL's NormalEstimation (pcl::NormalEstimationOMP) on data/sample.pcd:
// the same points without a normal, normals at a small angle (|dot|, and the same side after
// orientation towards the viewpoint), the same curvature. PCL computes in float (covariance and
// eigenvectors) and pcnn in double, so they differ by PCL's rounding; and where points lie at
// equal distance PCL may pick other neighbors.
#include <gtest/gtest.h>

#include <Eigen/Eigenvalues>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <string>
#include <vector>

#include "pcnn/index.hpp"
#include "pcnn/io.hpp"
#include "pcnn/normals.hpp"
#include "pcnn/testing/baseline.hpp"

namespace pcnn {
namespace {

struct Agreement {
  std::int64_t both = 0, nan_mismatch = 0, wrong_side = 0;
  std::vector<std::int64_t> far;  // points whose normals differ by more than 1e-3 rad or in side
  std::vector<double> far_angle;
  double median = 0, p99 = 0, worst = 0;          // angles, radians
  double curvature_p99 = 0, curvature_worst = 0;  // absolute differences
};

Agreement compare(const NormalsResult& a, const NormalsResult& b) {
  Agreement g;
  std::vector<double> angles, curv;
  for (std::int64_t i = 0; i < a.rows; ++i) {
    const float* n = &a.normals[i * 3];
    const float* m = &b.normals[i * 3];
    if (std::isnan(n[0]) != std::isnan(m[0])) {
      ++g.nan_mismatch;
      continue;
    }
    if (std::isnan(n[0])) continue;
    ++g.both;
    const double dot = double(n[0]) * m[0] + double(n[1]) * m[1] + double(n[2]) * m[2];
    const double cx = double(n[1]) * m[2] - double(n[2]) * m[1],
                 cy = double(n[2]) * m[0] - double(n[0]) * m[2],
                 cz = double(n[0]) * m[1] - double(n[1]) * m[0];
    angles.push_back(std::atan2(std::sqrt(cx * cx + cy * cy + cz * cz), std::fabs(dot)));
    g.wrong_side += dot < 0;
    if (dot < 0 || angles.back() > 1e-3) {
      g.far.push_back(i);
      g.far_angle.push_back(angles.back());
    }
    curv.push_back(std::fabs(double(a.curvature[i]) - b.curvature[i]));
  }
  if (angles.empty()) return g;
  std::sort(angles.begin(), angles.end());
  std::sort(curv.begin(), curv.end());
  g.median = angles[angles.size() / 2];
  g.p99 = angles[angles.size() * 99 / 100];
  g.worst = angles.back();
  g.curvature_p99 = curv[curv.size() * 99 / 100];
  g.curvature_worst = curv.back();
  return g;
}

class NormalsVsPcl : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { cloud_ = new Cloud(load_cloud(PCNN_SAMPLE_PCD, nullptr, false)); }
  static void TearDownTestSuite() { delete cloud_; }

  // Why the normals of point i differ by `angle` (radians, between the lines): a perturbation
  // of the covariance by δ turns the eigenvector by at most about δ / (λ1 - λ0); PCL's float
  // covariance is off by a few float epsilons of the trace, so the angle stays within
  // 1e-5 · trace / (λ1 - λ0) (generous by two orders). Or the view is grazing (the viewpoint
  // within 1e-3 rad of the surface's plane), where the float and double signs of
  // dot(n, viewpoint - p) may differ. Returns false when neither explains it.
  // The neighborhoods, as CSR (kNN rows have no padding here: every point has k neighbors).
  static RadiusResult neighborhoods(Index& index, const NormalParams& p) {
    if (p.k == 0) return index.self_radius({p.radius, false});
    const KnnResult r = index.self_knn({p.k, false});
    RadiusResult csr;
    csr.rows = r.rows;
    csr.indices = r.indices;
    for (std::int64_t i = 0; i <= r.rows; ++i) csr.offsets.push_back(i * r.k);
    return csr;
  }

  static bool explained(const RadiusResult& hoods, const NormalParams& p, const NormalsResult& ours,
                        std::int64_t i, double angle, std::string& why) {
    const std::vector<std::int32_t> ids(hoods.indices.begin() + hoods.offsets[i],
                                        hoods.indices.begin() + hoods.offsets[i + 1]);
    const std::vector<float>& xyz = cloud_->xyz;
    auto at = [&](std::int32_t id) {
      return Eigen::Vector3d(xyz[3 * id], xyz[3 * id + 1], xyz[3 * id + 2]);
    };
    Eigen::Vector3d mean = Eigen::Vector3d::Zero();
    for (std::int32_t id : ids) mean += at(id);
    mean /= double(ids.size());
    Eigen::Matrix3d cov = Eigen::Matrix3d::Zero();
    for (std::int32_t id : ids) cov += (at(id) - mean) * (at(id) - mean).transpose();
    const Eigen::Vector3d ev = Eigen::SelfAdjointEigenSolver<Eigen::Matrix3d>(cov).eigenvalues();
    const double gap = (ev[1] - ev[0]) / cov.trace();
    const Eigen::Vector3d n(ours.normals[3 * i], ours.normals[3 * i + 1], ours.normals[3 * i + 2]);
    const Eigen::Vector3d view =
        (Eigen::Vector3d(p.viewpoint[0], p.viewpoint[1], p.viewpoint[2]) - at(i)).normalized();
    const double grazing = std::fabs(n.dot(view));
    why = "point " + std::to_string(i) + ": angle " + std::to_string(angle) +
          " rad, eigenvalue gap " + std::to_string(gap) + " of the trace, |cos| to the view " +
          std::to_string(grazing);
    return angle * gap < 1e-5 || grazing < 1e-3;
  }

  Agreement run(const NormalParams& p, const std::string& what) {
    Index index(cloud_->view());  // the GPU when one is usable (both backends give the same bits)
    const NormalsResult ours = estimate_normals(index, p);
    double pcl_ms = 0;
    const NormalsResult theirs = pcl_normals(cloud_->view(), p, &pcl_ms);
    const Agreement g = compare(ours, theirs);
    const RadiusResult hoods = g.far.empty() ? RadiusResult{} : neighborhoods(index, p);
    for (std::size_t j = 0; j < g.far.size(); ++j) {
      std::string why;
      EXPECT_TRUE(explained(hoods, p, ours, g.far[j], g.far_angle[j], why)) << what << ": " << why;
      if (j < 5) std::cout << "  differs, " << why << "\n";
    }
    std::cout << what << " (" << to_string(index.backend()) << "): " << g.both
              << " normals compared; angle median " << g.median << ", 99% " << g.p99 << ", max "
              << g.worst << " rad; opposite sides " << g.wrong_side << "; NaN in one only "
              << g.nan_mismatch << "; curvature difference 99% " << g.curvature_p99 << ", max "
              << g.curvature_worst << "; pcnn " << ours.timings.total_ms << " ms, PCL " << pcl_ms
              << " ms; beyond 1e-3 rad " << g.far.size() << "\n";
    return g;
  }

  static Cloud* cloud_;
};
Cloud* NormalsVsPcl::cloud_ = nullptr;

TEST_F(NormalsVsPcl, KNearest) {
  ASSERT_EQ(cloud_->size(), 50000);
  for (int k : {8, 16, 30}) {
    NormalParams p;
    p.k = k;
    const Agreement g = run(p, "k = " + std::to_string(k));
    EXPECT_EQ(g.both, 50000);
    EXPECT_EQ(g.nan_mismatch, 0);
    EXPECT_LT(g.median, 1e-5);
    EXPECT_LT(g.p99, 1e-3);
    EXPECT_LT(g.curvature_p99, 1e-4);
    EXPECT_LE(static_cast<std::int64_t>(g.far.size()), g.both / 1000);  // each one explained
  }
}

TEST_F(NormalsVsPcl, RadiusAndAnotherViewpoint) {
  NormalParams p;
  p.radius = 0.5;
  p.viewpoint = {0, 0, 1.8};  // the synthetic sensor
  const Agreement g = run(p, "radius 0.5");
  EXPECT_GT(g.both, 45000);
  // PCL decides membership in float: a neighbor within rounding of r may differ, and with it a
  // neighborhood's size (two or three points) — rare.
  EXPECT_LE(g.nan_mismatch, 5);
  EXPECT_LT(g.median, 1e-5);
  EXPECT_LT(g.p99, 1e-3);
  EXPECT_LE(static_cast<std::int64_t>(g.far.size()), g.both / 500);  // each one explained
}

// Degenerate neighborhoods as PCL treats them: fewer than 3 points, coincident points
// (NaN normal, curvature 0 in both), non-finite points.
TEST(NormalsVsPclDegenerate, SameNaNsAndCurvature) {
  const float nan = std::nanf("");
  const std::vector<float> xyz = {1,   2, 3, 1,     2, 3, 1,  2, 3, 1,  2, 3,   // coincident
                                  nan, 0, 0,                                    // not finite
                                  50,  0, 0, 50.5f, 0, 0,                       // a pair
                                  80,  0, 0, 80,    1, 0, 81, 0, 0, 80, 0, 1};  // a tetrahedron
  const PointsView v = host_points(xyz.data(), static_cast<std::int64_t>(xyz.size() / 3));
  NormalParams p;
  p.radius = 2;
  IndexOptions o;
  o.backend = Backend::cpu;
  Index index(v, o);
  const NormalsResult ours = estimate_normals(index, p);
  const NormalsResult theirs = pcl_normals(v, p);
  for (std::int64_t i = 0; i < ours.rows; ++i) {
    EXPECT_EQ(std::isnan(ours.normals[i * 3]), std::isnan(theirs.normals[i * 3])) << i;
    EXPECT_EQ(std::isnan(ours.curvature[i]), std::isnan(theirs.curvature[i])) << i;
    if (!std::isnan(ours.curvature[i])) {
      EXPECT_NEAR(ours.curvature[i], theirs.curvature[i], 1e-6) << i;
    }
  }
  EXPECT_EQ(ours.curvature[0], 0.f);
  EXPECT_TRUE(std::isnan(ours.normals[0]));
}

}  // namespace
}  // namespace pcnn
