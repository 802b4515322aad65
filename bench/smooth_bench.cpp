// pcnn_bench_smooth: stencil smoothing of organized depth scenes (640 x 480, 1920 x 1080) and
// Laplacian / Taubin smoothing of a 1M-point unorganized cloud (points in host memory), checked
// against the CPU reference; writes before/after pictures of the organized scene as PNG to
// --pictures.
//
// Timing: one untimed warm-up run, then the median of --repeats runs (unorganized: at most 5) of
// the wall clock around the public call (upload, neighbor search, smoothing, download), with the
// device parts the call reports in SmoothTimings (CUDA events) beside it. The CPU reference and
// its neighbors (an Index self-search) are not timed.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "bench_util.hpp"
#include "pcnn/error.hpp"
#include "pcnn/index.hpp"
#include "pcnn/smooth.hpp"
#include "pcnn/testing/smooth_reference.hpp"
#include "pcnn/testing/synthetic.hpp"
#include "png.hpp"

namespace {

using namespace pcnn;
using bench::Clock;
using bench::median;
using bench::ms_since;

double max_difference(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (std::isfinite(a[i]) && std::isfinite(b[i]))
      worst = std::max(worst, std::fabs(double(a[i]) - b[i]));
    else if (std::isfinite(a[i]) != std::isfinite(b[i]))
      return INFINITY;
  return worst;
}

std::array<std::uint8_t, 3> colormap(float z, float lo, float hi) {
  if (!std::isfinite(z)) return {0, 0, 0};
  const float t = std::clamp((z - lo) / (hi - lo), 0.f, 1.f);
  // blue -> cyan -> yellow -> red
  const float r = std::clamp(2.f * t - 0.5f, 0.f, 1.f) * 255.f,
              g = (1.f - std::fabs(2.f * t - 1.f)) * 255.f,
              b = std::clamp(1.f - 2.f * t + 0.5f, 0.f, 1.f) * 255.f;
  return {std::uint8_t(r), std::uint8_t(g), std::uint8_t(b)};
}

// The depth image (z), colors spanning 1.98..2.02 m: the box face's noise shows as speckle, the
// wall (about 4 m) is red, holes are black.
void depth_picture(const std::vector<float>& xyz, int w, int h, const std::string& path) {
  bench::Png png(w, h);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      png.set(x, y, colormap(xyz[(std::size_t(y) * w + x) * 3 + 2], 1.98f, 2.02f));
  png.write(path);
}

// Side views of the middle row: on top, z from 1.97 (bottom) to 2.03 m (top) along the whole row
// (the wall, about 4 m away, is off the chart); below, the box's left edge magnified 8 times
// across (40 columns each side), z from 1.8 to 4.4 m, where an edge smeared toward the wall shows
// as points between the two levels. Noisy in grey, truth in green, smoothed in red.
void profile_picture(const std::vector<float>& noisy, const std::vector<float>& smooth,
                     const std::vector<float>& truth, int w, int h, const std::string& path) {
  const int panel = 200;
  bench::Png png(w, 2 * panel + 4);
  for (int x = 0; x < w; ++x)
    for (int y = 0; y < png.height(); ++y)
      png.set(x, y,
              y >= panel && y < panel + 4 ? std::array<std::uint8_t, 3>{0, 0, 0}
                                          : std::array<std::uint8_t, 3>{255, 255, 255});
  auto z_at = [&](const std::vector<float>& v, int x) {
    return v[(std::size_t(h / 2) * w + x) * 3 + 2];
  };
  auto plot = [&](const std::vector<float>& v, std::array<std::uint8_t, 3> c) {
    for (int x = 0; x < w; ++x) {  // top: the whole row, fine depth scale
      const float z = z_at(v, x);
      if (!std::isfinite(z) || z > 2.03f) continue;
      const int y = std::clamp(int((z - 1.97f) / 0.06f * (panel - 1)), 0, panel - 1);
      png.set(x, panel - 1 - y, c);
      png.set(x, panel - 2 - y, c);
    }
    const int edge = w / 3;  // bottom: the left edge, 8 pixels per column, full depth scale
    for (int x = edge - 40; x < edge + 40; ++x) {
      const float z = z_at(v, x);
      if (!std::isfinite(z)) continue;
      const int y = std::clamp(int((z - 1.8f) / 2.6f * (panel - 1)), 0, panel - 1);
      for (int dx = 0; dx < 6; ++dx)
        for (int dy = 0; dy < 3; ++dy)
          png.set((x - edge + 40) * 8 + dx, png.height() - 1 - y - dy, c);
    }
  };
  plot(noisy, {120, 120, 120});
  plot(truth, {0, 160, 0});
  plot(smooth, {220, 0, 0});
  png.write(path);
}

void smooth_organized(int repeats, const std::string& pictures) {
  std::printf("%-22s %-28s %10s %10s %10s %10s %12s\n", "cloud", "method", "wall_ms", "up_ms",
              "smooth_ms", "down_ms", "max|gpu-cpu|");
  struct Case {
    const char* name;
    const char* stencil;
    float jump;
  };
  const Case cases[] = {{"gaussian 5x5 separable", "gaussian:2:1", 0.f},
                        {"gaussian 5x5 + jump", "gaussian:2:1", 0.1f},
                        {"gaussian 15x15 + jump", "gaussian:7:3", 0.1f}};
  for (const auto& [w, h] : {std::pair{640, 480}, std::pair{1920, 1080}}) {
    std::vector<float> truth;
    const std::vector<float> scene = make_depth_scene(w, h, 0.005, 0.02, 11, &truth);
    const PointsView v = host_points(scene.data(), std::int64_t(w) * h);
    for (const Case& c : cases) {
      OrganizedSmoothParams p;
      p.stencil = parse_stencil(c.stencil);
      p.depth_jump = c.jump;
      SmoothTimings t;
      std::vector<float> out = gpu_smooth_organized(v, w, h, p, &t);  // warm-up
      std::vector<double> wall, up, sm, down;
      for (int i = 0; i < repeats; ++i) {
        const auto t0 = Clock::now();
        out = gpu_smooth_organized(v, w, h, p, &t);
        wall.push_back(ms_since(t0));
        up.push_back(t.upload_ms);
        sm.push_back(t.smooth_ms);
        down.push_back(t.download_ms);
      }
      const double diff = max_difference(out, reference_smooth_organized(v, w, h, p));
      std::printf("%-22s %-28s %10.4f %10.4f %10.4f %10.4f %12.3g\n",
                  (std::to_string(w) + "x" + std::to_string(h)).c_str(), c.name, median(wall),
                  median(up), median(sm), median(down), diff);
    }
    if (!pictures.empty() && w == 640) {
      OrganizedSmoothParams p;
      p.stencil = parse_stencil("gaussian:3:1.5");
      p.depth_jump = 0.1f;
      const std::vector<float> out = gpu_smooth_organized(v, w, h, p);
      depth_picture(scene, w, h, pictures + "/smooth-depth-before.png");
      depth_picture(out, w, h, pictures + "/smooth-depth-after.png");
      profile_picture(scene, out, truth, w, h, pictures + "/smooth-profile.png");
      p.depth_jump = 0;
      profile_picture(scene, gpu_smooth_organized(v, w, h, p), truth, w, h,
                      pictures + "/smooth-profile-no-jump-test.png");
    }
  }
}

void smooth_unorganized(int repeats, long long n) {
  const std::vector<float> pts = make_synthetic_cloud(SyntheticKind::lidar, n, 12);
  const PointsView v = host_points(pts.data(), n);
  // The reference smooths over the same neighbor lists: a self-search of the same k.
  Index index(v);
  KnnParams kp;
  kp.k = 16;
  kp.exclude_self = true;
  const KnnResult nb = index.self_knn(kp);
  for (const bool taubin : {true, false}) {
    UnorganizedSmoothParams p;
    p.k = kp.k;
    p.iterations = 10;
    p.lambda = 0.5f;
    p.mu = taubin ? -0.53f : 0.f;
    SmoothTimings t;
    std::vector<float> out = gpu_smooth_unorganized(v, p, &t);  // warm-up
    std::vector<double> wall, up, knn, sm, down;
    for (int i = 0; i < repeats; ++i) {
      const auto t0 = Clock::now();
      out = gpu_smooth_unorganized(v, p, &t);
      wall.push_back(ms_since(t0));
      up.push_back(t.upload_ms);
      knn.push_back(t.knn_ms);
      sm.push_back(t.smooth_ms);
      down.push_back(t.download_ms);
    }
    const double diff = max_difference(out, reference_smooth_unorganized(v, nb, p));
    std::printf("%-22s %-28s %10.4f %10.4f %10.4f %10.4f %12.3g   (device: knn %.3f ms)\n",
                ("lidar " + std::to_string(n)).c_str(),
                taubin ? "Taubin k=16 10 it" : "Laplacian k=16 10 it", median(wall), median(up),
                median(sm), median(down), diff, median(knn));
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"pcnn smoothing benchmark"};
  int repeats = 20;
  long long unorganized_n = 1000000;
  std::string pictures;
  app.add_option("--repeats", repeats, "timed runs per case (median)")->capture_default_str();
  app.add_option("--unorganized-n", unorganized_n, "points of the unorganized cloud")
      ->capture_default_str();
  app.add_option("--pictures", pictures, "directory for the PNG pictures (none when empty)");
  CLI11_PARSE(app, argc, argv);
  bench::start_device("pcnn_bench_smooth");
  try {
    smooth_organized(repeats, pictures);
    smooth_unorganized(std::min(repeats, 5), unorganized_n);
  } catch (const pcnn::error& e) {
    std::fprintf(stderr, "pcnn_bench_smooth: %s\n", e.what());
    return 1;
  }
  return 0;
}
