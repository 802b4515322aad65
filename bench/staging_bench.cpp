// pcnn_bench_staging: every staging mode (IndexOptions::staging) of the CUDA backend on kNN from
// points in ordinary host memory to results in ordinary host memory, with the machine's measured
// peak transfer rates beside each figure.
//
// Peak: a plain cudaMemcpyAsync of --peak-mb MiB between a page-locked buffer and the device,
// each direction, CUDA events, median of 5 after a warm-up copy.
// Per case: an Index with the mode, then one untimed warm-up (build + search), then --repeats
// timed runs, median: build = wall clock of Index::build (upload + index), search = wall clock of
// the synchronizing Index::self_knn (--search self) or Index::knn of a second cloud of the same
// size (--search queries: the queries' upload is then part of the search), results into
// std::vectors allocated once. e2e = build + search. The device parts come from
// Index::last_timings() (CUDA events): up/down GB/s = bytes / device time of the copies; xfer =
// upload + download; compute = index build + query ordering + search; overlap = e2e / max(xfer,
// compute) (1 = transfers fully hidden behind compute, or the reverse). Mapped mode has no copies:
// kernels read and write host memory, so its rates are empty and its cost is in the search.
// one-shot = wall clock of a new Index(points) + the owning self_knn/knn (its own new memory pool
// and page-locked buffers, owning std::vector results), after the same warm-up, median.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "bench_util.hpp"
#include "pcnn/error.hpp"
#include "pcnn/index.hpp"
#include "pcnn/testing/synthetic.hpp"

