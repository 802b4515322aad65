// Normal estimation: the shared math (core/normal_math.hpp) against Eigen's eigensolver; both
// backends on surfaces with known normals (plane, sphere, noisy plane), orientation,
// degenerate neighborhoods, each neighborhood form (k, radius, radius with max_nn) against an
// independent reference built from the exact neighbor references and Eigen; argument checks;
// and the CUDA backend against the CPU backend, bit for bit (skips without a device).
#include <gtest/gtest.h>

#include <cuda_runtime.h>
#include <Eigen/Eigenvalues>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "core/normal_math.hpp"
#include "gpu_test.hpp"
#include "pcnn/error.hpp"
#include "pcnn/index.hpp"
#include "pcnn/memory.hpp"
#include "pcnn/normals.hpp"
#include "pcnn/testing/reference.hpp"
#include "pcnn/testing/synthetic.hpp"
#include "test_clouds.hpp"

namespace pcnn {
namespace {

const float kNaN = std::numeric_limits<float>::quiet_NaN();

// ---- the eigensolver ----

// Eigen's smallest eigenpair of a symmetric matrix (the oracle).
void eigen_smallest(const double m[6], double& value, Eigen::Vector3d& vec) {
  Eigen::Matrix3d a;
  a << m[0], m[1], m[2], m[1], m[3], m[4], m[2], m[4], m[5];
  const Eigen::SelfAdjointEigenSolver<Eigen::Matrix3d> es(a);
  value = es.eigenvalues()[0];
  vec = es.eigenvectors().col(0);
}

// Angle between two directions, sign ignored (radians).
double line_angle(const double a[3], const double b[3]) {
  const double d = std::fabs(a[0] * b[0] + a[1] * b[1] + a[2] * b[2]);
  const double na = std::sqrt(a[0] * a[0] + a[1] * a[1] + a[2] * a[2]);
  const double nb = std::sqrt(b[0] * b[0] + b[1] * b[1] + b[2] * b[2]);
  const double c = std::min(1.0, d / (na * nb));
  // acos loses precision near 1: the cross product's length for small angles.
  const double cx = a[1] * b[2] - a[2] * b[1], cy = a[2] * b[0] - a[0] * b[2],
               cz = a[0] * b[1] - a[1] * b[0];
  return std::atan2(std::sqrt(cx * cx + cy * cy + cz * cz), c * na * nb);
}

// A random symmetric matrix with eigenvalues `ev` (scaled by `scale`) in a random basis.
std::array<double, 6> with_eigenvalues(std::array<double, 3> ev, double scale,
                                       std::mt19937_64& rng) {
  std::normal_distribution<double> g(0, 1);
  Eigen::Matrix3d r;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) r(i, j) = g(rng);
  const Eigen::HouseholderQR<Eigen::Matrix3d> qr(r);
  const Eigen::Matrix3d q = qr.householderQ();
  const Eigen::Matrix3d a =
      q * Eigen::Vector3d(ev[0], ev[1], ev[2]).asDiagonal() * q.transpose() * scale;
  return {a(0, 0), a(0, 1), a(0, 2), a(1, 1), a(1, 2), a(2, 2)};
}

TEST(NormalMath, OracleRejectsAWrongVector) {
  // The comparison below must be able to fail: the eigenvector of the largest eigenvalue is
  // far from the smallest one's.
  std::mt19937_64 rng(1);
  const auto m = with_eigenvalues({1e-3, 0.5, 2}, 1, rng);
  double v0;
  Eigen::Vector3d e0;
  eigen_smallest(m.data(), v0, e0);
  Eigen::Matrix3d a;
  a << m[0], m[1], m[2], m[1], m[3], m[4], m[2], m[4], m[5];
  const Eigen::Vector3d wrong =
      Eigen::SelfAdjointEigenSolver<Eigen::Matrix3d>(a).eigenvectors().col(2);
  EXPECT_GT(line_angle(wrong.data(), e0.data()), 1.0);
}

TEST(NormalMath, SmallestEigenpairMatchesEigen) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> u(0, 1);
  int cases = 0;
  for (double scale : {1e-30, 1e-6, 1.0, 1e6, 1e30}) {
    for (int t = 0; t < 400; ++t) {
      // Well separated, nearly planar (tiny smallest), and nearly linear spectra.
      std::array<double, 3> ev = {u(rng), 1 + u(rng), 2 + u(rng)};
      if (t % 3 == 1) ev[0] = 1e-9 * u(rng);
      if (t % 3 == 2) ev = {1e-8 * u(rng), 0.1 + u(rng) * 1e-3, 5};
      const auto m = with_eigenvalues(ev, scale, rng);
      double value, vec[3], ref_value;
      Eigen::Vector3d ref;
      detail::smallest_eigenpair(m[0], m[1], m[2], m[3], m[4], m[5], value, vec);
      eigen_smallest(m.data(), ref_value, ref);
      const double gap = (std::min(ev[1], ev[2]) - ev[0]) * scale;
      const double norm = (ev[0] + ev[1] + ev[2]) * scale;
      EXPECT_NEAR(value, ref_value, 1e-13 * norm) << "scale " << scale << " case " << t;
      // Both solvers are backward stable: vectors agree within eps * |A| / gap.
      EXPECT_LT(line_angle(vec, ref.data()), 1e-13 * norm / gap + 1e-15)
          << "scale " << scale << " case " << t;
      EXPECT_NEAR(vec[0] * vec[0] + vec[1] * vec[1] + vec[2] * vec[2], 1.0, 1e-14);
      ++cases;
    }
  }
  EXPECT_EQ(cases, 2000);
}

