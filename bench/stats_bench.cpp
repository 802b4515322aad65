// pcnn_bench_stats: reduction bandwidth against the measured copy bandwidth, and the outlier
// filters against PCL's.
//
//   pcnn_bench_stats [--points 100000000] [--filter-points 10000000] [--pcl-points 1000000]
//
// Reductions run on points already on the device (gpu_cloud_stats_device); the ceiling is a
// device-to-device cudaMemcpy of the same buffer, counting bytes read plus bytes written. Times
// are CUDA events, median of 5 after a warm-up.
#include <cuda_runtime.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "bench_util.hpp"
#include "pcnn/baseline.hpp"
#include "pcnn/device.hpp"
#include "pcnn/filters.hpp"
#include "pcnn/stats.hpp"
#include "pcnn/synthetic.hpp"

namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    std::exit(4);
  }
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
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

  const std::vector<float> xyz = pcnn::make_synthetic_cloud(pcnn::SyntheticKind::uniform, n, 3);
  const std::size_t bytes = xyz.size() * sizeof(float);
  float *d = nullptr, *d2 = nullptr;
  check(cudaMalloc(&d, bytes), "cudaMalloc");
  check(cudaMalloc(&d2, bytes), "cudaMalloc");
  check(cudaMemcpy(d, xyz.data(), bytes, cudaMemcpyHostToDevice), "upload");
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  std::vector<double> copy_ms, red_ms;
  for (int i = 0; i < 6; ++i) {
    cudaEventRecord(a);
    check(cudaMemcpy(d2, d, bytes, cudaMemcpyDeviceToDevice), "copy");
    cudaEventRecord(b);
    cudaEventSynchronize(b);
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    if (i) copy_ms.push_back(ms);
    const pcnn::CloudStats s = pcnn::gpu_cloud_stats_device({d, n, 3});
    if (i) red_ms.push_back(s.device_ms);
  }
  const double copy_bw = 2.0 * bytes / (median(copy_ms) * 1e-3) / 1e9;
  const double red_bw = double(bytes) / (median(red_ms) * 1e-3) / 1e9;
  std::printf("reduction  points %lld  bytes %.3f GB\n", n, bytes / 1e9);
  std::printf("  copy d2d        %8.3f ms  %7.1f GB/s (read + write)\n", median(copy_ms), copy_bw);
  std::printf("  cloud stats     %8.3f ms  %7.1f GB/s read  = %.1f %% of copy bandwidth\n",
              median(red_ms), red_bw, 100.0 * red_bw / copy_bw);
  cudaFree(d);
  cudaFree(d2);

  for (long long m : {nf, np}) {
    const std::vector<float> pts = pcnn::make_synthetic_cloud(pcnn::SyntheticKind::lidar, m, 9);
    const pcnn::PointsView v{pts.data(), m, 3};
    pcnn::gpu_statistical_outlier_removal(v, {16, 1.0});  // warm-up
    std::vector<double> sor, ror;
    pcnn::FilterResult gs, gr;
    for (int i = 0; i < 5; ++i) {
      gs = pcnn::gpu_statistical_outlier_removal(v, {16, 1.0});
      sor.push_back(double(gs.search_ms) + gs.filter_ms);
      gr = pcnn::gpu_radius_outlier_removal(v, {0.2, 5});
      ror.push_back(double(gr.search_ms) + gr.filter_ms);
    }
    std::printf("filters  lidar %lld points\n", m);
    std::printf(
        "  SOR mean_k=16 std_mul=1   GPU %8.3f ms (device: search %.3f + stats %.3f)  kept %zu\n",
        median(sor), gs.search_ms, gs.filter_ms, gs.kept.size());
    std::printf(
        "  ROR r=0.2 min=5           GPU %8.3f ms (device: search %.3f + decide %.3f)  kept %zu\n",
        median(ror), gr.search_ms, gr.filter_ms, gr.kept.size());
    if (m == np) {
      double ms_s = 0, ms_r = 0;
      const pcnn::FilterResult ps = pcnn::pcl_statistical_outlier_removal(v, {16, 1.0}, &ms_s);
      const pcnn::FilterResult pr = pcnn::pcl_radius_outlier_removal(v, {0.2, 5}, &ms_r);
      std::printf("  PCL SOR %9.1f ms  same points kept: %s\n", ms_s,
                  ps.kept == gs.kept ? "yes" : "NO");
      std::printf("  PCL ROR %9.1f ms  same points kept: %s\n", ms_r,
                  pr.kept == gr.kept ? "yes" : "NO");
    }
  }
  return 0;
}