namespace {

using namespace pcnn;
using bench::Clock;
using bench::cuda_check;
using bench::median;
using bench::ms_since;

// Peak host<->device rates (GB/s) over a page-locked buffer.
std::pair<double, double> peak_rates(std::size_t bytes) {
  void* host = nullptr;
  cuda_check(cudaHostAlloc(&host, bytes, cudaHostAllocDefault), "cudaHostAlloc");
  std::memset(host, 1, bytes);
  bench::DeviceArray<char> dev(static_cast<std::int64_t>(bytes));
  cudaEvent_t a, b;
  cuda_check(cudaEventCreate(&a), "cudaEventCreate");
  cuda_check(cudaEventCreate(&b), "cudaEventCreate");
  auto time = [&](bool up) {
    std::vector<double> ms;
    for (int i = 0; i < 6; ++i) {
      cuda_check(cudaEventRecord(a), "cudaEventRecord");
      cuda_check(up ? cudaMemcpyAsync(dev.data(), host, bytes, cudaMemcpyHostToDevice)
                    : cudaMemcpyAsync(host, dev.data(), bytes, cudaMemcpyDeviceToHost),
                 "cudaMemcpyAsync");
      cuda_check(cudaEventRecord(b), "cudaEventRecord");
      cuda_check(cudaEventSynchronize(b), "cudaEventSynchronize");
      float t = 0;
      cuda_check(cudaEventElapsedTime(&t, a, b), "cudaEventElapsedTime");
      if (i > 0) ms.push_back(t);  // the first is a warm-up
    }
    return double(bytes) / (median(ms) * 1e6);
  };
  const double up = time(true), down = time(false);
  cuda_check(cudaEventDestroy(a), "cudaEventDestroy");
  cuda_check(cudaEventDestroy(b), "cudaEventDestroy");
  cuda_check(cudaFreeHost(host), "cudaFreeHost");
  return {up, down};
}

// bytes / device ms in GB/s; NAN when the index reported no time for bytes it moved.
double rate(std::int64_t bytes, double ms) { return ms > 0 ? double(bytes) / (ms * 1e6) : NAN; }

std::vector<float> make_cloud(const std::string& kind, long long& n, std::uint64_t seed) {
  if (kind != "depth") return make_synthetic_cloud(parse_synthetic_kind(kind), n, seed);
  // An organized depth-camera scene (4:3, row-major: a spatially coherent order).
  const int w = static_cast<int>(std::sqrt(double(n) * 4 / 3));
  std::vector<float> pts = make_depth_scene(w, static_cast<int>(n / w), 0.005, 0.0, seed);
  n = static_cast<long long>(pts.size() / 3);
  return pts;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"pcnn staging benchmark (IndexOptions::staging)"};
  std::string sizes = "100000,1000000,10000000", ks = "8,32", kind = "uniform",
              modes = "pageable,pinned,registered,mapped", search = "self";
  int repeats = 3;
  long long peak_mb = 1024;
  std::string csv;
  app.add_option("--sizes", sizes)->capture_default_str();
  app.add_option("--ks", ks)->capture_default_str();
  app.add_option("--kind", kind, "uniform, clustered, lidar, hotspot or depth")
      ->capture_default_str();
  app.add_option("--modes", modes, "auto,pageable,pinned,registered,mapped")->capture_default_str();
  app.add_option(
         "--search", search,
         "self (self_knn, exclude_self) or queries (knn of a second cloud of the same size)")
      ->check(CLI::IsMember({"self", "queries"}))
      ->capture_default_str();
  app.add_option("--repeats", repeats)->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--peak-mb", peak_mb, "size of the peak-rate copies")->capture_default_str();
  app.add_option("--csv", csv, "also write the rows as CSV");
  CLI11_PARSE(app, argc, argv);
  bench::start_device("pcnn_bench_staging");
  const auto [peak_up, peak_down] = peak_rates(std::size_t(peak_mb) << 20);
  std::printf("# peak page-locked copies: up %.1f GB/s, down %.1f GB/s (%lld MiB)\n", peak_up,
              peak_down, peak_mb);
  std::printf(
      "# %s kNN, points and results in ordinary host memory; times in ms, median of %d timed "
      "runs after 1 untimed warm-up; build/search/e2e/one-shot: wall clock of the public calls; "
      "rates, xfer, compute: Index::last_timings() (CUDA events)\n",
      search == "self" ? "self" : "separate-query", repeats);
  std::printf("%-10s %9s %3s %-10s %8s %7s %8s %7s %9s %9s %9s %9s %9s %9s %7s %6s\n", "kind", "n",
              "k", "staging", "up_GB/s", "%peak", "down_GB/s", "%peak", "build_ms", "search_ms",
              "xfer_ms", "comp_ms", "e2e_ms", "oneshot", "overlap", "chunks");
  std::ofstream os;
  if (!csv.empty()) {
    os.open(csv);
    os << "kind,n,k,search,staging,peak_up_gbps,peak_down_gbps,up_gbps,down_gbps,build_ms,"
          "search_ms,upload_ms,download_ms,compute_ms,e2e_ms,oneshot_ms,overlap_efficiency,"
          "chunks\n";
  }
  try {
    for (long long n : bench::parse_list(sizes)) {
      const std::vector<float> pts = make_cloud(kind, n, 7);
      long long nq = n;
      const std::vector<float> qpts =
          search == "queries" ? make_cloud(kind, nq, 8) : std::vector<float>();
      const PointsView v = host_points(pts.data(), n);
      const PointsView qv = host_points(qpts.data(), nq);
      const long long rows = search == "queries" ? nq : n;
      for (const long long k64 : bench::parse_list(ks)) {
        KnnParams params;
        params.k = static_cast<int>(k64);
        params.exclude_self = search == "self";
        std::vector<std::int32_t> idx(static_cast<std::size_t>(rows) * params.k);
        std::vector<float> d2(idx.size());
        const MatrixView<std::int32_t> iv{idx.data(), rows, params.k};
        const MatrixView<float> dv{d2.data(), rows, params.k};

        // The one-shot caller: a new index and owning results each time.
        IndexOptions cuda;
        cuda.backend = Backend::cuda;
        std::vector<double> one;
        for (int i = 0; i <= repeats; ++i) {
          const auto t0 = Clock::now();
          Index fresh(v, cuda);
          const KnnResult r = search == "self" ? fresh.self_knn(params) : fresh.knn(qv, params);
          if (i > 0) one.push_back(ms_since(t0));  // run 0 is the warm-up
        }

        for (const std::string& mode_name : bench::parse_words(modes)) {
          IndexOptions options = cuda;
          options.staging = parse_staging(mode_name);
          Index index(options);
          auto run_search = [&] {
            if (search == "self")
              index.self_knn(params, iv, dv);
            else
              index.knn(qv, params, iv, dv);
          };
          index.build(v);  // warm-up
          run_search();
          std::vector<double> e2e, build, srch, up, down, xfer, comp;
          SearchTimings tb, tq;
          for (int i = 0; i < repeats; ++i) {
            const auto t0 = Clock::now();
            index.build(v);
            const double b = ms_since(t0);
            tb = index.last_timings();
            const auto t1 = Clock::now();
            run_search();
            const double s = ms_since(t1);
            tq = index.last_timings();
            build.push_back(b);
            srch.push_back(s);
            e2e.push_back(b + s);
            // The points' upload is in the build; separate queries' upload is in the search.
            up.push_back(search == "self" ? rate(tb.upload_bytes, tb.upload_ms)
                                          : rate(tq.upload_bytes, tq.upload_ms));
            down.push_back(rate(tq.download_bytes, tq.download_ms));
            xfer.push_back(double(tb.upload_ms) + tq.upload_ms + tq.download_ms);
            comp.push_back(double(tb.build_ms) + tq.build_ms + tq.search_ms);
          }
          const double e = median(e2e), x = median(xfer), c = median(comp);
          const double eff = e / std::max(x, c);
          const double u = median(up), d = median(down);
          std::printf(
              "%-10s %9lld %3d %-10s %8.1f %6.0f%% %8.1f %6.0f%% %9.3f %9.3f %9.3f %9.3f %9.3f "
              "%9.3f %7.2f %6d\n",
              kind.c_str(), n, params.k, to_string(tb.staging), u, 100 * u / peak_up, d,
              100 * d / peak_down, median(build), median(srch), x, c, e, median(one), eff,
              tq.passes);
          std::fflush(stdout);
          if (os)
            os << kind << ',' << n << ',' << params.k << ',' << search << ','
               << to_string(tb.staging) << ',' << peak_up << ',' << peak_down << ',' << u << ','
               << d << ',' << median(build) << ',' << median(srch) << ','
               << (search == "self" ? tb.upload_ms : tq.upload_ms) << ',' << tq.download_ms << ','
               << c << ',' << e << ',' << median(one) << ',' << eff << ',' << tq.passes << '\n';
        }
      }
    }
  } catch (const pcnn::error& e) {
    std::fprintf(stderr, "pcnn_bench_staging: %s\n", e.what());
    return 1;
  }
  return 0;
}
