// pcnn_bench_radius: exact radius search and hybrid search (the max_nn nearest within r) through
// pcnn::Index on synthetic clouds, against PCL's radiusSearch on all cores.
//
// The radius of each cloud is the median distance to the M-th nearest other point (M =
// --neighbors, 32 by default), so the mean neighborhood is about M. Modes (--modes):
//   radius     Index::self_radius: the owning CSR result (std::vectors the call allocates)
//   countfill  Index::self_radius_count then self_radius_fill into std::vectors the caller sized
//              from the count (the caller's buffers are reused from run to run)
//   hybrid     Index::self_hybrid into a dense max_nn-column matrix allocated once
// Every search is a self-search with exclude_self.
//
// Timing: the index is built once per cloud (its build is timed apart: the median of --repeats
// Index::build calls after a warm-up one). Each search: one untimed warm-up run, then the median
// of --repeats timed runs of the wall clock around the public calls (countfill: count + fill,
// including the caller's resize of its outputs in between, and the count apart), and the parts
// Index::last_timings() reports (CUDA: device time, CUDA events; for countfill those of the
// count: the CUDA backend searches there and the fill copies the result it kept).
// PCL: one timed run after a warm-up run, build + query.
// Not timed: making the cloud, choosing the radius, the agreement check.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "bench_util.hpp"
#include "pcnn/error.hpp"
#include "pcnn/index.hpp"
#include "pcnn/testing/baseline.hpp"
#include "pcnn/testing/reference.hpp"
#include "pcnn/testing/synthetic.hpp"

namespace {

using namespace pcnn;
using bench::Clock;
using bench::median;
using bench::ms_since;

struct Row {
  std::string kind, mode;
  long long n = 0;
  double radius = 0, mean = 0, longest = 0;
  double build_ms = 0;                 // Index::build, wall clock
  double search_ms = 0, count_ms = 0;  // the public call(s), wall clock (count: countfill only)
  double dev_order_ms = 0, dev_search_ms = 0, dev_down_ms = 0;  // last_timings()
  int passes = 1;
  double cpu_ms = -1, agree_pct = -1;
};

// The median over points of the distance to the m-th nearest other point.
double radius_for(Index& index, int m) {
  KnnParams p;
  p.k = m;
  p.exclude_self = true;
  const KnnResult r = index.self_knn(p);
  std::vector<float> d;
  for (std::int64_t q = 0; q < r.rows; ++q)
    if (r.indices[q * m + m - 1] >= 0) d.push_back(r.sqdist[q * m + m - 1]);
  if (d.empty()) return 0;
  std::nth_element(d.begin(), d.begin() + d.size() / 2, d.end());
  return std::sqrt(double(d[d.size() / 2]));
}

// Median wall clock of `search` (a callable that runs the public call(s) and returns the
// Index::last_timings() to report for that run), and medians of those timings' parts.
struct Timed {
  double wall_ms = 0, order_ms = 0, search_ms = 0, download_ms = 0;
  int passes = 1;
};

template <class Search>
Timed time_search(int repeats, Search&& search) {
  search();  // warm-up
  std::vector<double> wall, order, srch, down;
  Timed r;
  for (int i = 0; i < repeats; ++i) {
    const auto t0 = Clock::now();
    const SearchTimings t = search();
    wall.push_back(ms_since(t0));
    order.push_back(t.build_ms);
    srch.push_back(t.search_ms);
    down.push_back(t.download_ms);
    r.passes = t.passes;
  }
  r.wall_ms = median(wall);
  r.order_ms = median(order);
  r.search_ms = median(srch);
  r.download_ms = median(down);
  return r;
}

// Rows agreeing with the baseline, in percent (100 for an empty cloud: nothing disagrees).
double agree_pct(const RadiusAgreement& a) {
  return a.rows == 0 ? 100.0 : 100.0 * double(a.agreeing_rows) / double(a.rows);
}

void row_stats(Row& row, const std::vector<std::int64_t>& offsets) {
  const std::int64_t rows = static_cast<std::int64_t>(offsets.size()) - 1;
  row.mean = rows > 0 ? double(offsets.back()) / double(rows) : 0;
  for (std::int64_t q = 0; q < rows; ++q)
    row.longest = std::max(row.longest, double(offsets[q + 1] - offsets[q]));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"pcnn radius and hybrid search benchmark (pcnn::Index)"};
  std::string sizes = "100000,1000000", kinds = "uniform,hotspot,clustered,lidar",
              modes = "radius,countfill,hybrid", device = "auto";
  int neighbors = 32, repeats = 5, threads = 0;
  long long cpu_max = 1000000;
  std::string csv;
  app.add_option("--sizes", sizes, "comma-separated point counts")->capture_default_str();
  app.add_option("--kinds", kinds, "comma-separated, of " + synthetic_kind_names())
      ->capture_default_str();
  app.add_option("--modes", modes, "radius,countfill,hybrid")->capture_default_str();
  app.add_option("--device", device, "backend: auto, cuda or cpu")
      ->check(CLI::IsMember({"auto", "cuda", "cpu"}))
      ->capture_default_str();
  app.add_option("--threads", threads, "CPU backend threads (0: all)")->capture_default_str();
  app.add_option("--neighbors", neighbors, "mean neighborhood M (and hybrid max_nn)")
      ->capture_default_str();
  app.add_option("--cpu-max", cpu_max, "largest n for the PCL baseline")->capture_default_str();
  app.add_option("--repeats", repeats, "timed runs per case (median reported)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--csv", csv, "also write the rows as CSV");
  CLI11_PARSE(app, argc, argv);

