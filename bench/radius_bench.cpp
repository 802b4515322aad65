// pcnn_bench_radius: exact radius search and hybrid search (max_nn nearest within r) on
// synthetic clouds, against PCL's radiusSearch on all cores.
//
// The radius of each cloud is the median distance to the M-th nearest neighbor (M =
// --neighbors, 32 by default), so the mean neighborhood is about M. Times are device time from
// CUDA events, the median of --repeats runs after one warm-up run: build (index) + search
// (count, fill and sort for radius; the bounded kNN for hybrid); download apart.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "bench_util.hpp"
#include "pcnn/baseline.hpp"
#include "pcnn/device.hpp"
#include "pcnn/knn.hpp"
#include "pcnn/radius.hpp"
#include "pcnn/reference.hpp"
#include "pcnn/synthetic.hpp"

namespace {

using namespace pcnn;
using bench::median;

struct Row {
  std::string kind, mode;
  long long n = 0;
  double radius = 0, mean = 0, longest = 0;
  double build_ms = 0, search_ms = 0, total_ms = 0, download_ms = 0;
  int passes = 1;
  double cpu_ms = -1, agree_pct = -1;
};

// The median over points of the distance to the m-th nearest other point.
double radius_for(const PointsView& v, int m) {
  const KnnResult r = gpu_knn(v, nullptr, {m, true});
  std::vector<float> d;
  for (std::int64_t q = 0; q < r.rows; ++q) d.push_back(r.sqdist[q * m + m - 1]);
  std::nth_element(d.begin(), d.begin() + d.size() / 2, d.end());
  return std::sqrt(double(d[d.size() / 2]));
}

template <class Search>
void time_it(int repeats, Row& row, Search&& search) {
  GpuKnnTimings t;
  search(t);  // warm-up
  std::vector<double> b, s, tot, down;
  for (int i = 0; i < repeats; ++i) {
    search(t);
    b.push_back(t.build_ms);
    s.push_back(t.search_ms);
    tot.push_back(double(t.build_ms) + t.search_ms);
    down.push_back(t.download_ms);
  }
  row.build_ms = median(b);
  row.search_ms = median(s);
  row.total_ms = median(tot);
  row.download_ms = median(down);
  row.passes = t.passes;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"pcnn radius and hybrid search benchmark"};
  std::string sizes = "100000,1000000", kinds = "uniform,hotspot,clustered,lidar",
              modes = "radius,hybrid";
  int neighbors = 32, repeats = 5;
  long long cpu_max = 1000000;
  std::string csv;
  app.add_option("--sizes", sizes, "comma-separated point counts")->capture_default_str();
  app.add_option("--kinds", kinds, "uniform,hotspot,clustered,lidar")->capture_default_str();
  app.add_option("--modes", modes, "radius,hybrid")->capture_default_str();
  app.add_option("--neighbors", neighbors, "mean neighborhood M (and hybrid max_nn)")
      ->capture_default_str();
  app.add_option("--cpu-max", cpu_max, "largest n for the PCL baseline")->capture_default_str();
  app.add_option("--repeats", repeats, "timed runs per case (median reported)")
      ->capture_default_str();
  app.add_option("--csv", csv, "also write the rows as CSV");
  CLI11_PARSE(app, argc, argv);

  const DeviceInfo dev = bench::start_device("pcnn_bench_radius");
  std::printf("%-9s %9s %-6s %8s %7s %7s %9s %9s %9s %8s %6s %9s %7s\n", "kind", "n", "mode",
              "radius", "mean", "max", "build_ms", "search_ms", "total_ms", "down_ms", "passes",
              "cpu_ms", "agree%");
  std::vector<Row> rows;
  for (const std::string& kind : bench::parse_words(kinds)) {
    for (long long n : bench::parse_list(sizes)) {
      const std::vector<float> pts = make_synthetic_cloud(parse_synthetic_kind(kind), n, 42);
      const PointsView v{pts.data(), n, 3};
      const double r = radius_for(v, neighbors);
      for (const std::string& mode : bench::parse_words(modes)) {
        Row row;
        row.kind = kind;
        row.mode = mode;
        row.n = n;
        row.radius = r;
        const bool run_cpu = n <= cpu_max;
        CpuKnnTimings ct;
        if (mode == "radius") {
          RadiusResult res;
          time_it(repeats, row, [&](GpuKnnTimings& t) {
            res = gpu_radius_search(v, nullptr, {r, true}, &t);
          });
          row.mean = double(res.offsets.back()) / double(n);
          for (std::int64_t q = 0; q < res.rows; ++q)
            row.longest = std::max(row.longest, double(res.count(q)));
          if (run_cpu) {
            const RadiusResult cpu = pcl_radius(v, nullptr, {r, true}, &ct);
            const RadiusAgreement ag = compare_radius(v, nullptr, res, cpu, r, true);
            row.agree_pct = 100.0 * double(ag.agreeing_rows) / double(std::max(ag.rows, 1L));
          }
        } else {
          HybridResult res;
          const HybridParams hp{r, neighbors, true};
          time_it(repeats, row,
                  [&](GpuKnnTimings& t) { res = gpu_hybrid_search(v, nullptr, hp, &t); });
          double sum = 0;
          for (std::int32_t c : res.counts) {
            sum += c;
            row.longest = std::max(row.longest, double(c));
          }
          row.mean = sum / double(n);
          if (run_cpu) {
            const HybridResult cpu = pcl_hybrid(v, nullptr, hp, &ct);
            const RadiusAgreement ag = compare_hybrid(v, nullptr, res, cpu, r, true);
            row.agree_pct = 100.0 * double(ag.agreeing_rows) / double(std::max(ag.rows, 1L));
          }
        }
        if (run_cpu) row.cpu_ms = ct.build_ms + ct.query_ms;
        std::printf("%-9s %9lld %-6s %8.4f %7.1f %7.0f %9.3f %9.3f %9.3f %8.3f %6d %9.1f %7.3f\n",
                    kind.c_str(), n, mode.c_str(), r, row.mean, row.longest, row.build_ms,
                    row.search_ms, row.total_ms, row.download_ms, row.passes, row.cpu_ms,
                    row.agree_pct);
        std::fflush(stdout);
        rows.push_back(row);
      }
    }
  }
  if (!csv.empty()) {
    std::ofstream os(csv);
    os << "kind,n,mode,radius,mean_neighbors,max_neighbors,build_ms,search_ms,total_ms,"
          "download_ms,passes,cpu_ms,agree_pct\n";
    for (const Row& r : rows)
      os << r.kind << ',' << r.n << ',' << r.mode << ',' << r.radius << ',' << r.mean << ','
         << r.longest << ',' << r.build_ms << ',' << r.search_ms << ',' << r.total_ms << ','
         << r.download_ms << ',' << r.passes << ',' << r.cpu_ms << ',' << r.agree_pct << '\n';
  }
  return 0;
}