TEST(NormalMath, DiagonalAndRepeatedEigenvalues) {
  double value, vec[3];
  detail::smallest_eigenpair(3, 0, 0, 1, 0, 2, value, vec);  // diagonal: e_y
  EXPECT_EQ(value, 1);
  EXPECT_EQ(std::fabs(vec[1]), 1);
  // λ0 = λ1 (a line's covariance): any unit vector of that plane, orthogonal to the line.
  detail::smallest_eigenpair(1, 2, 3, 4, 6, 9, value, vec);  // (1,2,3)(1,2,3)^T
  EXPECT_NEAR(value, 0, 1e-14);
  EXPECT_NEAR(vec[0] + 2 * vec[1] + 3 * vec[2], 0, 1e-14);
  EXPECT_NEAR(vec[0] * vec[0] + vec[1] * vec[1] + vec[2] * vec[2], 1.0, 1e-15);
  // A multiple of the identity.
  detail::smallest_eigenpair(2, 0, 0, 2, 0, 2, value, vec);
  EXPECT_EQ(value, 2);
  EXPECT_EQ(vec[0] * vec[0] + vec[1] * vec[1] + vec[2] * vec[2], 1.0);
}

// ---- the backends ----

std::vector<Backend> backends() {
  std::vector<Backend> b = {Backend::cpu};
  if (query_device().available) b.push_back(Backend::cuda);
  return b;
}

NormalsResult normals_of(const std::vector<float>& xyz, Backend b, const NormalParams& p) {
  IndexOptions o;
  o.backend = b;
  Index index(host_points(xyz.data(), static_cast<std::int64_t>(xyz.size() / 3)), o);
  return estimate_normals(index, p);
}

NormalParams knn_params(int k, std::array<double, 3> vp = {0, 0, 0}) {
  NormalParams p;
  p.k = k;
  p.viewpoint = vp;
  return p;
}

const double* as_double3(const float* f, double out[3]) {
  for (int a = 0; a < 3; ++a) out[a] = f[a];
  return out;
}

