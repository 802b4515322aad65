// pcnn_bench_knn: exact kNN through pcnn::Index, timed as a library user's program sees it.
//
// Modes (--mode):
//   sweep       synthetic clouds (uniform, clustered, LiDAR-like) of every size and k asked for:
//               an Index built over the cloud, then self-kNN (exclude_self) into outputs the
//               caller allocated once; PCL's k-d tree on all cores beside it up to --cpu-max.
//   frame-loop  a robot's loop: (a) an Index rebuilt every frame from a new --frame-points cloud,
//               self-kNN k = 8 into host memory allocated once; (b) an Index over a --map-points
//               map, queried every frame by a new --scan-points scan, k = 8, into host memory.
//   cpu-vs-pcl  the CPU backend against pcl::KdTreeFLANN on the same --pcl-n uniform cloud,
//               self-kNN k = 8 (exclude_self), both on all cores, build and query apart.
//
// Timing: one untimed warm-up run, then the median of --repeats timed runs (frame loop: frame 0
// untimed, the median over --frames frames). "build" is the wall clock of Index::build(): from
// points in host memory it includes their upload, from device memory (--memory device) the index
// alone. "query" is the wall clock of the synchronizing Index::self_knn()/knn() into the caller's
// outputs: with outputs in host memory it includes the download. The up/idx/ord/srch/down columns
// are the parts the index reports in Index::last_timings() (CUDA: device time from CUDA events;
// CPU: wall clock). Never included: making the clouds, allocating the outputs, creating the CUDA
// context (done before the first case), the PCL comparison and the agreement check.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "bench_util.hpp"
#include "pcnn/error.hpp"
#include "pcnn/index.hpp"
#include "pcnn/memory.hpp"
#include "pcnn/testing/baseline.hpp"
#include "pcnn/testing/reference.hpp"
#include "pcnn/testing/synthetic.hpp"

namespace {

using namespace pcnn;
using bench::Clock;
using bench::median;
using bench::ms_since;

struct Options {
  std::string mode = "sweep", device = "auto", memory = "host";
  int threads = 0;
  std::string sizes = "10000,100000,1000000,10000000", ks = "1,8,16,32,64";
  std::string kinds = "uniform,clustered,lidar";
  long long cpu_max = 1000000;
  int repeats = 5, pcl_repeats = 3;
  int frames = 50;
  long long frame_points = 100000, map_points = 1000000, scan_points = 100000, pcl_n = 1000000;
  std::string csv;
  std::string staging = "auto";
  std::string host_memory = "pageable";  // frame-loop: the caller's clouds and results
  bool include_self = false;             // sweep: a point is its own nearest neighbor
};

// Host memory a caller allocates once: a std::vector, or pcnn::page_locked_vector.
template <class T>
class HostArray {
 public:
  HostArray() = default;
  HostArray(std::size_t n, bool page_locked) {
    if (page_locked)
      locked_.resize(n);
    else
      plain_.resize(n);
  }
  T* data() { return locked_.empty() ? plain_.data() : locked_.data(); }
  const T* data() const { return locked_.empty() ? plain_.data() : locked_.data(); }
  std::vector<T> copy() const {
    return locked_.empty() ? plain_ : std::vector<T>(locked_.begin(), locked_.end());
  }