  try {
    const Backend backend = bench::start_backend("pcnn_bench_radius", device, threads);
    IndexOptions options;
    options.backend = backend;
    options.threads = threads;
    std::printf(
        "# self-searches (exclude_self) through pcnn::Index, %s backend, results in host memory\n"
        "# times in ms, median of %d timed runs after 1 untimed warm-up: build = Index::build; "
        "search = the public call(s) (countfill: count + fill; count apart); ord/srch/down: "
        "medians of last_timings() (countfill: of the count)%s; pcl: radiusSearch "
        "build + query, one timed run after a warm-up\n",
        to_string(backend), repeats,
        backend == Backend::cuda ? " (device time, CUDA events)" : " (wall clock)");
    std::printf("%-9s %9s %-9s %8s %7s %7s %9s %9s %9s %8s %8s %8s %6s %9s %7s\n", "kind", "n",
                "mode", "radius", "mean", "max", "build_ms", "search_ms", "count_ms", "ord_ms",
                "srch_ms", "down_ms", "passes", "pcl_ms", "agree%");
    std::vector<Row> rows;
    int disagree = 0;
    for (const std::string& kind : bench::parse_words(kinds)) {
      for (const long long n : bench::parse_list(sizes)) {
        const std::vector<float> pts = make_synthetic_cloud(parse_synthetic_kind(kind), n, 42);
        const PointsView v = host_points(pts.data(), n);
        Index index(options);
        index.build(v);  // warm-up
        std::vector<double> builds;
        for (int i = 0; i < repeats; ++i) {
          const auto t0 = Clock::now();
          index.build(v);
          builds.push_back(ms_since(t0));
        }
        const double r = radius_for(index, neighbors);
        for (const std::string& mode : bench::parse_words(modes)) {
          Row row;
          row.kind = kind;
          row.mode = mode;
          row.n = n;
          row.radius = r;
          row.build_ms = median(builds);
          const bool run_cpu = n <= cpu_max;
          CpuKnnTimings ct;
          Timed t;
          RadiusParams rp;
          rp.radius = r;
          rp.exclude_self = true;
          if (mode == "radius" || mode == "countfill") {
            RadiusResult res;
            if (mode == "radius") {
              t = time_search(repeats, [&] {
                res = index.self_radius(rp);
                return index.last_timings();
              });
            } else {
              // The caller's CSR arrays: sized from the count, reused from run to run.
              res.rows = n;
              res.offsets.resize(static_cast<std::size_t>(n) + 1);
              std::vector<double> counts;
              t = time_search(repeats, [&] {
                const auto t0 = Clock::now();
                const std::int64_t total = index.self_radius_count(rp, {res.offsets.data(), n + 1});
                counts.push_back(ms_since(t0));
                const SearchTimings count_t = index.last_timings();
                res.indices.resize(static_cast<std::size_t>(total));
                res.sqdist.resize(static_cast<std::size_t>(total));
                index.self_radius_fill(rp, {res.offsets.data(), n + 1}, {res.indices.data(), total},
                                       {res.sqdist.data(), total});
                return count_t;
              });
              counts.erase(counts.begin());  // the warm-up's
              row.count_ms = median(counts);
            }
            row_stats(row, res.offsets);
            if (run_cpu) {
              pcl_radius(v, nullptr, rp);  // warm-up
              const RadiusResult cpu = pcl_radius(v, nullptr, rp, &ct);
              const RadiusAgreement ag = compare_radius(v, nullptr, res, cpu, r, true);
              row.agree_pct = agree_pct(ag);
            }
          } else if (mode == "hybrid") {
            HybridParams hp;
            hp.radius = r;
            hp.max_nn = neighbors;
            hp.exclude_self = true;
            HybridResult res;
            res.knn.rows = n;
            res.knn.k = neighbors;
            res.knn.indices.resize(static_cast<std::size_t>(n) * neighbors);
            res.knn.sqdist.resize(res.knn.indices.size());
            t = time_search(repeats, [&] {
              index.self_hybrid(hp, {res.knn.indices.data(), n, neighbors},
                                {res.knn.sqdist.data(), n, neighbors});
              return index.last_timings();
            });
            res.counts = row_counts(res.knn);
            double sum = 0;
            for (const std::int32_t c : res.counts) {
              sum += c;
              row.longest = std::max(row.longest, double(c));
            }
            row.mean = sum / double(std::max(n, 1LL));
            if (run_cpu) {
              pcl_hybrid(v, nullptr, hp);  // warm-up
              const HybridResult cpu = pcl_hybrid(v, nullptr, hp, &ct);
              const RadiusAgreement ag = compare_hybrid(v, nullptr, res, cpu, r, true);
              row.agree_pct = agree_pct(ag);
            }
          } else {
            std::fprintf(stderr, "pcnn_bench_radius: unknown mode '%s'\n", mode.c_str());
            return 2;
          }
          row.search_ms = t.wall_ms;
          row.dev_order_ms = t.order_ms;
          row.dev_search_ms = t.search_ms;
          row.dev_down_ms = t.download_ms;
          row.passes = t.passes;
          if (run_cpu) row.cpu_ms = ct.build_ms + ct.query_ms;
          disagree += row.agree_pct >= 0 && row.agree_pct < 100;
          std::printf(
              "%-9s %9lld %-9s %8.4f %7.1f %7.0f %9.3f %9.3f %9.3f %8.3f %8.3f %8.3f %6d %9.1f "
              "%7.3f\n",
              kind.c_str(), n, mode.c_str(), r, row.mean, row.longest, row.build_ms, row.search_ms,
              row.count_ms, row.dev_order_ms, row.dev_search_ms, row.dev_down_ms, row.passes,
              row.cpu_ms, row.agree_pct);
          std::fflush(stdout);
          rows.push_back(row);
        }
      }
    }
    if (!csv.empty()) {
      std::ofstream os(csv);
      os << "kind,n,mode,backend,radius,mean_neighbors,max_neighbors,build_ms,search_ms,"
            "count_ms,order_ms,device_search_ms,download_ms,passes,cpu_ms,agree_pct\n";
      for (const Row& r : rows)
        os << r.kind << ',' << r.n << ',' << r.mode << ',' << to_string(backend) << ',' << r.radius
           << ',' << r.mean << ',' << r.longest << ',' << r.build_ms << ',' << r.search_ms << ','
           << r.count_ms << ',' << r.dev_order_ms << ',' << r.dev_search_ms << ',' << r.dev_down_ms
           << ',' << r.passes << ',' << r.cpu_ms << ',' << r.agree_pct << '\n';
    }
    return disagree ? 3 : 0;
  } catch (const pcnn::error& e) {
    std::fprintf(stderr, "pcnn_bench_radius: %s\n", e.what());
    return 1;
  }
}