// The plane z = 0.3 x - 0.2 y + 1 has normal (-0.3, 0.2, 1) / |.|: every point's normal is it,
// turned towards the viewpoint, with curvature ~0 (the points are rounded to float, so not
// exactly 0).
TEST(Normals, PlaneHasTheKnownNormalOnEveryBackendAndForm) {
  const std::vector<float> xyz = test::plane(5000, 3);
  const double len = std::sqrt(0.09 + 0.04 + 1);
  const double truth[3] = {-0.3 / len, 0.2 / len, 1 / len};
  NormalParams radius_form;
  radius_form.radius = 2.0;
  radius_form.viewpoint = {0, 0, 100};  // above the plane: normals face +z
  NormalParams hybrid_form = radius_form;
  hybrid_form.max_nn = 12;
  for (Backend b : backends()) {
    for (const NormalParams& p : {knn_params(10, {0, 0, 100}), radius_form, hybrid_form}) {
      const NormalsResult r = normals_of(xyz, b, p);
      ASSERT_EQ(r.rows, 5000);
      EXPECT_EQ(r.timings.backend, b);
      int with = 0;
      for (std::int64_t i = 0; i < r.rows; ++i) {
        if (std::isnan(r.normals[i * 3])) continue;  // a radius neighborhood of < 3 points
        ++with;
        double n[3];
        as_double3(&r.normals[i * 3], n);
        ASSERT_LT(line_angle(n, truth), 1e-5) << to_string(b) << " point " << i;
        ASSERT_GT(n[2], 0) << "not facing the viewpoint (above the plane)";
        ASSERT_LT(r.curvature[i], 1e-10);
        ASSERT_GE(r.curvature[i], 0);
      }
      EXPECT_GT(with, 4900);
    }
  }
}

// On a sphere, normals are radial: with the viewpoint at the center they point inwards, with
// it far outside... the ones facing it outwards. Curvature is about r_neighborhood² / (4 R²)...
// just small and positive.
TEST(Normals, SphereNormalsAreRadialAndFaceTheViewpoint) {
  std::mt19937_64 rng(5);
  std::normal_distribution<double> g(0, 1);
  const double c[3] = {3, -2, 1}, radius = 2;
  std::vector<float> xyz;
  for (int i = 0; i < 20000; ++i) {
    double d[3] = {g(rng), g(rng), g(rng)};
    const double l = std::sqrt(d[0] * d[0] + d[1] * d[1] + d[2] * d[2]);
    for (int a = 0; a < 3; ++a) xyz.push_back(static_cast<float>(c[a] + radius * d[a] / l));
  }
  for (Backend b : backends()) {
    const NormalsResult r = normals_of(xyz, b, knn_params(12, {c[0], c[1], c[2]}));
    double worst = 0;
    for (std::int64_t i = 0; i < r.rows; ++i) {
      const float* p = &xyz[i * 3];
      const double out[3] = {p[0] - c[0], p[1] - c[1], p[2] - c[2]};
      double n[3];
      as_double3(&r.normals[i * 3], n);
      worst = std::max(worst, line_angle(n, out));
      ASSERT_LE(n[0] * out[0] + n[1] * out[1] + n[2] * out[2], 0) << "must face the center";
      ASSERT_GT(r.curvature[i], 0);
      ASSERT_LT(r.curvature[i], 0.05);
    }
    EXPECT_LT(worst, 0.05) << to_string(b);  // neighborhoods of ~0.1 on a sphere of 2
  }
}

