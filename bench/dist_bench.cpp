// pcnn_bench_dist: exact self-kNN on one GPU against every GPU (pcnn::PartitionedIndex in one
// process, or pcnn::mpi::DistributedIndex under mpirun), the same rows byte for byte, and the
// throughput of each.
//
//   pcnn_bench_dist -n 200000000 -k 8                       # one process, every GPU
//   mpirun -np 2 pcnn_bench_dist -n 200000000 -k 8          # one rank per GPU
//   pcnn_bench_dist -n 2000000 --device cpu --devices 0,1   # the CPU backend, two parts
//
// The cloud: -n uniform points in a 100 m cube (pcnn's synthetic generator, made in parallel
// slices of fixed seeds, so every rank makes the same cloud), stored in random order, or with
// --order spatial in blocks of spatial order (replicas then search spatially coherent shares).
// Timing: the median of --runs runs after one untimed warm-up. One GPU: the wall clock of
// Index::build() plus self_knn() into host memory (default staging, rows written into the same
// buffer every run). Every GPU: the wall clock of building every part's index at once plus the
// search (spatial: home part, forwarded queries, exact merge; replicated, --layout: every device
// builds the whole cloud and searches its share of the rows) into host memory —
// PartitionedTimings::total_ms, or under MPI the slowest rank's build + search with its exchanges
// (rows stay on their rank; gathering them is not timed). Partitioning (Morton codes, sample,
// assignment, copies, the parts' bounds) is reported apart. Never timed: making the cloud, CUDA
// context creation, the comparison. Each timed run also searches again on the index it built, as a
// map indexed once is queried ("the search again, index kept": the first search on an index
// allocates what later ones reuse, as the one device's index kept between its runs does).
// Throughput: points (= queries) per second; printed for build + search and for the search alone (a
// map indexed once and queried).
//
// --outputs device: the rows stay in device memory (one GPU: Index::self_knn into its memory;
// every GPU, replicated layout: PartitionedIndex::self_knn_on_devices, each share on its own
// device), as a pipeline that goes on on the GPUs keeps them; the check copies them back, untimed.
// --copy-ceiling BYTES: first, the device-to-host copy rate into page-locked host memory of each
// device alone and of every device at once (BYTES each): what bounds rows written to the host.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "bench_util.hpp"
#include "pcnn/distributed.hpp"
#include "pcnn/error.hpp"
#include "pcnn/index.hpp"
#include "pcnn/memory.hpp"
#include "pcnn/testing/synthetic.hpp"
#ifdef PCNN_WITH_MPI
#include <mpi.h>

#include "pcnn/mpi.hpp"
#endif

namespace {

using namespace pcnn;
using bench::Clock;
using bench::median;
using bench::ms_since;

int rank_ = 0, ranks_ = 1;

// Prints from rank 0 only.
template <class... A>
void say(const char* fmt, A... a) {
  if (rank_ == 0) std::printf(fmt, a...);
  if (rank_ == 0) std::fflush(stdout);
}

// The rows of a result, sized once and, with --locked-outputs, page-locked for every device.
struct ResultLocks {
  std::optional<PageLock> indices, sqdist;
};
// How the last search shared the rows: spatial parts, or replicas that cut a self-search along
// the index's order or searched contiguous shares of the rows.
const char* layout_name(bool replicated, bool by_position) {
  if (!replicated) return "spatial";
  return by_position ? "replicated, self-search cut along the order"
                     : "replicated, contiguous shares of the rows";
}

void allocate_rows(KnnResult& r, std::int64_t n, int k, bool lock, ResultLocks& l) {
  r.rows = n;
  r.k = k;
  r.indices.resize(static_cast<std::size_t>(n) * k);
  r.sqdist.resize(r.indices.size());
  if (lock) {
    l.indices.emplace(r.indices.data(), r.indices.size() * 4);
    l.sqdist.emplace(r.sqdist.data(), r.sqdist.size() * 4);
  }
}

std::vector<float> make_random_order(std::int64_t n, std::uint64_t seed) {
  const std::int64_t slice = 1 << 22;
  const std::int64_t slices = (n + slice - 1) / slice;
  std::vector<float> xyz(static_cast<std::size_t>(n) * 3);
  std::vector<std::thread> pool;
  const int threads = std::max(1u, std::thread::hardware_concurrency());
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      for (std::int64_t s = t; s < slices; s += threads) {
        const std::int64_t a = s * slice, m = std::min(slice, n - a);
        const auto part = make_synthetic_cloud(SyntheticKind::uniform, m, seed * 1000003 + s);
        std::copy(part.begin(), part.end(), xyz.begin() + 3 * a);
      }
    });
  for (auto& th : pool) th.join();
  return xyz;
}

