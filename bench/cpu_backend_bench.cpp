// Benchmark of the CPU backend on its own: N uniform random points in a cube (fixed seed),
// build, then self-kNN (or self-radius), timed; --check compares sampled rows with brute force.
//
//   cpu_backend_bench [--n N] [--k K] [--size METERS] [--threads T] [--repeat R]
//                     [--radius R] [--shape uniform|identical|line|lattice] [--exclude-self]
//                     [--double] [--offset O] [--check]
//
// --double: float64 coordinates (drawn in double); --offset O: added to every x and y (with
// --double, georeferenced coordinates such as UTM eastings and northings).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/backend.hpp"
#include "pcnn/error.hpp"

namespace {

struct Options {
  std::int64_t n = 1000000;
  int k = 8;
  double size = 100.0;
  int threads = 0;
  int repeat = 3;
  double radius = -1;  // < 0: kNN
  std::string shape = "uniform";
  bool exclude_self = false;
  bool use_double = false;
  double offset = 0;
  bool check = false;
};

[[noreturn]] void usage(const char* msg) {
  std::fprintf(stderr,
               "%s\nusage: cpu_backend_bench [--n N] [--k K] [--size METERS] [--threads T] "
               "[--repeat R] [--radius R] [--shape uniform|identical|line|lattice] "
               "[--exclude-self] [--double] [--offset O] [--check]\n",
               msg);
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) usage(("missing value after " + a).c_str());
      return argv[++i];
    };
    if (a == "--n") {
      o.n = std::atoll(value());
    } else if (a == "--k") {
      o.k = std::atoi(value());
    } else if (a == "--size") {
      o.size = std::atof(value());
    } else if (a == "--threads") {
      o.threads = std::atoi(value());
    } else if (a == "--repeat") {
      o.repeat = std::max(1, std::atoi(value()));
    } else if (a == "--radius") {
      o.radius = std::atof(value());
    } else if (a == "--shape") {
      o.shape = value();
    } else if (a == "--exclude-self") {
      o.exclude_self = true;
    } else if (a == "--double") {
      o.use_double = true;
    } else if (a == "--offset") {
      o.offset = std::atof(value());
    } else if (a == "--check") {
      o.check = true;
    } else {
      usage(("unknown option " + a).c_str());
    }
  }
  return o;
}

template <class T>
std::vector<T> generate(const Options& o) {
  std::vector<T> xyz(static_cast<std::size_t>(o.n) * 3);
  std::mt19937_64 rng(12345);
  std::uniform_real_distribution<T> u(T(0), static_cast<T>(o.size));
  if (o.shape == "uniform") {
    for (T& v : xyz) v = u(rng);
  } else if (o.shape == "identical") {
    for (std::int64_t i = 0; i < o.n; ++i) {
      xyz[3 * i] = T(1.5);
      xyz[3 * i + 1] = T(-2.25);
      xyz[3 * i + 2] = T(7);
    }
  } else if (o.shape == "line") {
    for (std::int64_t i = 0; i < o.n; ++i) {
      xyz[3 * i] = u(rng);
      xyz[3 * i + 1] = T(0.5) * xyz[3 * i];
      xyz[3 * i + 2] = T(3);
    }
  } else if (o.shape == "lattice") {
    // A cube lattice of spacing 0.1, shuffled: many exact and near ties.
    const std::int64_t side = static_cast<std::int64_t>(std::ceil(std::cbrt(double(o.n))));
    std::vector<std::int64_t> perm(static_cast<std::size_t>(o.n));
    for (std::int64_t i = 0; i < o.n; ++i) perm[i] = i;
    std::shuffle(perm.begin(), perm.end(), rng);
    for (std::int64_t i = 0; i < o.n; ++i) {
      const std::int64_t c = perm[i];
      xyz[3 * i] = static_cast<T>(c % side) * T(0.1);
      xyz[3 * i + 1] = static_cast<T>((c / side) % side) * T(0.1);
      xyz[3 * i + 2] = static_cast<T>(c / (side * side)) * T(0.1);
    }
  } else {
    usage(("unknown shape " + o.shape).c_str());
  }
  if (o.offset != 0)
    for (std::int64_t i = 0; i < o.n; ++i) {
      xyz[3 * i] = static_cast<T>(xyz[3 * i] + o.offset);
      xyz[3 * i + 1] = static_cast<T>(xyz[3 * i + 1] + o.offset);
    }
  return xyz;
}