TEST(Normals, NoisyPlaneNormalsAreCloseOnAverage) {
  std::mt19937_64 rng(9);
  std::uniform_real_distribution<float> u(-10, 10);
  std::normal_distribution<float> noise(0, 0.002f);
  std::vector<float> xyz;
  for (int i = 0; i < 20000; ++i) xyz.insert(xyz.end(), {u(rng), u(rng), 5 + noise(rng)});
  const double truth[3] = {0, 0, 1};
  for (Backend b : backends()) {
    const NormalsResult r = normals_of(xyz, b, knn_params(16));
    double sum = 0, worst = 0;
    for (std::int64_t i = 0; i < r.rows; ++i) {
      double n[3];
      as_double3(&r.normals[i * 3], n);
      const double a = line_angle(n, truth);
      sum += a;
      worst = std::max(worst, a);
      ASSERT_LT(n[2], 0) << "the origin is below the plane";
    }
    // Spacing ~0.14, neighborhoods ~0.3 across, noise 0.002: ~0.01 rad.
    EXPECT_LT(sum / r.rows, 0.02) << to_string(b);
    EXPECT_LT(worst, 0.2) << to_string(b);
    EXPECT_GT(sum / r.rows, 1e-4) << "noise must tilt the normals somewhat";
  }
}

TEST(Normals, OrientationFollowsTheViewpoint) {
  const std::vector<float> xyz = test::plane(2000, 11);
  for (Backend b : backends()) {
    const NormalsResult up = normals_of(xyz, b, knn_params(8, {0, 0, 1e4}));
    const NormalsResult down = normals_of(xyz, b, knn_params(8, {0, 0, -1e4}));
    for (std::int64_t i = 0; i < up.rows; ++i) {
      for (int a = 0; a < 3; ++a) ASSERT_EQ(up.normals[i * 3 + a], -down.normals[i * 3 + a]);
      ASSERT_EQ(up.curvature[i], down.curvature[i]);
      // dot(n, viewpoint - p) >= 0, computed as the library states it.
      const float* p = &xyz[i * 3];
      const double facing = up.normals[i * 3] * (0 - double(p[0])) +
                            up.normals[i * 3 + 1] * (0 - double(p[1])) +
                            up.normals[i * 3 + 2] * (1e4 - double(p[2]));
      ASSERT_GE(facing, 0);
    }
  }
}

TEST(Normals, DegenerateNeighborhoodsGiveNaN) {
  for (Backend b : backends()) {
    SCOPED_TRACE(to_string(b));
    // Too few points for k = 3: two finite points, one NaN point.
    const std::vector<float> two = {0, 0, 0, 1, 0, 0, kNaN, 0, 0};
    NormalsResult r = normals_of(two, b, knn_params(3));
    for (float v : r.normals) EXPECT_TRUE(std::isnan(v));
    for (float v : r.curvature) EXPECT_TRUE(std::isnan(v));

    // Not finite points get NaN; the others, on a plane, do not.
    std::vector<float> xyz = test::plane(500, 2);
    test::poison(xyz, 0.1, 4);
    r = normals_of(xyz, b, knn_params(6));
    int poisoned = 0;
    for (std::int64_t i = 0; i < r.rows; ++i) {
      const bool finite = std::isfinite(xyz[3 * i]) && std::isfinite(xyz[3 * i + 1]) &&
                          std::isfinite(xyz[3 * i + 2]);
      poisoned += !finite;
      ASSERT_EQ(std::isnan(r.normals[i * 3]), !finite) << "point " << i;
      ASSERT_EQ(std::isnan(r.curvature[i]), !finite) << "point " << i;
    }
    EXPECT_GT(poisoned, 20);

    // Radius neighborhoods of fewer than 3 points: isolated points and a pair.
    const std::vector<float> sparse = {0,  0, 0, 10, 0,    0, 10,    0.5f, 0,
                                       20, 0, 0, 20, 0.5f, 0, 20.5f, 0,    0};
    NormalParams rp;
    rp.radius = 1;
    r = normals_of(sparse, b, rp);
    for (int i = 0; i < 3; ++i) EXPECT_TRUE(std::isnan(r.normals[i * 3])) << i;
    for (int i = 3; i < 6; ++i) EXPECT_FALSE(std::isnan(r.normals[i * 3])) << i;
    EXPECT_EQ(std::fabs(r.normals[3 * 3 + 2]), 1.f);  // the triangle in z = 0

    // Coincident points: no direction (NaN normal), curvature 0 (as PCL).
    const std::vector<float> same = {1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3};
    r = normals_of(same, b, knn_params(4));
    for (int i = 0; i < 4; ++i) {
      EXPECT_TRUE(std::isnan(r.normals[i * 3]));
      EXPECT_EQ(r.curvature[i], 0.f);
    }

    // Collinear points: a normal orthogonal to the line (any of them), curvature 0.
    const std::vector<float> line = test::line(50, 8);
    r = normals_of(line, b, knn_params(5));
    for (std::int64_t i = 0; i < r.rows; ++i) {
      const float* n = &r.normals[i * 3];
      EXPECT_NEAR(n[0] + 2 * n[1] + 3 * n[2], 0, 1e-5);
      EXPECT_NEAR(r.curvature[i], 0, 1e-6);
    }

    // No points, one point.
    r = normals_of({}, b, knn_params(3));
    EXPECT_EQ(r.rows, 0);
    EXPECT_TRUE(r.normals.empty());
    r = normals_of({1, 1, 1}, b, knn_params(3));
    EXPECT_TRUE(std::isnan(r.normals[0]) && std::isnan(r.curvature[0]));
  }
}