// The same distribution stored in spatial order, as a tiled survey or a scan in acquisition
// order is: the cube cut into blocks of about 4,096 points, the blocks in Morton order, each
// block's points uniform in it (in random order within the block).
std::vector<float> make_spatial_order(std::int64_t n, std::uint64_t seed) {
  const int side = std::max(1, static_cast<int>(std::ceil(std::cbrt(double(n) / 4096.0))));
  const std::int64_t blocks = std::int64_t(side) * side * side;
  std::vector<std::pair<std::uint64_t, std::int64_t>> order(static_cast<std::size_t>(blocks));
  for (std::int64_t b = 0; b < blocks; ++b) {
    const std::uint32_t c[3] = {std::uint32_t(b % side), std::uint32_t(b / side % side),
                                std::uint32_t(b / side / side)};
    std::uint64_t code = 0;
    for (int bit = 0; bit < 21; ++bit)
      for (int a = 0; a < 3; ++a) code |= std::uint64_t((c[a] >> bit) & 1u) << (3 * bit + a);
    order[static_cast<std::size_t>(b)] = {code, b};
  }
  std::sort(order.begin(), order.end());
  std::vector<float> xyz(static_cast<std::size_t>(n) * 3);
  const double w = 100.0 / side;
  std::vector<std::thread> pool;
  const int threads = std::max(1u, std::thread::hardware_concurrency());
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      for (std::int64_t i = t; i < blocks; i += threads) {
        const std::int64_t b = order[static_cast<std::size_t>(i)].second;
        const double lo[3] = {-50.0 + w * double(b % side), -50.0 + w * double(b / side % side),
                              -50.0 + w * double(b / side / side)};
        std::mt19937_64 rng(seed * 1000003 + static_cast<std::uint64_t>(b));
        std::uniform_real_distribution<double> u(0.0, w);
        for (std::int64_t j = n * i / blocks; j < n * (i + 1) / blocks; ++j)
          for (int a = 0; a < 3; ++a)
            xyz[static_cast<std::size_t>(3 * j + a)] = static_cast<float>(lo[a] + u(rng));
      }
    });
  for (auto& th : pool) th.join();
  return xyz;
}

// Rows × k of indices and distances in device memory of one device (--outputs device).
struct DeviceResult {
  std::int64_t rows = 0;
  int k = 0;
  bench::DeviceArray<std::int32_t> idx;
  bench::DeviceArray<float> d;
  DeviceResult(int dev, std::int64_t r, int kk) : rows(r), k(kk) {
    bench::cuda_check(cudaSetDevice(dev), "cudaSetDevice");
    idx = bench::DeviceArray<std::int32_t>(r * kk);
    d = bench::DeviceArray<float>(r * kk);
  }
  MatrixView<std::int32_t> iv() const { return {idx.data(), rows, k, Memory::device}; }
  MatrixView<float> dv() const { return {d.data(), rows, k, Memory::device}; }
  // Copies the rows into `r` from row `first` on (untimed: for the check).
  void copy_to(KnnResult& r, std::int64_t first) const {
    idx.download(r.indices.data() + first * k);
    d.download(r.sqdist.data() + first * k);
  }
};

