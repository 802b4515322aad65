// Exactness at scale (issue 14): adversarial clouds of millions of points, where a brute-force
// reference of every row is out of reach. Two independent exact implementations are compared
// row by row - the CUDA backend (float filter + double refinement) and the CPU backend (double
// throughout) - and a sample of rows is checked against the brute-force double reference.
//
//   pcnn_bench_exact_check --sizes 1000000,10000000 --k 8
#include <CLI/CLI.hpp>

#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "bench_util.hpp"
#include "pcnn/index.hpp"
#include "pcnn/testing/reference.hpp"
#include "pcnn/testing/synthetic.hpp"

namespace {

using namespace pcnn;

// The adversarial kinds: near-ties within float ulps, exact ties, magnitudes that break float
// squares, a georeferenced offset; and a LiDAR-like scan in scan order (whose rows from a few
// million points on are searched in passes, in turn on two streams).
std::vector<float> make_cloud(const std::string& kind, std::int64_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<float> xyz;
  if (kind == "lidar") return make_synthetic_cloud(SyntheticKind::lidar, n, seed);
  if (kind == "near_ties" || kind == "lattice") {  // shuffled lattice, spacing 0.1 or 1
    const int side = static_cast<int>(std::cbrt(double(n))) + 1;
    const float step = kind == "near_ties" ? 0.1f : 1.f;
    for (std::int64_t i = 0; i < n; ++i) {
      const std::int64_t x = i % side, y = (i / side) % side, z = i / (std::int64_t(side) * side);
      xyz.insert(xyz.end(), {step * float(x), step * float(y), step * float(z)});
    }
    for (std::int64_t i = n - 1; i > 0; --i) {
      const auto j = static_cast<std::int64_t>(rng() % std::uint64_t(i + 1));
      for (int a = 0; a < 3; ++a) std::swap(xyz[3 * i + a], xyz[3 * j + a]);
    }
    return xyz;
  }
  if (kind == "duplicates") {  // every point 8 times
    const std::vector<float> base = make_synthetic_cloud(SyntheticKind::uniform, n / 8 + 1, seed);
    for (std::int64_t i = 0; i < n; ++i)
      xyz.insert(xyz.end(), base.begin() + 3 * (i % (n / 8 + 1)),
                 base.begin() + 3 * (i % (n / 8 + 1)) + 3);
    return xyz;
  }
  xyz = make_synthetic_cloud(SyntheticKind::uniform, n, seed);
  const double scale = kind == "tiny" ? 1e-30 : kind == "huge" ? 1e25 : 1.0;
  const double offset = kind == "utm" ? 4.5e6 : 0.0;
  for (std::size_t i = 0; i < xyz.size(); ++i)
    xyz[i] = static_cast<float>(double(xyz[i]) * scale + offset * (1 + 0.1 * double(i % 3)));
  return xyz;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "pcnn exactness at scale: CUDA backend against the CPU backend and sampled brute force"};
  std::string sizes_s = "1000000",
              kinds_s = "uniform,near_ties,lattice,duplicates,tiny,huge,utm,lidar";
  int k = 8, samples = 1000;
  bool include_self = false;
  app.add_option("--sizes", sizes_s, "comma-separated point counts");
  app.add_option("--kinds", kinds_s, "uniform,near_ties,lattice,duplicates,tiny,huge,utm,lidar");
  app.add_option("-k", k, "neighbors (self-search, exclude_self unless --include-self)");
  app.add_flag("--include-self", include_self, "each point its own candidate (exclude_self false)");
  app.add_option("--samples", samples, "rows checked against brute force");
  CLI11_PARSE(app, argc, argv);
  bench::start_device(argv[0]);
  std::printf("%-11s %10s %4s %12s %12s %10s %12s\n", "kind", "n", "k", "rows_equal", "rows_differ",
              "sampled", "sampled_bad");
  int failures = 0;
  for (const long long n : bench::parse_list(sizes_s)) {
    for (const std::string& kind : bench::parse_words(kinds_s)) {
      const std::vector<float> xyz = make_cloud(kind, n, 7);
      const PointsView v = host_points(xyz.data(), static_cast<std::int64_t>(xyz.size() / 3));
      IndexOptions cuda, cpu;
      cuda.backend = Backend::cuda;
      cpu.backend = Backend::cpu;
      const KnnParams p{k, !include_self};
      const KnnResult g = Index(v, cuda).self_knn(p);
      const KnnResult c = Index(v, cpu).self_knn(p);
      std::int64_t equal = 0;
      for (std::int64_t q = 0; q < g.rows; ++q) {
        bool same = true;
        for (int j = 0; j < k && same; ++j) {
          const std::size_t at = static_cast<std::size_t>(q) * k + j;
          same = g.indices[at] == c.indices[at] && g.sqdist[at] == c.sqdist[at];
        }
        equal += same;
      }
      // Sampled rows against brute force: the sampled points as queries (k + 1 with the point
      // itself first, where the self-search excluded it).
      std::mt19937_64 rng(11);
      std::vector<float> qs;
      std::vector<std::int64_t> rows;
      for (int s = 0; s < samples && v.count > 0; ++s) {
        const auto q = static_cast<std::int64_t>(rng() % std::uint64_t(v.count));
        rows.push_back(q);
        qs.insert(qs.end(), xyz.begin() + 3 * q, xyz.begin() + 3 * q + 3);
      }
      const PointsView qv = host_points(qs.data(), static_cast<std::int64_t>(rows.size()));
      const KnnResult ref =
          reference_knn(v, &qv, {include_self ? k : std::min(k + 1, kMaxK), false});
      std::int64_t bad = 0;
      for (std::size_t s = 0; s < rows.size(); ++s) {
        // The reference row (without the query itself where it is excluded), against the CUDA
        // row.
        std::vector<std::int32_t> want;
        std::vector<float> want_d;
        for (int j = 0; j < ref.k && int(want.size()) < k; ++j) {
          const std::size_t at = s * ref.k + j;
          if (!include_self && ref.indices[at] == rows[s]) continue;
          want.push_back(ref.indices[at]);
          want_d.push_back(ref.sqdist[at]);
        }
        bool ok = true;
        for (int j = 0; j < k && j < int(want.size()); ++j) {
          const std::size_t at = static_cast<std::size_t>(rows[s]) * k + j;
          ok = ok && g.indices[at] == want[j] && g.sqdist[at] == want_d[j];
        }
        bad += !ok;
      }
      std::printf("%-11s %10lld %4d %12lld %12lld %10zu %12lld\n", kind.c_str(),
                  static_cast<long long>(n), k, static_cast<long long>(equal),
                  static_cast<long long>(g.rows - equal), rows.size(), static_cast<long long>(bad));
      std::fflush(stdout);
      failures += (equal != g.rows) + (bad != 0);
    }
  }
  std::printf("%s\n", failures ? "DIFFERENCES FOUND" : "all rows equal");
  return failures ? 1 : 0;
}