// An independent reference: the exact neighbor lists (pcnn::reference_*) and Eigen's solver on
// the covariance about the mean, oriented as stated. Every normal within 1e-6 rad of it, and
// the curvature within 1e-6 (relative).
struct FormCase {
  const char* name;
  NormalParams params;
};
std::ostream& operator<<(std::ostream& os, const FormCase& c) { return os << c.name; }

class NormalForms : public ::testing::TestWithParam<FormCase> {};

TEST_P(NormalForms, MatchTheEigenReference) {
  const NormalParams p = GetParam().params;
  std::vector<float> xyz = make_synthetic_cloud(SyntheticKind::clustered, 3000, 21);
  test::poison(xyz, 0.02, 6);
  const PointsView v = host_points(xyz.data(), 3000);
  std::vector<std::vector<std::int32_t>> lists(3000);
  if (p.k > 0 || p.max_nn > 0) {
    const KnnResult ref = p.k > 0 ? reference_knn(v, nullptr, {p.k, false})
                                  : reference_hybrid(v, nullptr, {p.radius, p.max_nn, false}).knn;
    for (int i = 0; i < 3000; ++i)
      for (int j = 0; j < ref.k && ref.indices[i * ref.k + j] >= 0; ++j)
        lists[i].push_back(ref.indices[i * ref.k + j]);
  } else {
    const RadiusResult ref = reference_radius(v, nullptr, {p.radius, false});
    for (int i = 0; i < 3000; ++i)
      lists[i].assign(ref.indices.begin() + ref.offsets[i],
                      ref.indices.begin() + ref.offsets[i + 1]);
  }
  int compared = 0, nan = 0;
  for (Backend b : backends()) {
    const NormalsResult r = normals_of(xyz, b, p);
    for (int i = 0; i < 3000; ++i) {
      const float* q = &xyz[3 * i];
      const bool finite = std::isfinite(q[0]) && std::isfinite(q[1]) && std::isfinite(q[2]);
      if (!finite || lists[i].size() < 3) {
        ASSERT_TRUE(std::isnan(r.normals[3 * i]) && std::isnan(r.curvature[i])) << i;
        ++nan;
        continue;
      }
      Eigen::Vector3d mean = Eigen::Vector3d::Zero();
      for (int id : lists[i])
        mean += Eigen::Vector3f(xyz[3 * id], xyz[3 * id + 1], xyz[3 * id + 2]).cast<double>();
      mean /= double(lists[i].size());
      Eigen::Matrix3d cov = Eigen::Matrix3d::Zero();
      for (int id : lists[i]) {
        const Eigen::Vector3d d =
            Eigen::Vector3f(xyz[3 * id], xyz[3 * id + 1], xyz[3 * id + 2]).cast<double>() - mean;
        cov += d * d.transpose();
      }
      cov /= double(lists[i].size());
      const Eigen::SelfAdjointEigenSolver<Eigen::Matrix3d> es(cov);
      Eigen::Vector3d n = es.eigenvectors().col(0);
      const Eigen::Vector3d to_vp =
          Eigen::Vector3d(p.viewpoint[0], p.viewpoint[1], p.viewpoint[2]) -
          Eigen::Vector3f(q[0], q[1], q[2]).cast<double>();
      if (n.dot(to_vp) < 0) n = -n;
      const double got[3] = {r.normals[3 * i], r.normals[3 * i + 1], r.normals[3 * i + 2]};
      const double gap = es.eigenvalues()[1] - es.eigenvalues()[0];
      if (gap > 1e-6 * es.eigenvalues()[2]) {  // a well-defined normal
        ASSERT_LT(line_angle(got, n.data()), 1e-6) << to_string(b) << " point " << i;
        ASSERT_GT(got[0] * n[0] + got[1] * n[1] + got[2] * n[2], 0) << "orientation, point " << i;
      }
      const double curv = es.eigenvalues()[0] / cov.trace();
      ASSERT_NEAR(r.curvature[i], curv, 1e-6 * curv + 1e-12) << to_string(b) << " point " << i;
      ++compared;
    }
  }
  EXPECT_GT(compared, 2000);
  EXPECT_GT(nan, 0);
}