// The device-to-host copy rate into page-locked host memory, GB/s: each of `devices` alone, then
// all at once (one thread each), `bytes` per device, the best of three.
void copy_ceiling(const std::vector<int>& devices, std::size_t bytes) {
  const int nd = static_cast<int>(devices.size());
  std::vector<void*> src(nd), dst(nd);
  for (int i = 0; i < nd; ++i) {
    bench::cuda_check(cudaSetDevice(devices[i]), "cudaSetDevice");
    bench::cuda_check(cudaMalloc(&src[i], bytes), "cudaMalloc");
    bench::cuda_check(cudaMemset(src[i], 1, bytes), "cudaMemset");
    bench::cuda_check(cudaHostAlloc(&dst[i], bytes, cudaHostAllocPortable), "cudaHostAlloc");
    std::memset(dst[i], 0, bytes);  // touched: no first fault inside the copy
  }
  const auto copy = [&](int i) {
    bench::cuda_check(cudaSetDevice(devices[i]), "cudaSetDevice");
    bench::cuda_check(cudaMemcpy(dst[i], src[i], bytes, cudaMemcpyDeviceToHost), "cudaMemcpy");
  };
  const auto best_of_3 = [&](const std::function<void()>& f) {
    double best = 1e30;
    for (int r = 0; r < 3; ++r) {
      const auto t = Clock::now();
      f();
      best = std::min(best, ms_since(t));
    }
    return best;
  };
  for (int i = 0; i < nd; ++i) {
    const double ms = best_of_3([&] { copy(i); });
    say("copy ceiling: device %d alone: %.1f GB/s (%.2f GB in %.1f ms)\n", devices[i],
        bytes / ms / 1e6, bytes / 1e9, ms);
  }
  const double ms = best_of_3([&] {
    std::vector<std::thread> th;
    for (int i = 0; i < nd; ++i) th.emplace_back(copy, i);
    for (auto& t : th) t.join();
  });
  say("copy ceiling: %d devices at once: %.1f GB/s together (%.2f GB in %.1f ms)\n", nd,
      nd * bytes / ms / 1e6, nd * bytes / 1e9, ms);
  for (int i = 0; i < nd; ++i) {
    cudaSetDevice(devices[i]);
    cudaFree(src[i]);
    cudaFreeHost(dst[i]);
  }
}

// The first row where `got` (rows `rows` of the full result) differs from `want`, or -1.
std::int64_t first_difference(const KnnResult& want, const std::vector<std::int64_t>& rows,
                              const KnnResult& got) {
  const int k = want.k;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const std::size_t a = static_cast<std::size_t>(rows[i]) * k, b = i * k;
    if (std::memcmp(&want.indices[a], &got.indices[b], k * sizeof(std::int32_t)) != 0 ||
        std::memcmp(&want.sqdist[a], &got.sqdist[b], k * sizeof(float)) != 0)
      return rows[i];
  }
  return -1;
}

}  // namespace

int main(int argc, char** argv) {
  bench::report_crashes();
#ifdef PCNN_WITH_MPI
  const bool under_mpi = std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE");
  if (under_mpi) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks_);
  }
#else
  const bool under_mpi = false;
  if (std::getenv("OMPI_COMM_WORLD_SIZE") && std::atoi(std::getenv("OMPI_COMM_WORLD_SIZE")) > 1) {
    std::fprintf(stderr, "pcnn_bench_dist: built without MPI; run it without mpirun\n");
    return 2;
  }
