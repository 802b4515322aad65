// pcnn_bench_normals: normals of a synthetic cloud (default 1M LiDAR-like points, k = 16) with
// pcnn (GPU or CPU backend) against PCL's NormalEstimationOMP on all cores, and how far apart
// the two are (angles).
//
//   pcnn_bench_normals [--points 1000000] [-k 16 | --radius R] [--kind lidar] [--device auto]
//                      [--repeat 5] [--no-pcl]
//
// pcnn is timed as a user calls it: from points in host memory, building the index and
// estimating the normals into host memory (wall clock of both public calls), with the parts the
// calls report (build, neighbor search, normals, download: device time on the GPU); and, on the
// GPU, with the points and the results in device memory. Median of --repeat runs after an
// untimed warm-up. PCL: building its k-d tree and NormalEstimationOMP::compute with every
// hardware thread, median of 3 runs after a warm-up.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "bench_util.hpp"
#include "pcnn/error.hpp"
#include "pcnn/index.hpp"
#include "pcnn/normals.hpp"
#include "pcnn/testing/baseline.hpp"
#include "pcnn/testing/synthetic.hpp"

namespace {

using pcnn::bench::Clock;
using pcnn::bench::median;
using pcnn::bench::ms_since;
using pcnn::bench::quantile;

struct Parts {
  std::vector<double> total, build, search, normals, download;
  void add(double t, double b, const pcnn::NormalTimings& n) {
    total.push_back(t);
    build.push_back(b);
    search.push_back(n.search_ms);
    normals.push_back(n.normals_ms);
    download.push_back(n.download_ms);
  }
  void print(const char* what) const {
    std::printf(
        "%-28s total %9.3f ms  (build %8.3f, search %8.3f, normals %8.3f, download %7.3f)\n", what,
        median(total), median(build), median(search), median(normals), median(download));
  }
};

// Angles between two sets of normals (radians, sign ignored), and how many differ in side.
void print_agreement(const pcnn::NormalsResult& a, const pcnn::NormalsResult& b) {
  std::vector<double> angles;
  long long nan_mismatch = 0, sides = 0;
  for (std::int64_t i = 0; i < a.rows; ++i) {
    const float* n = &a.normals[i * 3];
    const float* m = &b.normals[i * 3];
    if (std::isnan(n[0]) || std::isnan(m[0])) {
      nan_mismatch += std::isnan(n[0]) != std::isnan(m[0]);
      continue;
    }
    const double dot = double(n[0]) * m[0] + double(n[1]) * m[1] + double(n[2]) * m[2];
    const double cx = double(n[1]) * m[2] - double(n[2]) * m[1],
                 cy = double(n[2]) * m[0] - double(n[0]) * m[2],
                 cz = double(n[0]) * m[1] - double(n[1]) * m[0];
    angles.push_back(std::atan2(std::sqrt(cx * cx + cy * cy + cz * cz), std::fabs(dot)));
    sides += dot < 0;
  }
  const auto within = [&](double t) {
    return 100.0 *
           double(std::count_if(angles.begin(), angles.end(), [t](double x) { return x <= t; })) /
           double(std::max<std::size_t>(angles.size(), 1));
  };
  std::printf(
      "agreement with PCL: %zu normals; angle median %.3g, 99%% %.3g, max %.3g rad; within 1e-3 "
      "rad %.3f %%; opposite sides %lld; NaN in one only %lld\n",
      angles.size(), quantile(angles, 0.5), quantile(angles, 0.99),
      angles.empty() ? 0.0 : *std::max_element(angles.begin(), angles.end()), within(1e-3), sides,
      nan_mismatch);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"pcnn normals against PCL's NormalEstimationOMP"};
  long long n = 1000000;
  int k = 16, repeat = 5, threads = 0;
  double radius = 0;
  std::string kind = "lidar", device = "auto";
  bool no_pcl = false;
  app.add_option("--points", n, "points")->capture_default_str();
  auto* k_opt = app.add_option("-k", k, "neighbors (3-128)")->capture_default_str();
  app.add_option("--radius", radius, "radius neighborhoods instead of k")->excludes(k_opt);
  app.add_option("--kind", kind, "uniform, clustered or lidar")->capture_default_str();
  app.add_option("--device", device, "auto, cuda or cpu")->capture_default_str();
  app.add_option("--threads", threads, "CPU backend threads (0: all)")->capture_default_str();
  app.add_option("--repeat", repeat, "timed runs (median)")->capture_default_str();
  app.add_flag("--no-pcl", no_pcl, "skip PCL");
  CLI11_PARSE(app, argc, argv);
  try {
    const pcnn::Backend backend = pcnn::bench::start_backend("pcnn_bench_normals", device, threads);
    const std::vector<float> xyz =
        pcnn::make_synthetic_cloud(pcnn::parse_synthetic_kind(kind), n, 17);
    const pcnn::PointsView host = pcnn::host_points(xyz.data(), n);
    pcnn::NormalParams p;
    if (radius > 0)
      p.radius = radius;
    else
      p.k = k;
    std::printf("# %s, %lld points, %s\n", kind.c_str(), n,
                radius > 0 ? ("radius " + std::to_string(radius)).c_str()
                           : ("k = " + std::to_string(k)).c_str());
    pcnn::IndexOptions o;
    o.backend = backend;
    o.threads = threads;

    // From host memory to host memory, index built each run.
    Parts hh;
    pcnn::NormalsResult ours;
    for (int r = 0; r <= repeat; ++r) {
      const auto t0 = Clock::now();
      pcnn::Index index(host, o);
      const double build = index.last_timings().total_ms;
      ours = pcnn::estimate_normals(index, p);
      const double total = ms_since(t0);
      if (r > 0) hh.add(total, build, ours.timings);
    }
    hh.print(backend == pcnn::Backend::cuda ? "pcnn cuda, host to host" : "pcnn cpu");

    if (backend == pcnn::Backend::cuda) {  // points and results on the device
      pcnn::bench::DeviceArray<float> d_pts(3 * n), d_normals(3 * n), d_curv(n);
      d_pts.upload(xyz.data());
      Parts dd;
      for (int r = 0; r <= repeat; ++r) {
        const auto t0 = Clock::now();
        pcnn::Index index(pcnn::device_points(d_pts.data(), n), o);
        const double build = index.last_timings().total_ms;
        const pcnn::NormalTimings t =
            pcnn::estimate_normals(index, p, {d_normals.data(), n, 3, pcnn::Memory::device},
                                   {d_curv.data(), n, pcnn::Memory::device});
        const double total = ms_since(t0);
        if (r > 0) dd.add(total, build, t);
      }
      dd.print("pcnn cuda, device to device");
    }

    if (!no_pcl && p.max_nn == 0) {
      std::vector<double> pcl_ms;
      pcnn::NormalsResult theirs;
      for (int r = 0; r <= 3; ++r) {
        double ms = 0;
        theirs = pcnn::pcl_normals(host, p, &ms);
        if (r > 0) pcl_ms.push_back(ms);
      }
      std::printf("%-28s total %9.3f ms  (%d threads: k-d tree and NormalEstimationOMP)\n", "PCL",
                  median(pcl_ms), pcnn::bench::cpu_threads(0));
      std::printf("speedup (PCL / pcnn host to host): %.2f x\n", median(pcl_ms) / median(hh.total));
      print_agreement(ours, theirs);
    }
  } catch (const pcnn::error& e) {
    std::fprintf(stderr, "pcnn_bench_normals: %s\n", e.what());
    return 1;
  }
  return 0;
}
