// pcnn_bench_stats: reduction bandwidth against the measured copy bandwidth, and the outlier
// filters against PCL's.
//
//   pcnn_bench_stats [--points 100000000] [--filter-points 10000000] [--pcl-points 1000000]
//
// Reductions run on points already on the device (gpu_cloud_stats on a device_points view, as a
// pipeline that keeps its clouds on the GPU calls it); the ceiling is a device-to-device
// cudaMemcpy of the same buffer, counting bytes read plus bytes written. Times are CUDA events
// (the reduction's own CloudStats::device_ms), median of 5 after an untimed warm-up. The filters
// take host points: their times are wall clock around the public call (upload, neighbor search,
// statistics, download of the kept indices), with the device parts they report beside, median
// of 5 after a warm-up; PCL's filters are one timed run after a warm-up.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "bench_util.hpp"
#include "pcnn/error.hpp"
#include "pcnn/filters.hpp"
#include "pcnn/points.hpp"
#include "pcnn/stats.hpp"
#include "pcnn/testing/baseline.hpp"
#include "pcnn/testing/synthetic.hpp"

namespace {

using pcnn::bench::Clock;
using pcnn::bench::cuda_check;
using pcnn::bench::median;
using pcnn::bench::ms_since;

void reductions(long long n) {
  const std::vector<float> xyz = pcnn::make_synthetic_cloud(pcnn::SyntheticKind::uniform, n, 3);
  pcnn::bench::DeviceArray<float> d(3 * n), d2(3 * n);
  d.upload(xyz.data());
  const std::size_t bytes = d.bytes();
  cudaEvent_t a, b;
  cuda_check(cudaEventCreate(&a), "cudaEventCreate");
  cuda_check(cudaEventCreate(&b), "cudaEventCreate");
  std::vector<double> copy_ms, red_ms;
  for (int i = 0; i < 6; ++i) {  // run 0: warm-up
    cuda_check(cudaEventRecord(a), "cudaEventRecord");
    cuda_check(cudaMemcpyAsync(d2.data(), d.data(), bytes, cudaMemcpyDeviceToDevice), "copy");
    cuda_check(cudaEventRecord(b), "cudaEventRecord");
    cuda_check(cudaEventSynchronize(b), "cudaEventSynchronize");
    float ms = 0;
    cuda_check(cudaEventElapsedTime(&ms, a, b), "cudaEventElapsedTime");
    if (i) copy_ms.push_back(ms);
    const pcnn::CloudStats s = pcnn::gpu_cloud_stats(pcnn::device_points(d.data(), n));
    if (i) red_ms.push_back(s.device_ms);
  }
  cuda_check(cudaEventDestroy(a), "cudaEventDestroy");
  cuda_check(cudaEventDestroy(b), "cudaEventDestroy");
  const double copy_bw = 2.0 * bytes / (median(copy_ms) * 1e-3) / 1e9;
  const double red_bw = double(bytes) / (median(red_ms) * 1e-3) / 1e9;
  std::printf("reduction  points %lld  bytes %.3f GB (device memory)\n", n, bytes / 1e9);
  std::printf("  copy d2d        %8.3f ms  %7.1f GB/s (read + write)\n", median(copy_ms), copy_bw);
  std::printf("  cloud stats     %8.3f ms  %7.1f GB/s read  = %.1f %% of copy bandwidth\n",
              median(red_ms), red_bw, 100.0 * red_bw / copy_bw);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"pcnn reduction and filter benchmark"};
  long long n = 100000000, nf = 10000000, np = 1000000;
  app.add_option("--points", n, "points for the reductions")->capture_default_str();
  app.add_option("--filter-points", nf, "points for the GPU filters")->capture_default_str();
  app.add_option("--pcl-points", np, "points for the GPU-vs-PCL filter comparison")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  pcnn::bench::start_device("pcnn_bench_stats");
  try {
    reductions(n);
    for (long long m : {nf, np}) {
      const std::vector<float> pts = pcnn::make_synthetic_cloud(pcnn::SyntheticKind::lidar, m, 9);
      const pcnn::PointsView v = pcnn::host_points(pts.data(), m);
      pcnn::gpu_statistical_outlier_removal(v, {16, 1.0});  // warm-up
      pcnn::gpu_radius_outlier_removal(v, {0.2, 5});
      std::vector<double> sor, ror, sor_dev, ror_dev;
      pcnn::FilterResult gs, gr;
      for (int i = 0; i < 5; ++i) {
        auto t0 = Clock::now();
        gs = pcnn::gpu_statistical_outlier_removal(v, {16, 1.0});
        sor.push_back(ms_since(t0));
        sor_dev.push_back(double(gs.search_ms) + gs.filter_ms);
        t0 = Clock::now();
        gr = pcnn::gpu_radius_outlier_removal(v, {0.2, 5});
        ror.push_back(ms_since(t0));
        ror_dev.push_back(double(gr.search_ms) + gr.filter_ms);
      }
      std::printf("filters  lidar %lld points (host memory)\n", m);
      std::printf(
          "  SOR mean_k=16 std_mul=1   GPU %8.3f ms wall (device %.3f: search %.3f + stats %.3f)  "
          "kept %zu\n",
          median(sor), median(sor_dev), gs.search_ms, gs.filter_ms, gs.kept.size());
      std::printf(
          "  ROR r=0.2 min=5           GPU %8.3f ms wall (device %.3f: search %.3f + decide %.3f)  "
          "kept %zu\n",
          median(ror), median(ror_dev), gr.search_ms, gr.filter_ms, gr.kept.size());
      if (m == np) {
        double ms_s = 0, ms_r = 0;
        pcnn::pcl_statistical_outlier_removal(v, {16, 1.0});  // warm-up
        const pcnn::FilterResult ps = pcnn::pcl_statistical_outlier_removal(v, {16, 1.0}, &ms_s);
        pcnn::pcl_radius_outlier_removal(v, {0.2, 5});
        const pcnn::FilterResult pr = pcnn::pcl_radius_outlier_removal(v, {0.2, 5}, &ms_r);
        std::printf("  PCL SOR %9.1f ms  same points kept: %s\n", ms_s,
                    ps.kept == gs.kept ? "yes" : "NO");
        std::printf("  PCL ROR %9.1f ms  same points kept: %s\n", ms_r,
                    pr.kept == gr.kept ? "yes" : "NO");
      }
    }
  } catch (const pcnn::error& e) {
    std::fprintf(stderr, "pcnn_bench_stats: %s\n", e.what());
    return 1;
  }
  return 0;
}