#endif
  CLI::App app{"pcnn_bench_dist: exact self-kNN, one GPU against every GPU"};
  long long n = 10000000;
  int k = 8, runs = 3;
  unsigned long long seed = 1;
  std::string device = "auto", devices = "all", layout = "auto";
  bool locked = false;
  bool check = true;
  app.add_option("-n", n, "points")->capture_default_str()->check(CLI::Range(1LL, 2147483647LL));
  app.add_option("-k", k, "neighbors")->capture_default_str()->check(CLI::Range(1, kMaxK));
  app.add_option("--runs", runs, "timed runs (median)")->capture_default_str();
  app.add_option("--seed", seed, "cloud seed")->capture_default_str();
  app.add_option("--device", device, "auto, cuda or cpu")->capture_default_str();
  app.add_option("--devices", devices, "one process: all or 0,1 (CPU backend: one part each)")
      ->capture_default_str();
  app.add_option("--layout", layout, "auto, spatial or replicated (one process or mpirun)")
      ->capture_default_str();
  app.add_option("--locked-outputs", locked,
                 "page-lock the result buffers once, before any timed run (as a frame loop or a "
                 "pipeline that keeps its buffers does), for one device and every device alike")
      ->capture_default_str();
  app.add_option("--check", check, "compare the rows byte for byte")->capture_default_str();
  std::string order = "random";
  app.add_option("--order", order,
                 "how the cloud is stored: random (uniform points in random order) or spatial "
                 "(the same distribution in blocks of spatial order, as tiled surveys and scans "
                 "are)")
      ->check(CLI::IsMember({"random", "spatial"}))
      ->capture_default_str();
  std::string outputs = "host";
  app.add_option("--outputs", outputs,
                 "host: rows into host memory; device: rows kept in device memory (one process, "
                 "replicated layout)")
      ->check(CLI::IsMember({"host", "device"}))
      ->capture_default_str();
  long long ceiling_bytes = 0;
  app.add_option("--copy-ceiling", ceiling_bytes,
                 "first measure the device-to-host copy rate of this many bytes per device, alone "
                 "and at once")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  int code = 0;
  try {
    const Backend backend = rank_ == 0 ? bench::start_backend("pcnn_bench_dist", device, 0) : [&] {
      Backend b = parse_backend(device);
      return b == Backend::automatic ? (query_device().available ? Backend::cuda : Backend::cpu)
                                     : b;
    }();
    const bool on_devices = outputs == "device";
    if (on_devices && (backend != Backend::cuda || under_mpi || layout == "spatial"))
      throw std::runtime_error(
          "--outputs device needs CUDA devices in one process and the replicated layout");
    if (ceiling_bytes > 0 && backend == Backend::cuda && !under_mpi)
      copy_ceiling(parse_devices(devices, backend), static_cast<std::size_t>(ceiling_bytes));
    auto t = Clock::now();
    const std::vector<float> xyz =
        order == "spatial" ? make_spatial_order(n, seed) : make_random_order(n, seed);
    say("# cloud: %lld uniform points (100 m cube, %s order), made in %.0f ms; k = %d; %d runs\n",
        n, order.c_str(), ms_since(t), k, runs);
    const PointsView view = host_points(xyz.data(), n);
    const KnnParams params{k};

    // One GPU (or the CPU backend as one index). Under MPI every rank runs it on its own device
    // (at once, so each has the full rows to check its own against); rank 0's time is reported.
    IndexOptions io;
    io.backend = backend;
#ifdef PCNN_WITH_MPI
    if (under_mpi && backend == Backend::cuda) {
      MPI_Comm local;
      MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local);
      int lr = 0;
      MPI_Comm_rank(local, &lr);
      MPI_Comm_free(&local);
      io.device = lr % std::max(1, device_count());
      initialize_device(io.device);
    }