 private:
  std::vector<T> plain_;
  page_locked_vector<T> locked_;
};

// Dense kNN outputs the caller allocates once: host memory (ordinary, or page-locked), or
// cudaMalloc'd device buffers.
class KnnOutputs {
 public:
  KnnOutputs(std::int64_t rows, int k, Memory where, bool page_locked = false)
      : rows_(rows), k_(k), where_(where) {
    const std::int64_t cells = rows * k;
    if (where == Memory::host) {
      host_idx_ = HostArray<std::int32_t>(static_cast<std::size_t>(cells), page_locked);
      host_dist_ = HostArray<float>(static_cast<std::size_t>(cells), page_locked);
    } else {
      dev_idx_ = bench::DeviceArray<std::int32_t>(cells);
      dev_dist_ = bench::DeviceArray<float>(cells);
    }
  }
  MatrixView<std::int32_t> indices() {
    return {where_ == Memory::host ? host_idx_.data() : dev_idx_.data(), rows_, k_, where_};
  }
  MatrixView<float> sqdist() {
    return {where_ == Memory::host ? host_dist_.data() : dev_dist_.data(), rows_, k_, where_};
  }
  // A host copy for the agreement check (outside every timing).
  KnnResult result() const {
    KnnResult r;
    r.rows = rows_;
    r.k = k_;
    if (where_ == Memory::host) {
      r.indices = host_idx_.copy();
      r.sqdist = host_dist_.copy();
    } else {
      r.indices.resize(static_cast<std::size_t>(rows_) * k_);
      r.sqdist.resize(r.indices.size());
      dev_idx_.download(r.indices.data());
      dev_dist_.download(r.sqdist.data());
    }
    return r;
  }

