// pcnn_bench_staging: every staging mode of KnnSession on self-kNN, with the machine's measured
// peak transfer rates beside each figure.
//
// Peak: a plain cudaMemcpyAsync of --peak-mb MB between a page-locked buffer and the device, each
// direction, CUDA events, median of 5. Per case: set_reference (upload + index) then a warm-up
// query and --repeats timed queries (median); end-to-end = set_reference wall time + query wall
// time (from host points to results in host memory). Overlap efficiency = end-to-end /
// max(transfer, compute), transfer = upload + download device time, compute = build + search.
#include <cuda_runtime.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "bench_util.hpp"
#include "pcnn/device.hpp"
#include "pcnn/knn.hpp"
#include "pcnn/session.hpp"
#include "pcnn/synthetic.hpp"

namespace {

using namespace pcnn;

#define CHECK(call)                                                          \
  do {                                                                       \
    const cudaError_t e = (call);                                            \
    if (e != cudaSuccess) {                                                  \
      std::fprintf(stderr, "%s failed: %s\n", #call, cudaGetErrorString(e)); \
      std::exit(1);                                                          \
    }                                                                        \
  } while (0)

// Peak host<->device rates (GB/s) over a page-locked buffer.
std::pair<double, double> peak_rates(std::size_t bytes) {
  void *host = nullptr, *dev = nullptr;
  CHECK(cudaHostAlloc(&host, bytes, cudaHostAllocDefault));
  CHECK(cudaMalloc(&dev, bytes));
  std::memset(host, 1, bytes);
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  auto time = [&](bool up) {
    std::vector<double> ms;
    for (int i = 0; i < 6; ++i) {
      CHECK(cudaEventRecord(a));
      CHECK(up ? cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice)
               : cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost));
      CHECK(cudaEventRecord(b));
      CHECK(cudaEventSynchronize(b));
      float t = 0;
      CHECK(cudaEventElapsedTime(&t, a, b));
      if (i > 0) ms.push_back(t);  // the first is a warm-up
    }
    return double(bytes) / (bench::median(ms) * 1e6);
  };
  const double up = time(true), down = time(false);
  CHECK(cudaEventDestroy(a));
  CHECK(cudaEventDestroy(b));
  CHECK(cudaFree(dev));
  CHECK(cudaFreeHost(host));
  return {up, down};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"pcnn staging benchmark"};
  std::string sizes = "100000,1000000,10000000", ks = "8,32", kind = "uniform",
              modes = "pageable,pinned,registered,mapped";
  int repeats = 3;
  long long peak_mb = 1024;
  std::string csv;
  app.add_option("--sizes", sizes)->capture_default_str();
  app.add_option("--ks", ks)->capture_default_str();
  app.add_option("--kind", kind, "uniform, clustered, lidar, hotspot or depth")
      ->capture_default_str();
  app.add_option("--modes", modes)->capture_default_str();
  app.add_option("--repeats", repeats)->capture_default_str();
  app.add_option("--peak-mb", peak_mb, "size of the peak-rate copies")->capture_default_str();
  app.add_option("--csv", csv, "also write the rows as CSV");
  CLI11_PARSE(app, argc, argv);
  const DeviceInfo dev = bench::start_device("pcnn_bench_staging");
  const auto [peak_up, peak_down] = peak_rates(std::size_t(peak_mb) << 20);
  std::printf("# peak page-locked copies: up %.1f GB/s, down %.1f GB/s (%lld MiB)\n", peak_up,
              peak_down, peak_mb);
  (void)dev;
  std::printf("%-10s %9s %3s %-10s %8s %7s %8s %7s %9s %9s %9s %9s %9s %7s %6s %8s\n", "kind", "n",
              "k", "staging", "up_GB/s", "%peak", "down_GB/s", "%peak", "build_ms", "search_ms",
              "xfer_ms", "e2e_ms", "oneshot", "overlap", "chunks", "stage_ms");
  std::ofstream os;
  if (!csv.empty()) {
    os.open(csv);
    os << "kind,n,k,staging,peak_up_gbps,peak_down_gbps,up_gbps,down_gbps,build_ms,search_ms,"
          "upload_ms,download_ms,e2e_ms,oneshot_e2e_ms,overlap_efficiency,chunks,host_staging_ms\n";
  }
  for (long long n : bench::parse_list(sizes)) {
    // "depth": an organized depth-camera scene (4:3, row-major: spatially coherent order).
    const int depth_w = static_cast<int>(std::sqrt(double(n) * 4 / 3));
    const std::vector<float> pts =
        kind == "depth" ? make_depth_scene(depth_w, static_cast<int>(n / depth_w), 0.005, 0.0, 7)
                        : make_synthetic_cloud(parse_synthetic_kind(kind), n, 7);
    if (kind == "depth") n = static_cast<long long>(pts.size() / 3);
    const PointsView v{pts.data(), n, 3};
    for (long long k64 : bench::parse_list(ks)) {
      const int k = static_cast<int>(k64);
      // The one-shot call (pageable, no chunks, owning results) for comparison.
      gpu_knn(v, nullptr, {k, true}, Algorithm::grid);
      std::vector<double> one;
      for (int i = 0; i < repeats; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        const KnnResult r = gpu_knn(v, nullptr, {k, true}, Algorithm::grid);
        one.push_back(
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                .count());
      }
      for (const std::string& mode_name : bench::parse_words(modes)) {
        KnnSession session({parse_staging(mode_name), 0});
        SessionTimings ref_t, q_t;
        session.set_reference(v, &ref_t);
        session.query(nullptr, {k, true}, &q_t);  // warm-up
        std::vector<double> e2e, up, down, build, search, xfer, stage;
        int chunks = 0;
        for (int i = 0; i < repeats; ++i) {
          session.set_reference(v, &ref_t);
          session.query(nullptr, {k, true}, &q_t);
          e2e.push_back(ref_t.total_ms + q_t.total_ms);
          up.push_back(ref_t.upload_gbps());
          down.push_back(q_t.download_gbps());
          build.push_back(ref_t.build_ms);
          search.push_back(q_t.search_ms);
          xfer.push_back(double(ref_t.upload_ms) + q_t.download_ms);
          chunks = q_t.chunks;
          stage.push_back(ref_t.host_staging_ms + q_t.host_staging_ms);
        }
        const double e = bench::median(e2e), x = bench::median(xfer),
                     c = bench::median(build) + bench::median(search);
        const double eff = e / std::max(x, c);
        std::printf(
            "%-10s %9lld %3d %-10s %8.1f %6.0f%% %8.1f %6.0f%% %9.3f %9.3f %9.3f %9.3f %9.3f %7.2f "
            "%6d %8.2f\n",
            kind.c_str(), n, k, to_string(session.staging()), bench::median(up),
            100 * bench::median(up) / peak_up, bench::median(down),
            100 * bench::median(down) / peak_down, bench::median(build), bench::median(search), x,
            e, bench::median(one), eff, chunks, bench::median(stage));
        std::fflush(stdout);
        if (os)
          os << kind << ',' << n << ',' << k << ',' << to_string(session.staging()) << ','
             << peak_up << ',' << peak_down << ',' << bench::median(up) << ','
             << bench::median(down) << ',' << bench::median(build) << ',' << bench::median(search)
             << ',' << ref_t.upload_ms << ',' << q_t.download_ms << ',' << e << ','
             << bench::median(one) << ',' << eff << ',' << chunks << ',' << bench::median(stage)
             << '\n';
      }
    }
  }
  return 0;
}
