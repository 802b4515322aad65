// pcnn_bench_knn: exact kNN on synthetic clouds (uniform, clustered, LiDAR-like), every size and
// k of the standard set, GPU algorithms against PCL's k-d tree on all cores.
//
// Times are device time from CUDA events (build + query, as a library user's frame would see
// them after the data is on the device), the median of --repeats runs after one warm-up run.
// Upload and download are reported apart. Agreement with the CPU baseline is checked where the
// baseline runs.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "bench_util.hpp"
#include "pcnn/baseline.hpp"
#include "pcnn/device.hpp"
#include "pcnn/knn.hpp"
#include "pcnn/reference.hpp"
#include "pcnn/synthetic.hpp"

namespace {

using namespace pcnn;
using bench::median;
using bench::parse_list;
using bench::parse_words;

struct Row {
  std::string kind, algorithm;
  long long n = 0;
  int k = 0;
  double build_ms = 0, query_ms = 0, total_ms = 0, upload_ms = 0, download_ms = 0;
  double evaluations = 0, evals_per_s = 0, peak_bytes_per_point = 0;
  long long outliers = 0;
  double outlier_ms = 0;
  double cpu_build_ms = -1, cpu_query_ms = -1;
  double agree_pct = -1;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"pcnn exact kNN benchmark"};
  std::string sizes = "10000,100000,1000000,10000000", ks = "1,8,16,32,64";
  std::string kinds = "uniform,clustered,lidar", algorithms = "grid,brute";
  long long brute_max = 1000000, cpu_max = 1000000;
  int repeats = 5;
  std::string csv;
  app.add_option("--sizes", sizes, "comma-separated point counts")->capture_default_str();
  app.add_option("--ks", ks, "comma-separated k values")->capture_default_str();
  app.add_option("--kinds", kinds, "uniform,clustered,lidar")->capture_default_str();
  app.add_option("--algorithms", algorithms, "grid,brute")->capture_default_str();
  app.add_option("--brute-max", brute_max, "largest n for brute force (k = 8 only above 100k)")
      ->capture_default_str();
  app.add_option("--cpu-max", cpu_max, "largest n for the PCL baseline")->capture_default_str();
  app.add_option("--repeats", repeats, "timed runs per case (median reported)")
      ->capture_default_str();
  app.add_option("--csv", csv, "also write the rows as CSV");
  CLI11_PARSE(app, argc, argv);

  const DeviceInfo dev = bench::start_device("pcnn_bench_knn");
  std::printf("%-9s %9s %3s %-5s %9s %9s %9s %8s %8s %10s %9s %7s %9s %8s %9s %7s\n", "kind", "n",
              "k", "alg", "build_ms", "query_ms", "total_ms", "up_ms", "down_ms", "evals/q",
              "evals/s", "B/pt", "outliers", "out_ms", "cpu_ms", "agree%");
  std::vector<Row> rows;
  for (const std::string& kind_name : parse_words(kinds)) {
    const SyntheticKind kind = parse_synthetic_kind(kind_name);
    for (long long n : parse_list(sizes)) {
      const std::vector<float> pts = make_synthetic_cloud(kind, n, 42);
      const PointsView v{pts.data(), n, 3};
      for (long long k64 : parse_list(ks)) {
        const int k = static_cast<int>(k64);
        KnnResult cpu;
        CpuKnnTimings ct;
        const bool run_cpu = n <= cpu_max;
        if (run_cpu) cpu = pcl_knn(v, nullptr, {k, true}, &ct);
        for (const std::string& alg_name : parse_words(algorithms)) {
          const Algorithm alg = parse_algorithm(alg_name);
          if (alg == Algorithm::brute_force && (n > brute_max || (n > 100000 && k != 8))) continue;
          Row r;
          r.kind = kind_name;
          r.algorithm = alg_name;
          r.n = n;
          r.k = k;
          GpuKnnTimings t;
          KnnResult res = gpu_knn(v, nullptr, {k, true}, alg, &t);  // warm-up
          std::vector<double> b, q, tot, up, down, om;
          reset_peak_device_memory();
          const std::int64_t before = device_memory_stats().current_bytes;
          for (int i = 0; i < repeats; ++i) {
            res = gpu_knn(v, nullptr, {k, true}, alg, &t);
            b.push_back(t.build_ms);
            q.push_back(t.search_ms);
            tot.push_back(double(t.build_ms) + t.search_ms);
            up.push_back(t.upload_ms);
            down.push_back(t.download_ms);
            om.push_back(t.outlier_ms);
          }
          r.build_ms = median(b);
          r.query_ms = median(q);
          r.total_ms = median(tot);
          r.upload_ms = median(up);
          r.download_ms = median(down);
          r.evaluations = double(t.distance_evaluations);
          r.evals_per_s = r.evaluations / (r.query_ms * 1e-3);
          r.peak_bytes_per_point =
              double(device_memory_stats().peak_bytes - before) / double(std::max(n, 1LL));
          r.outliers = t.outlier_queries;
          r.outlier_ms = median(om);
          if (run_cpu) {
            r.cpu_build_ms = ct.build_ms;
            r.cpu_query_ms = ct.query_ms;
            const KnnAgreement ag = compare_knn(v, nullptr, res, cpu, true);
            r.agree_pct =
                100.0 * double(ag.agreeing_rows) / double(std::max<std::int64_t>(ag.rows, 1));
          }
          std::printf(
              "%-9s %9lld %3d %-5s %9.3f %9.3f %9.3f %8.3f %8.3f %10.1f %9.3g %7.1f %9lld %8.3f "
              "%9.1f %7.3f\n",
              r.kind.c_str(), n, k, r.algorithm.c_str(), r.build_ms, r.query_ms, r.total_ms,
              r.upload_ms, r.download_ms, r.evaluations / double(std::max(n, 1LL)), r.evals_per_s,
              r.peak_bytes_per_point, r.outliers, r.outlier_ms,
              run_cpu ? r.cpu_build_ms + r.cpu_query_ms : -1.0, r.agree_pct);
          std::fflush(stdout);
          rows.push_back(r);
        }
      }
    }
  }
  if (!csv.empty()) {
    std::ofstream os(csv);
    os << "kind,n,k,algorithm,build_ms,query_ms,total_ms,upload_ms,download_ms,evaluations,"
          "evals_per_s,peak_bytes_per_point,outliers,outlier_ms,cpu_build_ms,cpu_query_ms,agree_"
          "pct\n";
    for (const Row& r : rows)
      os << r.kind << ',' << r.n << ',' << r.k << ',' << r.algorithm << ',' << r.build_ms << ','
         << r.query_ms << ',' << r.total_ms << ',' << r.upload_ms << ',' << r.download_ms << ','
         << r.evaluations << ',' << r.evals_per_s << ',' << r.peak_bytes_per_point << ','
         << r.outliers << ',' << r.outlier_ms << ',' << r.cpu_build_ms << ',' << r.cpu_query_ms
         << ',' << r.agree_pct << '\n';
  }
  return 0;
}