NormalParams radius_params(double r, int max_nn) {
  NormalParams p;
  p.radius = r;
  p.max_nn = max_nn;
  p.viewpoint = {1, -2, 30};
  return p;
}

INSTANTIATE_TEST_SUITE_P(Forms, NormalForms,
                         ::testing::Values(FormCase{"k3", knn_params(3, {0, 0, 0})},
                                           FormCase{"k16", knn_params(16, {5, 5, 5})},
                                           FormCase{"k128", knn_params(128, {-50, 0, 0})},
                                           FormCase{"radius", radius_params(3.0, 0)},
                                           FormCase{"radius_max_nn", radius_params(3.0, 8)}),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(Normals, InvalidArgumentsThrow) {
  const std::vector<float> xyz = test::plane(100, 1);
  IndexOptions o;
  o.backend = Backend::cpu;
  Index index(host_points(xyz.data(), 100), o);
  auto bad = [&](NormalParams p) {
    EXPECT_THROW(estimate_normals(index, p), invalid_argument_error)
        << "k " << p.k << " radius " << p.radius << " max_nn " << p.max_nn;
  };
  bad(NormalParams{});  // neither
  bad(knn_params(2));
  bad(knn_params(kMaxK + 1));
  NormalParams both = knn_params(8);
  both.radius = 1;
  bad(both);
  NormalParams k_max_nn = knn_params(8);
  k_max_nn.max_nn = 8;
  bad(k_max_nn);
  bad(radius_params(-1, 0));
  bad(radius_params(std::numeric_limits<double>::infinity(), 0));
  bad(radius_params(1, 2));
  bad(radius_params(1, kMaxK + 1));
  bad(knn_params(8, {0, std::numeric_limits<double>::quiet_NaN(), 0}));
  std::vector<float> n(300), c(100);
  EXPECT_THROW(estimate_normals(index, knn_params(8), {n.data(), 99, 3}, {c.data(), 100}),
               invalid_argument_error);
  EXPECT_THROW(estimate_normals(index, knn_params(8), {n.data(), 100, 3}, {c.data(), 99}),
               invalid_argument_error);
  EXPECT_THROW(estimate_normals(index, knn_params(8), {n.data(), 100, 3, Memory::device},
                                {c.data(), 100, Memory::device}),
               invalid_argument_error);
  EXPECT_NO_THROW(estimate_normals(index, knn_params(8), {n.data(), 100, 3}, {c.data(), 100}));
  Index moved = std::move(index);
  EXPECT_THROW(estimate_normals(index, knn_params(8)), invalid_argument_error);  // NOLINT
  EXPECT_EQ(estimate_normals(moved, knn_params(8)).rows, 100);
}

// ---- CUDA against the CPU: the same bits ----

void expect_same_bits(const NormalsResult& a, const NormalsResult& b, const std::string& what) {
  ASSERT_EQ(a.rows, b.rows) << what;
  ASSERT_EQ(0, std::memcmp(a.normals.data(), b.normals.data(), a.normals.size() * sizeof(float)))
      << what;
  ASSERT_EQ(0,
            std::memcmp(a.curvature.data(), b.curvature.data(), a.curvature.size() * sizeof(float)))
      << what;
}

TEST(NormalsGpu, SameBitsAsTheCpuBackend) {
  PCNN_REQUIRE_DEVICE();
  for (SyntheticKind kind :
       {SyntheticKind::uniform, SyntheticKind::clustered, SyntheticKind::lidar}) {
    std::vector<float> xyz = make_synthetic_cloud(kind, 40000, 31);
    test::poison(xyz, 0.01, 2);
    for (const NormalParams& p : {knn_params(3), knn_params(16, {1, 2, 3}), knn_params(100),
                                  radius_params(4.0, 0), radius_params(4.0, 24)}) {
      const std::string what = std::string(to_string(kind)) + " k " + std::to_string(p.k) + " r " +
                               std::to_string(p.radius) + " max_nn " + std::to_string(p.max_nn);
      expect_same_bits(normals_of(xyz, Backend::cuda, p), normals_of(xyz, Backend::cpu, p), what);
    }
  }
}

TEST(NormalsGpu, DeviceOutputsAndPassesGiveTheSameBits) {
  PCNN_REQUIRE_DEVICE();
  const std::vector<float> xyz = make_synthetic_cloud(SyntheticKind::lidar, 200000, 3);
  const std::int64_t n = 200000;
  const NormalsResult cpu = normals_of(xyz, Backend::cpu, knn_params(32));
  IndexOptions o;
  o.backend = Backend::cuda;
  Index index(host_points(xyz.data(), n), o);
  // Into device memory on a stream of the caller's.
  float *d_n = nullptr, *d_c = nullptr;
  ASSERT_EQ(cudaMalloc(&d_n, n * 3 * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d_c, n * sizeof(float)), cudaSuccess);
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  estimate_normals(index, knn_params(32), {d_n, n, 3, Memory::device}, {d_c, n, Memory::device}, s);
  NormalsResult dev;
  dev.rows = n;
  dev.normals.resize(n * 3);
  dev.curvature.resize(n);
  ASSERT_EQ(cudaMemcpy(dev.normals.data(), d_n, n * 3 * sizeof(float), cudaMemcpyDeviceToHost),
            cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dev.curvature.data(), d_c, n * sizeof(float), cudaMemcpyDeviceToHost),
            cudaSuccess);
  cudaFree(d_n);
  cudaFree(d_c);
  cudaStreamDestroy(s);
  expect_same_bits(dev, cpu, "device outputs");
  // A memory cap that forces the neighbor lists into passes.
  IndexOptions capped = o;
  capped.memory = make_limited_pool_resource(48ll << 20);
  Index small(host_points(xyz.data(), n), capped);
  const NormalsResult passes = estimate_normals(small, knn_params(32));
  EXPECT_GT(passes.timings.passes, 1);
  expect_same_bits(passes, cpu, "passes");
  // Radius rows go through the CSR path.
  NormalParams rp = radius_params(0.5, 0);
  expect_same_bits(estimate_normals(index, rp), normals_of(xyz, Backend::cpu, rp), "radius");
}

}  // namespace
}  // namespace pcnn