 private:
  std::int64_t rows_;
  int k_;
  Memory where_;
  HostArray<std::int32_t> host_idx_;
  HostArray<float> host_dist_;
  bench::DeviceArray<std::int32_t> dev_idx_;
  bench::DeviceArray<float> dev_dist_;
};

// Rows agreeing with the baseline, in percent (100 for an empty cloud: nothing disagrees).
double agree_pct(const KnnAgreement& a) {
  return a.rows == 0 ? 100.0 : 100.0 * double(a.agreeing_rows) / double(a.rows);
}

// PCL's k-d tree on the same points: warm-up, then the median of `repeats` runs of its build
// and its queries (its own clocks around each part; outputs allocated before them).
KnnResult pcl_median(PointsView pts, KnnParams params, int repeats, CpuKnnTimings& median_t) {
  KnnResult r = pcl_knn(pts, nullptr, params);  // warm-up
  std::vector<double> b, q;
  for (int i = 0; i < std::max(repeats, 1); ++i) {
    CpuKnnTimings t;
    r = pcl_knn(pts, nullptr, params, &t);
    b.push_back(t.build_ms);
    q.push_back(t.query_ms);
    median_t.threads = t.threads;
  }
  median_t.build_ms = median(b);
  median_t.query_ms = median(q);
  return r;
}

IndexOptions index_options(Backend backend, int threads, Staging staging = Staging::automatic) {
  IndexOptions o;
  o.backend = backend;
  o.threads = threads;
  o.staging = staging;
  return o;
}

// ---------------------------------------------------------------------------------------------
// sweep

struct Row {
  std::string kind;
  long long n = 0;
  int k = 0;
  double build_ms = 0, query_ms = 0, total_ms = 0;  // wall clock of the public calls
  double up_ms = 0, index_ms = 0, order_ms = 0, search_ms = 0, down_ms = 0;  // last_timings()
  int passes = 0;
  double evaluations = 0, refined = 0, peak_bytes_per_point = -1;
  double pcl_build_ms = -1, pcl_query_ms = -1, agree = -1;
};

int run_sweep(const Options& o, Backend backend) {
  const Memory where = o.memory == "device" ? Memory::device : Memory::host;
  if (where == Memory::device && backend != Backend::cuda) {
    std::fprintf(stderr, "pcnn_bench_knn: --memory device needs the CUDA backend\n");
    return 2;
  }
  std::printf(
      "# sweep: self-kNN (%s) through pcnn::Index, %s backend, points and results in "
      "%s memory\n"
      "# times in ms, median of %d timed runs after 1 untimed warm-up; build/query/total: wall "
      "clock of Index::build and Index::self_knn; up/idx (build) and ord/srch/down (query): "
      "Index::last_timings()%s; pcl: KdTreeFLANN build / query, median of %d after a warm-up\n",
      o.include_self ? "each point its own nearest: exclude_self false" : "exclude_self",
      to_string(backend), where == Memory::host ? "host" : "device", o.repeats,
      backend == Backend::cuda ? " (device time, CUDA events)" : " (wall clock)", o.pcl_repeats);
  std::printf("%-9s %9s %3s %9s %9s %9s %7s %8s %7s %9s %8s %6s %9s %9s %8s %7s %9s %9s %7s\n",
              "kind", "n", "k", "build_ms", "query_ms", "total_ms", "up_ms", "idx_ms", "ord_ms",
              "srch_ms", "down_ms", "passes", "evals/q", "evals/s", "refined", "B/pt", "pcl_bld",
              "pcl_qry", "agree%");
  std::vector<Row> rows;
  for (const std::string& kind_name : bench::parse_words(o.kinds)) {
    const SyntheticKind kind = parse_synthetic_kind(kind_name);
    for (const long long n : bench::parse_list(o.sizes)) {
      const std::vector<float> cloud = make_synthetic_cloud(kind, n, 42);
      const PointsView host_view = host_points(cloud.data(), n);
      bench::DeviceArray<float> dev_cloud;
      PointsView pts = host_view;
      if (where == Memory::device) {
        dev_cloud = bench::DeviceArray<float>(3 * n);
        dev_cloud.upload(cloud.data());
        pts = device_points(dev_cloud.data(), n);
      }
      for (const long long k64 : bench::parse_list(o.ks)) {
        Row r;
        r.kind = kind_name;
        r.n = n;
        r.k = static_cast<int>(k64);
        KnnParams params;
        params.k = r.k;
        params.exclude_self = !o.include_self;
        // A fresh index per case: its memory counters then describe this case alone.
        Index index(index_options(backend, o.threads));
        KnnOutputs out(n, r.k, where);
        index.build(pts);  // warm-up: first allocations, first use of the kernels
        index.self_knn(params, out.indices(), out.sqdist());
        std::vector<double> b, q, tot, up, idx, ord, srch, down;
        SearchTimings tq;
        for (int i = 0; i < o.repeats; ++i) {
          const auto t0 = Clock::now();
          index.build(pts);
          const double build_ms = ms_since(t0);
          const SearchTimings tb = index.last_timings();
          const auto t1 = Clock::now();
          index.self_knn(params, out.indices(), out.sqdist());
          const double query_ms = ms_since(t1);
          tq = index.last_timings();
          b.push_back(build_ms);
          q.push_back(query_ms);
          tot.push_back(build_ms + query_ms);
          up.push_back(tb.upload_ms);
          idx.push_back(tb.build_ms);
          ord.push_back(tq.build_ms);
          srch.push_back(tq.search_ms);
          down.push_back(tq.download_ms);
        }
        r.build_ms = median(b);
        r.query_ms = median(q);
        r.total_ms = median(tot);
        r.up_ms = median(up);
        r.index_ms = median(idx);
        r.order_ms = median(ord);
        r.search_ms = median(srch);
        r.down_ms = median(down);
        r.passes = tq.passes;
        r.evaluations = double(tq.distance_evaluations);
        r.refined = double(tq.refined_rows);
        if (backend == Backend::cuda)
          r.peak_bytes_per_point =
              double(index.memory_stats().device.peak_bytes) / double(std::max(n, 1LL));
        if (n <= o.cpu_max) {
          CpuKnnTimings ct;
          const KnnResult pcl = pcl_median(host_view, params, o.pcl_repeats, ct);
          r.pcl_build_ms = ct.build_ms;
          r.pcl_query_ms = ct.query_ms;
          r.agree =
              agree_pct(compare_knn(host_view, nullptr, out.result(), pcl, params.exclude_self));
        }
        std::printf(
            "%-9s %9lld %3d %9.3f %9.3f %9.3f %7.3f %8.3f %7.3f %9.3f %8.3f %6d %9.1f %9.3g %8.0f "
            "%7.1f "
            "%9.1f %9.1f %7.3f\n",
            r.kind.c_str(), n, r.k, r.build_ms, r.query_ms, r.total_ms, r.up_ms, r.index_ms,
            r.order_ms, r.search_ms, r.down_ms, r.passes, r.evaluations / double(std::max(n, 1LL)),
            r.search_ms > 0 ? r.evaluations / (r.search_ms * 1e-3) : 0.0, r.refined,
            r.peak_bytes_per_point, r.pcl_build_ms, r.pcl_query_ms, r.agree);
        std::fflush(stdout);
        rows.push_back(r);
      }
    }
  }
  if (!o.csv.empty()) {
    std::ofstream os(o.csv);
    os << "kind,n,k,backend,memory,build_ms,query_ms,total_ms,upload_ms,index_build_ms,order_ms,"
          "search_ms,download_ms,passes,evaluations,refined_rows,peak_bytes_per_point,pcl_build_ms,"
          "pcl_query_ms,agree_pct\n";
    for (const Row& r : rows)
      os << r.kind << ',' << r.n << ',' << r.k << ',' << to_string(backend) << ',' << o.memory
         << ',' << r.build_ms << ',' << r.query_ms << ',' << r.total_ms << ',' << r.up_ms << ','
         << r.index_ms << ',' << r.order_ms << ',' << r.search_ms << ',' << r.down_ms << ','
         << r.passes << ',' << r.evaluations << ',' << r.refined << ',' << r.peak_bytes_per_point
         << ',' << r.pcl_build_ms << ',' << r.pcl_query_ms << ',' << r.agree << '\n';
  }
  int disagree = 0;
  for (const Row& r : rows) disagree += r.agree >= 0 && r.agree < 100;
  return disagree ? 3 : 0;
}

// ---------------------------------------------------------------------------------------------
// frame loop

// `count` different LiDAR-like clouds of `n` points (frame f uses clouds[f % count]); made
// before the loop so that generating them is not timed. `shift` moves cloud i by i * shift
// along x, as a sensor on a moving robot would see the scene. In the caller's kind of host
// memory (page-locked: as a sensor driver would fill a buffer allocated once).
std::vector<HostArray<float>> make_frames(int count, long long n, std::uint64_t seed, float shift,
                                          bool page_locked) {
  std::vector<HostArray<float>> out;
  for (int i = 0; i < count; ++i) {
    std::vector<float> c = make_synthetic_cloud(SyntheticKind::lidar, n, seed + std::uint64_t(i));
    for (std::size_t j = 0; j < c.size(); j += 3) c[j] += shift * float(i);
    out.emplace_back(c.size(), page_locked);
    std::copy(c.begin(), c.end(), out.back().data());
  }
  return out;
}

void print_allocations(const IndexMemoryStats& first, const IndexMemoryStats& last) {
  std::printf(
      "    allocations after frame 0: device %+lld, page-locked %+lld, registrations %+lld "
      "(device memory held %.1f MiB, peak %.1f MiB)\n",
      static_cast<long long>(last.device_allocations - first.device_allocations),
      static_cast<long long>(last.pinned_allocations - first.pinned_allocations),
      static_cast<long long>(last.registrations - first.registrations),
      last.device.current_bytes / 1048576.0, last.device.peak_bytes / 1048576.0);
}

// The medians of a call's parts over the timed frames (Index::last_timings): the device time of
// each part (CUDA events) and the call's wall clock, whose difference is the host's share.
struct CallParts {
  std::vector<double> upload, order, search, download, total, evaluations, refined;
  Staging staging = Staging::automatic;
  void add(const SearchTimings& t, long long rows) {
    upload.push_back(t.upload_ms);
    order.push_back(t.build_ms);
    search.push_back(t.search_ms);
    download.push_back(t.download_ms);
    total.push_back(t.total_ms);
    evaluations.push_back(double(t.distance_evaluations) / double(std::max(rows, 1LL)));
    refined.push_back(double(t.refined_rows));
    staging = t.staging;
  }
  void print(const char* call, const char* order_name) const {
    std::printf(
        "    %s (%s staging), medians: upload %.3f, %s %.3f, search %.3f, download %.3f ms "
        "(device time, events); call wall clock %.3f ms",
        call, to_string(staging), median(upload), order_name, median(order), median(search),
        median(download), median(total));
    if (median(evaluations) > 0)  // searches only
      std::printf("; distance evaluations a query %.1f, rows refined %.0f", median(evaluations),
                  median(refined));
    std::printf("\n");
  }
};

// The distribution of per-frame wall times.
void print_frames(const std::vector<double>& frame) {
  std::printf("    per frame: median %.3f ms (p90 %.3f, max %.3f) over %zu timed frames\n",
              median(frame), bench::quantile(frame, 0.9),
              frame.empty() ? 0.0 : *std::max_element(frame.begin(), frame.end()), frame.size());
}

int run_frame_loop(const Options& o, Backend backend) {
  const int k = 8;
  const int distinct = std::max(1, std::min(o.frames + 1, 8));
  const bool locked = o.host_memory == "page-locked";
  std::printf(
      "# frame loop, %s backend, LiDAR-like clouds, k = %d, clouds and results in %s host "
      "memory allocated once; frame 0 untimed (first allocations), then wall clock per frame "
      "around the public calls; %d different clouds, cycled\n",
      to_string(backend), k, locked ? "page-locked" : "ordinary (pageable)", distinct);

  {  // (a) a new cloud every frame: rebuild, self-kNN
    const long long n = o.frame_points;
    const auto clouds = make_frames(distinct, n, 100, 0.05f, locked);
    Index index(index_options(backend, o.threads, parse_staging(o.staging)));
    KnnOutputs out(n, k, Memory::host, locked);
    KnnParams params;
    params.k = k;
    params.exclude_self = true;
    std::vector<double> frame, build, query;
    CallParts build_parts, query_parts;
    IndexMemoryStats first;
    for (int f = 0; f <= o.frames; ++f) {
      const HostArray<float>& c = clouds[static_cast<std::size_t>(f % distinct)];
      const auto t0 = Clock::now();
      index.build(host_points(c.data(), n));
      const auto t1 = Clock::now();
      const SearchTimings built = index.last_timings();
      index.self_knn(params, out.indices(), out.sqdist());
      const auto t2 = Clock::now();
      if (f == 0) {
        first = index.memory_stats();
        continue;
      }
      build_parts.add(built, n);
      query_parts.add(index.last_timings(), n);
      frame.push_back(std::chrono::duration<double, std::milli>(t2 - t0).count());
      build.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
      query.push_back(std::chrono::duration<double, std::milli>(t2 - t1).count());
    }
    std::printf(
        "  rebuilt every frame: Index::build(%lld points) + Index::self_knn(k = %d, "
        "exclude_self)\n",
        n, k);
    print_frames(frame);
    std::printf("    parts: median build %.3f ms, median self_knn %.3f ms\n", median(build),
                median(query));
    build_parts.print("build", "index");
    query_parts.print("self_knn", "order");
    print_allocations(first, index.memory_stats());
  }

  {  // (b) a map indexed once, a new scan every frame: kNN of the scan's points in the map
    const long long n = o.map_points, m = o.scan_points;
    const std::vector<float> map = make_synthetic_cloud(SyntheticKind::lidar, n, 1);
    const auto scans = make_frames(distinct, m, 10, 0.05f, locked);
    Index index(index_options(backend, o.threads, parse_staging(o.staging)));
    index.build(host_points(map.data(), n));  // warm-up
    std::vector<double> map_build;
    for (int i = 0; i < o.repeats; ++i) {
      const auto t0 = Clock::now();
      index.build(host_points(map.data(), n));
      map_build.push_back(ms_since(t0));
    }
    KnnOutputs out(m, k, Memory::host, locked);
    KnnParams params;
    params.k = k;
    std::vector<double> frame;
    CallParts parts;
    IndexMemoryStats first;
    for (int f = 0; f <= o.frames; ++f) {
      const HostArray<float>& s = scans[static_cast<std::size_t>(f % distinct)];
      const auto t0 = Clock::now();
      index.knn(host_points(s.data(), m), params, out.indices(), out.sqdist());
      const double ms = ms_since(t0);
      if (f == 0) {
        first = index.memory_stats();
        continue;
      }
      frame.push_back(ms);
      parts.add(index.last_timings(), m);
    }
    std::printf(
        "  map of %lld points indexed once (Index::build: median %.3f ms of %d after a "
        "warm-up), then Index::knn of %lld new scan points per frame (k = %d)\n",
        n, median(map_build), o.repeats, m, k);
    print_frames(frame);
    parts.print("knn", "order");
    print_allocations(first, index.memory_stats());
  }
  return 0;
}

// ---------------------------------------------------------------------------------------------
// CPU backend against PCL

int run_cpu_vs_pcl(const Options& o) {
  const long long n = o.pcl_n;
  const int k = 8;
  const std::vector<float> cloud = make_synthetic_cloud(SyntheticKind::uniform, n, 42);
  const PointsView pts = host_points(cloud.data(), n);
  KnnParams params;
  params.k = k;
  params.exclude_self = true;

  Index index(index_options(Backend::cpu, o.threads));
  KnnOutputs out(n, k, Memory::host);
  index.build(pts);  // warm-up
  index.self_knn(params, out.indices(), out.sqdist());
  std::vector<double> b, q;
  for (int i = 0; i < o.repeats; ++i) {
    const auto t0 = Clock::now();
    index.build(pts);
    b.push_back(ms_since(t0));
    const auto t1 = Clock::now();
    index.self_knn(params, out.indices(), out.sqdist());
    q.push_back(ms_since(t1));
  }
  CpuKnnTimings ct;
  const KnnResult pcl = pcl_median(pts, params, o.repeats, ct);
  const KnnAgreement ag = compare_knn(pts, nullptr, out.result(), pcl, true);

  std::printf(
      "# CPU backend vs PCL KdTreeFLANN: %lld uniform points (100 m cube), self-kNN k = %d "
      "(exclude_self), results into host memory allocated before the clock starts\n"
      "# times in ms, median of %d timed runs after 1 untimed warm-up. pcnn: wall clock of "
      "Index::build and Index::self_knn (%d threads). PCL: its tree build (copy into a "
      "PointCloud<PointXYZ> + KdTreeFLANN::setInputCloud, single-threaded in FLANN) and its "
      "queries (OpenMP, %d threads)\n",
      n, k, o.repeats, bench::cpu_threads(o.threads), ct.threads);
  std::printf("%-10s %10s %10s %10s %8s\n", "", "build_ms", "query_ms", "total_ms", "threads");
  const double pb = median(b), pq = median(q);
  std::printf("%-10s %10.1f %10.1f %10.1f %8d\n", "pcnn cpu", pb, pq, pb + pq,
              bench::cpu_threads(o.threads));
  std::printf("%-10s %10.1f %10.1f %10.1f %8d\n", "pcl", ct.build_ms, ct.query_ms,
              ct.build_ms + ct.query_ms, ct.threads);
  std::printf("%-10s %10.2fx %9.2fx %9.2fx\n", "speedup", ct.build_ms / pb, ct.query_ms / pq,
              (ct.build_ms + ct.query_ms) / (pb + pq));
  std::printf("agreement with PCL (tie-aware): %lld of %lld rows%s%s\n",
              static_cast<long long>(ag.agreeing_rows), static_cast<long long>(ag.rows),
              ag.all_agree() ? "" : "; first problem: ", ag.first_problem.c_str());
  if (!o.csv.empty()) {
    std::ofstream os(o.csv);
    os << "engine,n,k,threads,build_ms,query_ms,total_ms\n"
       << "pcnn_cpu," << n << ',' << k << ',' << bench::cpu_threads(o.threads) << ',' << pb << ','
       << pq << ',' << pb + pq << '\n'
       << "pcl," << n << ',' << k << ',' << ct.threads << ',' << ct.build_ms << ',' << ct.query_ms
       << ',' << ct.build_ms + ct.query_ms << '\n';
  }
  return ag.all_agree() ? 0 : 3;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"pcnn exact kNN benchmark (pcnn::Index)"};
  Options o;
  app.add_option("--mode", o.mode, "sweep, frame-loop or cpu-vs-pcl")
      ->check(CLI::IsMember({"sweep", "frame-loop", "cpu-vs-pcl"}))
      ->capture_default_str();
  app.add_option("--device", o.device, "backend: auto, cuda or cpu (cpu-vs-pcl: always cpu)")
      ->check(CLI::IsMember({"auto", "cuda", "cpu"}))
      ->capture_default_str();
  app.add_option("--memory", o.memory, "sweep: where points and results live (device: cuda only)")
      ->check(CLI::IsMember({"host", "device"}))
      ->capture_default_str();
  app.add_option("--threads", o.threads, "CPU backend threads (0: all)")->capture_default_str();
  app.add_option("--sizes", o.sizes, "sweep: comma-separated point counts")->capture_default_str();
  app.add_option("--ks", o.ks, "sweep: comma-separated k values")->capture_default_str();
  app.add_option("--kinds", o.kinds, "sweep: comma-separated, of " + synthetic_kind_names())
      ->capture_default_str();
  app.add_option("--cpu-max", o.cpu_max, "sweep: largest n for the PCL baseline")
      ->capture_default_str();
  app.add_option("--repeats", o.repeats, "timed runs per case (median reported)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--pcl-repeats", o.pcl_repeats, "sweep: timed PCL runs per case")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--frames", o.frames, "frame-loop: timed frames (after an untimed frame 0)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--frame-points", o.frame_points, "frame-loop: points of each rebuilt cloud")
      ->capture_default_str();
  app.add_option("--map-points", o.map_points, "frame-loop: points of the map")
      ->capture_default_str();
  app.add_option("--scan-points", o.scan_points, "frame-loop: query points per frame")
      ->capture_default_str();
  app.add_option("--pcl-n", o.pcl_n, "cpu-vs-pcl: points of the uniform cloud")
      ->capture_default_str();
  app.add_option("--csv", o.csv, "also write the rows as CSV (sweep, cpu-vs-pcl)");
  app.add_option("--staging", o.staging,
                 "frame-loop, CUDA: auto, pageable, pinned, registered or mapped")
      ->capture_default_str();
  app.add_flag("--include-self", o.include_self,
               "sweep: every point is its own nearest neighbor (exclude_self false), as a "
               "self-query of libraries without that option returns");
  app.add_option("--host-memory", o.host_memory,
                 "frame-loop: the clouds and results in pageable (std::vector) or page-locked "
                 "(pcnn::page_locked_vector) host memory")
      ->check(CLI::IsMember({"pageable", "page-locked"}))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  try {
    if (o.mode == "cpu-vs-pcl") {
      bench::start_backend("pcnn_bench_knn", "cpu", o.threads);
      return run_cpu_vs_pcl(o);
    }
    const Backend backend = bench::start_backend("pcnn_bench_knn", o.device, o.threads);
    return o.mode == "sweep" ? run_sweep(o, backend) : run_frame_loop(o, backend);
  } catch (const pcnn::error& e) {
    std::fprintf(stderr, "pcnn_bench_knn: %s\n", e.what());
    return 1;
  }
}