// Brute-force rows of sampled queries, exactly as the contract defines them.
template <class T>
std::int64_t check_knn(const Options& o, const std::vector<T>& xyz,
                       const std::vector<std::int32_t>& idx, const std::vector<float>& d2) {
  std::mt19937_64 rng(777);
  std::uniform_int_distribution<std::int64_t> pick(0, o.n - 1);
  std::vector<std::pair<double, std::int32_t>> all;
  std::int64_t bad = 0;
  const int samples = static_cast<int>(std::min<std::int64_t>(2000, o.n));
  for (int s = 0; s < samples; ++s) {
    const std::int64_t q = pick(rng);
    all.clear();
    for (std::int64_t i = 0; i < o.n; ++i) {
      if (o.exclude_self && i == q) continue;
      const double dx = double(xyz[3 * i]) - double(xyz[3 * q]);
      const double dy = double(xyz[3 * i + 1]) - double(xyz[3 * q + 1]);
      const double dz = double(xyz[3 * i + 2]) - double(xyz[3 * q + 2]);
      all.emplace_back((dx * dx + dy * dy) + dz * dz, static_cast<std::int32_t>(i));
    }
    const std::size_t keep = std::min<std::size_t>(o.k, all.size());
    std::partial_sort(all.begin(), all.begin() + keep, all.end());
    for (int j = 0; j < o.k; ++j) {
      const std::int32_t want_i = j < int(keep) ? all[j].second : -1;
      const float want_d =
          j < int(keep) ? static_cast<float>(all[j].first) : std::numeric_limits<float>::infinity();
      if (idx[q * o.k + j] != want_i || d2[q * o.k + j] != want_d) {
        if (bad < 5)
          std::fprintf(stderr, "mismatch row %lld col %d: got (%d, %g) want (%d, %g)\n",
                       static_cast<long long>(q), j, idx[q * o.k + j], d2[q * o.k + j], want_i,
                       want_d);
        ++bad;
      }
    }
  }
  return bad;
}

// CPU time of the whole process: on a shared machine, wall clock alone says little.
double cpu_ms() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

template <class T>
int run(const Options& o) {
  try {
    const std::vector<T> xyz = generate<T>(o);
    pcnn::IndexOptions io;
    io.backend = pcnn::Backend::cpu;
    io.threads = o.threads;
    auto backend = pcnn::detail::make_cpu_backend(io);
    const pcnn::PointsView pts = pcnn::host_points(xyz.data(), o.n);
    std::vector<std::int32_t> idx;
    std::vector<float> d2;
    if (o.radius < 0) {
      idx.resize(static_cast<std::size_t>(o.n) * o.k);
      d2.resize(idx.size());
    }
    std::vector<double> build_ms, query_ms, total_ms, build_cpu, query_cpu;
    std::int64_t neighbors = 0;
    for (int r = 0; r < o.repeat; ++r) {
      pcnn::SearchTimings tb, tq;
      const double c0 = cpu_ms();
      const auto t0 = std::chrono::steady_clock::now();
      backend->build(pts, nullptr, tb);
      const auto t1 = std::chrono::steady_clock::now();
      const double c1 = cpu_ms();
      if (o.radius < 0) {
        pcnn::KnnParams kp;
        kp.k = o.k;
        kp.exclude_self = o.exclude_self;
        backend->knn(nullptr, 0, kp, {idx.data(), o.n, o.k}, {d2.data(), o.n, o.k}, nullptr, true,
                     tq);
      } else {
        pcnn::RadiusParams rp;
        rp.radius = o.radius;
        rp.exclude_self = o.exclude_self;
        const pcnn::RadiusResult rr = backend->radius(nullptr, rp, nullptr, tq);
        neighbors = rr.offsets.back();
      }
      const auto t2 = std::chrono::steady_clock::now();
      build_cpu.push_back(c1 - c0);
      query_cpu.push_back(cpu_ms() - c1);
      build_ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
      query_ms.push_back(std::chrono::duration<double, std::milli>(t2 - t1).count());
      total_ms.push_back(std::chrono::duration<double, std::milli>(t2 - t0).count());
      std::printf(
          "run %d: build %.1f ms (cpu %.1f), query %.1f ms (cpu %.1f), total %.1f ms, "
          "%.1f distances/query\n",
          r, build_ms.back(), build_cpu.back(), query_ms.back(), query_cpu.back(), total_ms.back(),
          double(tq.distance_evaluations) / double(std::max<std::int64_t>(1, o.n)));
    }
    char offset_text_buf[48] = "";
    if (o.offset != 0)
      std::snprintf(offset_text_buf, sizeof offset_text_buf, " offset=%g", o.offset);
    const std::string offset_text = offset_text_buf;
    std::printf(
        "%s%s%s n=%lld %s threads=%d: median build %.1f ms, query %.1f ms, total %.1f ms "
        "(cpu: build %.1f ms, query %.1f ms)",
        o.shape.c_str(), o.use_double ? " float64" : "", offset_text.c_str(),
        static_cast<long long>(o.n),
        o.radius < 0 ? ("k=" + std::to_string(o.k)).c_str()
                     : ("radius=" + std::to_string(o.radius)).c_str(),
        o.threads, median(build_ms), median(query_ms), median(total_ms), median(build_cpu),
        median(query_cpu));
    if (o.radius >= 0)
      std::printf(", %.1f neighbors/query",
                  double(neighbors) / double(std::max<std::int64_t>(1, o.n)));
    std::printf("\n");
    if (o.check && o.radius < 0 && o.n > 0) {
      const std::int64_t bad = check_knn(o, xyz, idx, d2);
      std::printf("check: %lld mismatching entries in %lld sampled rows\n",
                  static_cast<long long>(bad),
                  static_cast<long long>(std::min<std::int64_t>(2000, o.n)));
      if (bad) return 1;
    }
  } catch (const pcnn::error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  return o.use_double ? run<double>(o) : run<float>(o);
}
