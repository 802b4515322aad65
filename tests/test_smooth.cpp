// Smoothing: stencil validation, the CPU references' behavior (edges survive, noise drops,
// Taubin keeps the volume), and the GPU against the references. GPU tests skip without a device.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gpu_test.hpp"
#include "pcnn/error.hpp"
#include "pcnn/index.hpp"
#include "pcnn/knn.hpp"
#include "pcnn/smooth.hpp"
#include "pcnn/testing/reference.hpp"
#include "pcnn/testing/smooth_reference.hpp"
#include "pcnn/testing/synthetic.hpp"

namespace pcnn {
namespace {

TEST(Stencil, ParsesTheDocumentedForms) {
  EXPECT_EQ(parse_stencil("box:2").weights, std::vector<float>(5, 1.f));
  const Stencil g = parse_stencil("gaussian:3:1.5");
  ASSERT_EQ(g.weights.size(), 7u);
  EXPECT_TRUE(g.separable);
  EXPECT_FLOAT_EQ(g.weights[0], g.weights[6]);
  EXPECT_FLOAT_EQ(g.weights[3], 1.f);
  EXPECT_EQ(parse_stencil("list:1,2,1").radius, 1);
  const Stencil grid = parse_stencil("grid:0,1,0,1,4,1,0,1,0");
  EXPECT_FALSE(grid.separable);
  EXPECT_EQ(grid.radius, 1);
  EXPECT_EQ(parse_stencil("box:7").weights.size(), 15u);
}

TEST(Stencil, InvalidCoefficientsGiveClearErrors) {
  auto message = [](const std::string& spec) {
    try {
      parse_stencil(spec);
    } catch (const error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message("list:").find("no coefficients"), std::string::npos);
  EXPECT_NE(message("list:1,-3,1").find("positive sum"), std::string::npos);
  EXPECT_NE(message("box:8").find("radius must be 0..7"), std::string::npos);
  EXPECT_NE(message("list:1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1").find("radius must be 0..7"),
            std::string::npos);
  EXPECT_NE(message("list:1,2").find("odd count"), std::string::npos);
  EXPECT_NE(message("grid:1,2,3").find("(2R + 1)^2"), std::string::npos);
  EXPECT_NE(message("list:1,0,1").find("center coefficient"), std::string::npos);
  EXPECT_NE(message("list:1,x,1").find("not a number"), std::string::npos);
  EXPECT_NE(message("gaussian:2:0").find("sigma must be > 0"), std::string::npos);
  EXPECT_NE(message("median:3").find("unknown stencil"), std::string::npos);
  UnorganizedSmoothParams u;
  u.mu = -0.3f;  // Taubin needs mu < -lambda
  EXPECT_THROW(validate(u), error);
  u.mu = 0;
  u.rank_weights = {1, 2};
  EXPECT_THROW(validate(u), error);
}

constexpr int kW = 160, kH = 120;

struct Scene {
  std::vector<float> noisy, truth;
  PointsView view() const { return {noisy.data(), kW * kH, 3}; }
};

Scene scene() {
  Scene s;
  s.noisy = make_depth_scene(kW, kH, 0.01, 0.03, 5, &s.truth);
  return s;
}

// The depth gap across each horizontal box edge (left and right borders of the box face) where
// both sides are valid, before and after.
struct EdgeGap {
  double min_kept = 1e9;  // smallest after / before over the edge pairs
  int pairs = 0;
};
EdgeGap edge_gaps(const std::vector<float>& before, const std::vector<float>& after) {
  EdgeGap g;
  for (int y = kH / 3; y < 2 * kH / 3; ++y)
    for (int x : {kW / 3 - 1, 2 * kW / 3 - 1}) {
      const std::size_t a = std::size_t(y) * kW + x, b = a + 1;
      const float za = before[a * 3 + 2], zb = before[b * 3 + 2];
      if (!std::isfinite(za) || !std::isfinite(zb)) continue;
      const double gap0 = std::fabs(za - zb), gap1 = std::fabs(after[a * 3 + 2] - after[b * 3 + 2]);
      g.min_kept = std::min(g.min_kept, gap1 / gap0);
      ++g.pairs;
    }
  return g;
}

double rms_error(const std::vector<float>& pts, const std::vector<float>& truth) {
  double s = 0;
  int n = 0;
  for (std::size_t i = 0; i < truth.size(); i += 3) {
    if (!std::isfinite(truth[i + 2])) continue;
    const double d = pts[i + 2] - truth[i + 2];
    s += d * d;
    ++n;
  }
  return std::sqrt(s / n);
}

TEST(OrganizedReference, DepthJumpsKeepEdgesAndNoiseDrops) {
  const Scene s = scene();
  OrganizedSmoothParams p;
  p.stencil = gaussian_stencil(3, 1.5);
  p.depth_jump = 0.1f;
  const std::vector<float> kept = reference_smooth_organized(s.view(), kW, kH, p);
  const EdgeGap g = edge_gaps(s.noisy, kept);
  ASSERT_GT(g.pairs, 50);
  EXPECT_GT(g.min_kept, 0.98);  // 2 m jumps; noise is 1 cm: the sides do not move toward each other
  EXPECT_LT(rms_error(kept, s.truth), 0.6 * rms_error(s.noisy, s.truth));
  for (std::size_t i = 0; i < s.truth.size(); i += 3)  // holes stay holes
    EXPECT_EQ(std::isnan(kept[i]), std::isnan(s.noisy[i]));
  p.depth_jump = 0;  // without the test, the same stencil smears the edges
  EXPECT_LT(edge_gaps(s.noisy, reference_smooth_organized(s.view(), kW, kH, p)).min_kept, 0.8);
}

TEST(OrganizedReference, MaxMoveCapsEveryPoint) {
  const Scene s = scene();
  OrganizedSmoothParams p;
  p.stencil = box_stencil(4);
  p.max_move = 0.002f;
  p.value = SmoothValue::z;
  const std::vector<float> out = reference_smooth_organized(s.view(), kW, kH, p);
  for (std::size_t i = 0; i < out.size(); i += 3) {
    if (std::isnan(out[i])) continue;
    EXPECT_LE(std::fabs(out[i + 2] - s.noisy[i + 2]), 0.002f * 1.0001f);
    EXPECT_EQ(out[i], s.noisy[i]);  // z mode keeps x and y
  }
}

// Points on a unit sphere with radial noise.
std::vector<float> noisy_sphere(int n, double noise, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> g(0.0, 1.0);
  std::vector<float> xyz;
  for (int i = 0; i < n; ++i) {
    double d[3] = {g(rng), g(rng), g(rng)};
    const double len = std::sqrt(d[0] * d[0] + d[1] * d[1] + d[2] * d[2]);
    const double r = 1.0 + noise * g(rng);
    for (double v : d) xyz.push_back(static_cast<float>(v / len * r));
  }
  return xyz;
}

struct Radii {
  double mean = 0, rms_dev = 0;  // of |p|, and of |p| - 1
};
Radii radii(const std::vector<float>& xyz) {
  Radii r;
  const std::size_t n = xyz.size() / 3;
  for (std::size_t i = 0; i < n; ++i) {
    const double len =
        std::sqrt(double(xyz[3 * i]) * xyz[3 * i] + double(xyz[3 * i + 1]) * xyz[3 * i + 1] +
                  double(xyz[3 * i + 2]) * xyz[3 * i + 2]);
    r.mean += len;
    r.rms_dev += (len - 1) * (len - 1);
  }
  r.mean /= double(n);
  r.rms_dev = std::sqrt(r.rms_dev / double(n));
  return r;
}

TEST(UnorganizedReference, TaubinRemovesNoiseAndKeepsTheVolume) {
  const std::vector<float> pts = noisy_sphere(4000, 0.02, 6);
  const PointsView v{pts.data(), 4000, 3};
  UnorganizedSmoothParams lap;
  lap.k = 12;
  lap.lambda = 0.6f;
  lap.iterations = 10;
  UnorganizedSmoothParams taubin = lap;
  taubin.mu = -0.63f;
  const KnnResult nb = reference_knn(v, nullptr, {12, true});
  const Radii before = radii(pts), after_lap = radii(reference_smooth_unorganized(v, nb, lap)),
              after_taubin = radii(reference_smooth_unorganized(v, nb, taubin));
  EXPECT_LT(after_taubin.rms_dev, 0.5 * before.rms_dev);
  EXPECT_LT(after_lap.rms_dev, before.rms_dev);
  // Volume ~ mean radius cubed: Taubin within 1%, where plain Laplacian shrinks by more.
  EXPECT_NEAR(std::pow(after_taubin.mean / before.mean, 3), 1.0, 0.01);
  EXPECT_LT(std::pow(after_lap.mean / before.mean, 3), 0.99);
}

TEST(GpuSmooth, OrganizedMatchesTheReference) {
  PCNN_REQUIRE_DEVICE();
  const Scene s = scene();
  std::vector<OrganizedSmoothParams> cases(6);
  cases[0].stencil = gaussian_stencil(2, 1.0);  // separable path
  cases[1].stencil = gaussian_stencil(2, 1.0);
  cases[1].depth_jump = 0.1f;  // 2-D path
  cases[2].stencil = parse_stencil("grid:0,1,0,1,4,1,0,1,0");
  cases[2].value = SmoothValue::z;
  cases[3].stencil = box_stencil(7);
  cases[3].depth_jump = 0.05f;
  cases[3].max_move = 0.004f;
  cases[4].stencil = gaussian_stencil(7, 3.0);
  cases[4].sensor = {0.1f, -0.2f, 0.05f};
  cases[5].stencil = box_stencil(0);
  for (std::size_t c = 0; c < cases.size(); ++c) {
    SmoothTimings t;
    const std::vector<float> gpu = gpu_smooth_organized(s.view(), kW, kH, cases[c], &t);
    const std::vector<float> ref = reference_smooth_organized(s.view(), kW, kH, cases[c]);
    EXPECT_EQ(t.separable, c == 0 || c == 4 || c == 5) << "case " << c;
    ASSERT_EQ(gpu.size(), ref.size());
    for (std::size_t i = 0; i < gpu.size(); ++i) {
      if (std::isnan(ref[i])) {
        ASSERT_TRUE(std::isnan(gpu[i])) << "case " << c << " value " << i;
        continue;
      }
      // The 2-D path sums in the reference's order, to the bit; the separable one rows first.
      if (t.separable)
        ASSERT_NEAR(gpu[i], ref[i], 1e-5 * std::fabs(ref[i]) + 1e-7) << "case " << c << " at " << i;
      else
        ASSERT_EQ(gpu[i], ref[i]) << "case " << c << " at " << i;
    }
  }
  EXPECT_THROW(gpu_smooth_organized(s.view(), kW + 1, kH, cases[0]), error);
}

// The coefficients travel with each launch: two threads smoothing with different stencils on
// two streams at once each get their own stencil's result, to the bit (the 2-D path), every time.
// Coefficients in one process-wide place without a lock would mix them.
TEST(GpuSmooth, ConcurrentCallsOnTwoStreamsKeepTheirOwnCoefficients) {
  PCNN_REQUIRE_DEVICE();
  const Scene s = scene();
  std::array<OrganizedSmoothParams, 2> cases;
  cases[0].stencil = parse_stencil("grid:0,1,0,1,4,1,0,1,0");
  cases[0].value = SmoothValue::z;
  cases[1].stencil = box_stencil(3);
  cases[1].depth_jump = 0.05f;
  std::array<std::vector<float>, 2> ref;
  for (int c = 0; c < 2; ++c) ref[c] = reference_smooth_organized(s.view(), kW, kH, cases[c]);
  std::size_t differ = 0;  // the two stencils must tell apart, or the test could not fail
  for (std::size_t i = 0; i < ref[0].size(); ++i)
    differ += !std::isnan(ref[0][i]) && ref[0][i] != ref[1][i];
  ASSERT_GT(differ, 0u);
  constexpr int kRounds = 20;
  std::array<int, 2> mismatches{0, 0};
  auto run = [&](int c) {
    cudaStream_t stream = nullptr;
    if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) {
      mismatches[c] = -1;
      return;
    }
    for (int round = 0; round < kRounds; ++round) {
      try {
        SmoothTimings t;
        const std::vector<float> gpu = gpu_smooth_organized(s.view(), kW, kH, cases[c], &t, stream);
        bool same = !t.separable && gpu.size() == ref[c].size();
        for (std::size_t i = 0; same && i < gpu.size(); ++i)
          same = std::isnan(ref[c][i]) ? std::isnan(gpu[i]) : gpu[i] == ref[c][i];
        if (!same) ++mismatches[c];
      } catch (const error&) {  // counted, not thrown out of the thread
        ++mismatches[c];
      }
    }
    cudaStreamDestroy(stream);
  };
  std::thread t0(run, 0), t1(run, 1);
  t0.join();
  t1.join();
  EXPECT_EQ(mismatches[0], 0) << "the Laplacian grid, of " << kRounds << " rounds";
  EXPECT_EQ(mismatches[1], 0) << "the box with depth jumps, of " << kRounds << " rounds";
}

TEST(GpuSmooth, UnorganizedMatchesTheReference) {
  PCNN_REQUIRE_DEVICE();
  std::vector<float> pts = noisy_sphere(20000, 0.02, 7);
  pts[30] = NAN;  // a non-finite point stays as it is and is nobody's neighbor
  const PointsView v{pts.data(), 20000, 3};
  IndexOptions cuda;
  cuda.backend = Backend::cuda;
  const KnnResult nb = Index(v, cuda).self_knn({16, true});  // exact: the reference's rows
  std::vector<UnorganizedSmoothParams> cases(3);
  cases[0].lambda = 0.5f;
  cases[0].mu = -0.53f;
  cases[1].weights = UnorganizedSmoothParams::Weights::distance;
  cases[1].iterations = 4;
  cases[2].rank_weights.assign(16, 1.f);
  for (int j = 0; j < 16; ++j) cases[2].rank_weights[j] = 1.f / float(1 + j);
  cases[2].max_move = 0.01f;
  for (std::size_t c = 0; c < cases.size(); ++c) {
    SmoothTimings t;
    const std::vector<float> gpu = gpu_smooth_unorganized(v, cases[c], &t);
    const std::vector<float> ref = reference_smooth_unorganized(v, nb, cases[c]);
    ASSERT_EQ(gpu.size(), ref.size());
    for (std::size_t i = 0; i < gpu.size(); ++i) {
      if (std::isnan(ref[i])) {
        ASSERT_TRUE(std::isnan(gpu[i]));
        continue;
      }
      ASSERT_NEAR(gpu[i], ref[i], 1e-6) << "case " << c << " value " << i;
    }
    EXPECT_GT(t.smooth_ms, 0.f);
  }
}

}  // namespace
}  // namespace pcnn