#endif
    const bool lock = locked && backend == Backend::cuda && !on_devices;
    KnnResult one;
    ResultLocks one_locks;
    allocate_rows(one, n, k, lock, one_locks);
    std::vector<double> t_one, t_one_search;
    {
      Index index(io);
      std::optional<DeviceResult> rows_on_device;
      if (on_devices) rows_on_device.emplace(io.device, n, k);
      for (int r = 0; r <= runs; ++r) {
        t = Clock::now();
        index.build(view);
        const auto t_search = Clock::now();
        if (on_devices)
          index.self_knn(params, rows_on_device->iv(), rows_on_device->dv());
        else
          index.self_knn(params, {one.indices.data(), n, k}, {one.sqdist.data(), n, k});
        if (r > 0) t_one.push_back(ms_since(t));
        if (r > 0) t_one_search.push_back(ms_since(t_search));
      }
      if (on_devices && check) rows_on_device->copy_to(one, 0);
      const SearchTimings& st = index.last_timings();
      say("# one device's last run: search kernels %.1f ms, rows to the host %.1f ms (device "
          "time, overlapping), %.0f distance evaluations a query\n",
          st.search_ms, st.download_ms, double(st.distance_evaluations) / double(n));
    }
    const char* into = on_devices ? "rows kept in device memory" : "rows into host memory";
    const double one_ms = median(t_one), one_search = median(t_one_search);
    say("one device:   %10.1f ms  %8.1f M queries/s  (build + search, %s)\n", one_ms,
        n / one_ms / 1e3, into);
    say("              %10.1f ms  %8.1f M queries/s  (search alone)\n", one_search,
        n / one_search / 1e3);

    std::vector<double> t_all, t_part, t_all_search, t_all_second, t_all_again;
    std::int64_t forwarded = 0;
    int parts = 0;
    std::int64_t bad = -1;
    if (!under_mpi) {
      PartitionedOptions po;
      po.index = io;
      po.devices = parse_devices(devices, backend);
      po.layout = parse_layout(layout);
      KnnResult all;  // written in place every run, as the one device's rows are
      ResultLocks all_locks;
      allocate_rows(all, n, k, lock, all_locks);
      std::vector<std::unique_ptr<DeviceResult>> shares_on_devices;
      std::vector<DeviceRows> shares;
      for (int r = 0; r <= runs; ++r) {
        PartitionedIndex index(view, po);
        if (on_devices && shares.empty()) {  // allocated once, outside the timings
          shares = index.device_rows(n);
          for (DeviceRows& sh : shares) {
            shares_on_devices.push_back(std::make_unique<DeviceResult>(sh.device, sh.rows, k));
            sh.indices = shares_on_devices.back()->iv();
            sh.sqdist = shares_on_devices.back()->dv();
          }
        }
        const auto search = [&] {
          if (on_devices)
            index.self_knn_on_devices(params, shares);
          else
            index.self_knn(params, {all.indices.data(), n, k}, {all.sqdist.data(), n, k});
        };
        search();
        const PartitionedTimings& tm = index.last_timings();
        if (r > 0) {
          t_all.push_back(tm.total_ms);
          t_all_search.push_back(tm.total_ms - tm.build_ms);
          t_part.push_back(tm.partition_ms);
        }
        forwarded = tm.queries_forwarded;
        parts = index.parts();
        if (r == runs)
          say("  layout: %s; home search %.1f ms, boundary and merge %.1f ms\n",
              layout_name(index.replicated(), tm.by_position), tm.home_ms, tm.boundary_ms);
        if (r == runs)
          for (const PartStats& p : tm.parts)
            say("  part on device %d: %lld points, %lld forwarded, %lld received, build %.1f ms, "
                "search %.1f ms\n",
                p.device, static_cast<long long>(p.points),
                static_cast<long long>(p.queries_forwarded),
                static_cast<long long>(p.queries_received), p.build_ms, p.search_ms);
        // The same search again on the index kept, as a map indexed once is queried (and as the
        // one device's index, built again in place, keeps its memory between runs).
        if (r > 0) {
          search();
          t_all_again.push_back(index.last_timings().home_ms);
        }
      }
      if (check) {
        for (std::size_t d = 0; d < shares.size(); ++d)
          shares_on_devices[d]->copy_to(all, shares[d].first_row);
        std::vector<std::int64_t> rows(static_cast<std::size_t>(n));
        for (std::int64_t i = 0; i < n; ++i) rows[static_cast<std::size_t>(i)] = i;
        bad = first_difference(one, rows, all);
      }
    }
#ifdef PCNN_WITH_MPI
    else {
      parts = ranks_;
      mpi::RankRows mine;
      // Replicas write their block into rows allocated (and with --locked-outputs page-locked)
      // once, as the one-device run does; spatial ranks return their rows.
      ResultLocks block_locks;
      for (int r = 0; r <= runs; ++r) {
        MPI_Barrier(MPI_COMM_WORLD);
        t = Clock::now();
        mpi::DistributedIndex index(MPI_COMM_WORLD, view, io, /*keep_device=*/true,
                                    parse_layout(layout));
        const double made = ms_since(t);
        const auto search_rows = [&] {
          if (index.replicated()) {
            const auto [first, end] = index.block(n);
            if (mine.result.rows != end - first)
              allocate_rows(mine.result, end - first, k, lock, block_locks);
            mine.first = first;
            index.self_knn(params, {mine.result.indices.data(), end - first, k},
                           {mine.result.sqdist.data(), end - first, k});
          } else {
            mine = index.self_knn(params);
          }
        };
        search_rows();
        if (r == runs)
          say("  layout: %s\n", layout_name(index.replicated(), index.last_stats().by_position));
        // Build + search of this rank (its partition apart), the slowest rank's counted.
        const double mine_ms = index.last_stats().build_ms + index.last_stats().total_ms;
        const double mine_search = index.last_stats().total_ms;
        const double mine_part = made - index.last_stats().build_ms;
        double slowest = 0, part = 0, search = 0;
        MPI_Allreduce(&mine_ms, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        MPI_Allreduce(&mine_search, &search, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        MPI_Allreduce(&mine_part, &part, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        if (r > 0) t_part.push_back(part);
        if (r > 0) t_all_search.push_back(search);
        const auto stats = index.all_stats();
        forwarded = 0;
        for (const auto& s : stats) forwarded += s.queries_forwarded;
        if (r > 0) t_all.push_back(slowest);
        if (r == runs)
          for (const auto& s : stats)
            say("  rank %d on device %d: %lld points, %lld forwarded, %lld received, build %.1f "
                "ms, search %.1f ms, exchange %.1f ms\n",
                s.rank, s.device, static_cast<long long>(s.points),
                static_cast<long long>(s.queries_forwarded),
                static_cast<long long>(s.queries_received), s.build_ms, s.search_ms, s.exchange_ms);
        // The same search again on the index kept (as in one process), the slowest rank's: twice,
        // since the index's second dense self-search opens the ranks' pools for the cut along
        // the order (the first keeps blocks), and the third is as every later one.
        for (int again = 0; again < 2 && r > 0; ++again) {
          search_rows();
          const double again_ms = index.last_stats().total_ms;
          double slowest_again = 0;
          MPI_Allreduce(&again_ms, &slowest_again, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
          (again == 0 ? t_all_second : t_all_again).push_back(slowest_again);
          if (r == runs)
            say("  search %d: %s, exchange %.1f ms\n", again + 2,
                layout_name(index.replicated(), index.last_stats().by_position),
                index.last_stats().exchange_ms);
        }
      }
      if (check) {
        std::vector<std::int64_t> rows = mine.rows;
        if (rows.empty())
          for (std::int64_t i = 0; i < mine.result.rows; ++i) rows.push_back(mine.first + i);
        long long mine_bad = first_difference(one, rows, mine.result), first = -1;
        if (mine_bad < 0) mine_bad = LLONG_MAX;
        MPI_Allreduce(&mine_bad, &first, 1, MPI_LONG_LONG, MPI_MIN, MPI_COMM_WORLD);
        bad = first == LLONG_MAX ? -1 : first;
      }
    }
#endif
    const double all_ms = median(t_all);
    say("%s %2d parts: %10.1f ms  %8.1f M queries/s  (build + search%s; partition %.1f ms apart)\n",
        under_mpi ? "mpi ranks," : "devices,  ", parts, all_ms, n / all_ms / 1e3,
        under_mpi ? " with the exchanges, slowest rank" : "", median(t_part));
    if (!t_all_search.empty()) {
      const double all_search = median(t_all_search);
      say("              %10.1f ms  %8.1f M queries/s  (search alone, %s)\n", all_search,
          n / all_search / 1e3, into);
      say("speedup, search alone: %.2f x\n", one_search / all_search);
    }
    if (!t_all_second.empty()) {
      const double second = median(t_all_second);
      say("              %10.1f ms  %8.1f M queries/s  (the second search: opens the ranks' "
          "pools)\n",
          second, n / second / 1e3);
    }
    if (!t_all_again.empty()) {
      const double again = median(t_all_again);
      say("              %10.1f ms  %8.1f M queries/s  (the search again, index kept)\n", again,
          n / again / 1e3);
      say("speedup, search again: %.2f x\n", one_search / again);
    }
    say("speedup:      %10.2f x   queries forwarded: %lld (%.3f %%)\n", one_ms / all_ms,
        static_cast<long long>(forwarded), 100.0 * double(forwarded) / double(n));
    if (check) {
      say("rows identical: %s", bad < 0 ? "yes (indices and distances, byte for byte)\n" : "NO");
      if (bad >= 0) say(" (first difference at row %lld)\n", static_cast<long long>(bad));
      if (bad >= 0) code = 6;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pcnn_bench_dist (rank %d): %s\n", rank_, e.what());
    code = 1;
  }
#ifdef PCNN_WITH_MPI
  if (under_mpi) {
    if (code != 0) MPI_Abort(MPI_COMM_WORLD, code);
    MPI_Finalize();
  }
#endif
  return code;
}
