// pcnn_bench_cell_model: what the kNN kernel's warps must scan, counted on the CPU (no GPU).
//
// The index sorts the points along a curve (gpu/detail/curve_key.cuh) and cuts them into cells of
// 32; a warp serves the 32 self-queries of one cell and scans every cell that some lane's sphere
// may reach (gpu/detail/tree_walk.cuh). For a synthetic cloud, this model counts per warp:
//   cells   the cells whose box some lane's final k-th-neighbor sphere reaches: the fewest cells
//           any walk of that index can scan (the kernel's evaluations a query were ~32 times it
//           while every lane scanned every cell; since round 17 only the lanes whose sphere may
//           reach a cell scan it, and only they are counted);
//   offers  points offered to a lane's list (within its current k-th distance when scanned),
//           scanning the first range (home cell +- 1) then those cells nearest first, with the
//           lists empty at the start or seeded as knn_tree.cuh's seed_limit does for a
//           self-search: from the home cell +- 1 (the kernel seeds a list of one from the home
//           cell alone), G groups, G the list's capacity (k rounded up to a power of two), where
//           it is at most --max-seed-cap (the kernel's 16; "-" above).
// Both for Morton (Z-order) keys and for the Hilbert keys the index uses. The exact neighbors come
// from pcnn's CPU backend. Compiled by nvcc for curve_key.cuh's host functions; runs on the host.
//
// With --pieces S1,S2,... a second table (Hilbert order) asks what finer boxes would save: the
// same warps of 32 self-queries, the points cut into pieces of S consecutive points along the
// curve, each with its box. Per query (lane) of a warp that scans a piece broadcast to every lane:
//   points   the points of the pieces whose box some lane's final sphere reaches (the fewest
//            distances a lane computes: cells x 32 at S = 32);
//   tested   the pieces whose box lies within the warp's largest final radius of the warp's home
//            box (what a walk at least tests to find those).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <numeric>
#include <string>
#include <vector>

#include "bench_util.hpp"
#include "gpu/detail/curve_key.cuh"
#include "gpu/detail/spatial_index.cuh"
#include "pcnn/index.hpp"
#include "pcnn/testing/synthetic.hpp"

namespace {

using pcnn::detail::expand_bits21;
using pcnn::detail::kCell;  // the index's cell size
using pcnn::detail::kCurveBits;

struct Box {
  float lo[3] = {INFINITY, INFINITY, INFINITY}, hi[3] = {-INFINITY, -INFINITY, -INFINITY};
  void add(const float* p) {
    for (int a = 0; a < 3; ++a) lo[a] = std::min(lo[a], p[a]), hi[a] = std::max(hi[a], p[a]);
  }
  float dist2(const float* p) const {
    float s = 0;
    for (int a = 0; a < 3; ++a) {
      const float g = std::max({lo[a] - p[a], p[a] - hi[a], 0.f});
      s += g * g;
    }
    return s;
  }
};

float dist2(const float* a, const float* b) {
  float s = 0;
  for (int i = 0; i < 3; ++i) s += (a[i] - b[i]) * (a[i] - b[i]);
  return s;
}

struct Counts {
  double cells = 0, box_volume = 0, offers_empty = 0, offers_seeded = 0;
};

// The points' order along the curve: Morton keys, or the index's Hilbert keys.
std::vector<int> curve_order(const std::vector<float>& xyz, bool hilbert) {
  const std::int64_t n = static_cast<std::int64_t>(xyz.size() / 3);
  Box all;
  for (std::int64_t i = 0; i < n; ++i) all.add(&xyz[3 * i]);
  const float b[6] = {all.lo[0], all.lo[1], all.lo[2], all.hi[0], all.hi[1], all.hi[2]};
  std::vector<std::uint64_t> key(n);
  for (std::int64_t i = 0; i < n; ++i) {
    const float* p = &xyz[3 * i];
    if (hilbert) {
      key[i] = pcnn::detail::curve_key(p[0], p[1], p[2], b);
      continue;
    }
    const float extent = std::max({b[3] - b[0], b[4] - b[1], b[5] - b[2], 1e-30f});
    const float top = float((1 << kCurveBits) - 1);
    std::uint64_t k = 0;
    for (int a = 0; a < 3; ++a)
      k |= expand_bits21(std::uint32_t(std::clamp((p[a] - b[a]) * top / extent, 0.f, top))) << a;
    key[i] = k;
  }
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int x, int y) { return key[x] < key[y]; });
  return order;
}

// The points in curve order, their final k-th-neighbor distances (squared), and their box.
struct SortedCloud {
  std::vector<float> s, r2;
  Box all;
};
SortedCloud sorted_cloud(const std::vector<float>& xyz, const std::vector<float>& kth2,
                         bool hilbert) {
  const std::int64_t n = static_cast<std::int64_t>(xyz.size() / 3);
  const std::vector<int> order = curve_order(xyz, hilbert);
  SortedCloud c{std::vector<float>(3 * n), std::vector<float>(n), {}};
  for (std::int64_t i = 0; i < n; ++i) {
    std::copy_n(&xyz[3 * std::int64_t(order[i])], 3, &c.s[3 * i]);
    c.r2[i] = kth2[order[i]];
    c.all.add(&c.s[3 * i]);
  }
  return c;
}

// Boxes in buckets of a g^3 grid over the cloud's box, to find those near a box.
class BoxGrid {
 public:
  BoxGrid(const std::vector<Box>& box, const Box& all, int g)
      : all_(all), g_(g), grid_(std::size_t(g) * g * g), seen_(box.size(), -1) {
    for (int c = 0; c < int(box.size()); ++c)
      each_bucket(box[c], 0.f, [&](std::vector<int>& b) { b.push_back(c); });
  }
  // Calls f(c) once for each box in the buckets `home` grown by `reach` overlaps (`visit`: a
  // number of its own for each call).
  template <class F>
  void near(const Box& home, float reach, int visit, F&& f) {
    each_bucket(home, reach, [&](const std::vector<int>& b) {
      for (int c : b)
        if (seen_[c] != visit) {
          seen_[c] = visit;
          f(c);
        }
    });
  }

 private:
  int bucket(int a, float v) const {
    const float w = all_.hi[a] - all_.lo[a];
    return std::clamp(int(w > 0 ? (v - all_.lo[a]) / w * g_ : 0), 0, g_ - 1);
  }
  template <class F>
  void each_bucket(const Box& b, float reach, F&& f) {
    for (int x = bucket(0, b.lo[0] - reach); x <= bucket(0, b.hi[0] + reach); ++x)
      for (int y = bucket(1, b.lo[1] - reach); y <= bucket(1, b.hi[1] + reach); ++y)
        for (int z = bucket(2, b.lo[2] - reach); z <= bucket(2, b.hi[2] + reach); ++z)
          f(grid_[(std::size_t(x) * g_ + y) * g_ + z]);
  }
  Box all_;
  int g_;
  std::vector<std::vector<int>> grid_;
  std::vector<int> seen_;
};

// The k-th smallest of the G groups' nearest points of the first range (seed_limit).
float seed_bound(const std::vector<float>& s, std::int64_t q, int first, int last, int k, int g,
                 std::int64_t n) {
  std::vector<float> nearest(g, INFINITY);
  for (int c = first; c <= last; ++c)
    for (int j = 0; j < kCell && c * kCell + j < n; ++j) {
      const std::int64_t p = std::int64_t(c) * kCell + j;
      if (p != q) nearest[j % g] = std::min(nearest[j % g], dist2(&s[3 * q], &s[3 * p]));
    }
  std::nth_element(nearest.begin(), nearest.begin() + (k - 1), nearest.end());
  return nearest[k - 1];
}

// Points within the lane's current k-th distance (or its seed) as the cells are scanned.
double offers(const std::vector<float>& s, std::int64_t q, const std::vector<int>& cells, int k,
              float seed, std::int64_t n) {
  std::vector<float> best;  // ascending, at most k
  double offered = 0;
  for (int c : cells)
    for (int j = 0; j < kCell && c * std::int64_t(kCell) + j < n; ++j) {
      const std::int64_t p = std::int64_t(c) * kCell + j;
      if (p == q) continue;
      const float d = dist2(&s[3 * q], &s[3 * p]);
      const float limit = std::min(seed, int(best.size()) < k ? INFINITY : best.back());
      if (d > limit) continue;
      ++offered;
      best.insert(std::upper_bound(best.begin(), best.end(), d), d);
      if (int(best.size()) > k) best.pop_back();
    }
  return offered;
}

Counts model(const std::vector<float>& xyz, const std::vector<float>& kth2, int k, int groups,
             bool hilbert) {
  const std::int64_t n = static_cast<std::int64_t>(xyz.size() / 3);
  const SortedCloud sorted = sorted_cloud(xyz, kth2, hilbert);
  const std::vector<float>&s = sorted.s, &r2 = sorted.r2;  // and their final k-th distances
  const Box& all = sorted.all;
  const int cells = static_cast<int>((n + kCell - 1) / kCell);
  std::vector<Box> box(cells);
  for (std::int64_t i = 0; i < n; ++i) box[i / kCell].add(&s[3 * i]);
  Counts out;
  for (const Box& b : box)
    out.box_volume += double(b.hi[0] - b.lo[0]) * (b.hi[1] - b.lo[1]) * (b.hi[2] - b.lo[2]);
  const double cube =
      double(all.hi[0] - all.lo[0]) * (all.hi[1] - all.lo[1]) * (all.hi[2] - all.lo[2]);
  out.box_volume /= cube;  // the mean box in units of the cloud's box / cells
  // The cells' boxes in buckets, to find the reachable ones.
  BoxGrid grid(box, all, std::max(1, int(std::cbrt(double(cells)))));
  for (int w = 0; w < cells; ++w) {
    const std::int64_t q0 = std::int64_t(w) * kCell, q1 = std::min(n, q0 + kCell);
    float reach = 0;
    for (std::int64_t q = q0; q < q1; ++q) reach = std::max(reach, std::sqrt(r2[q]));
    const Box& home = box[w];
    float center[3];
    for (int a = 0; a < 3; ++a) center[a] = 0.5f * (home.lo[a] + home.hi[a]);
    std::vector<int> needed;
    grid.near(home, reach, w, [&](int c) {
      for (std::int64_t q = q0; q < q1; ++q)
        if (box[c].dist2(&s[3 * q]) <= r2[q]) {
          needed.push_back(c);
          return;
        }
    });
    out.cells += double(needed.size());
    // The first range, then the rest nearest the warp's box centre first.
    const int first = std::max(0, w - (k + kCell - 1) / kCell);
    const int last = std::min(cells - 1, w + (k + kCell - 1) / kCell);
    std::vector<int> scan;
    for (int c = first; c <= last; ++c) scan.push_back(c);
    std::vector<int> rest;
    for (int c : needed)
      if (c < first || c > last) rest.push_back(c);
    std::sort(rest.begin(), rest.end(),
              [&](int a, int b) { return box[a].dist2(center) < box[b].dist2(center); });
    scan.insert(scan.end(), rest.begin(), rest.end());
    for (std::int64_t q = q0; q < q1; ++q) {
      out.offers_empty += offers(s, q, scan, k, INFINITY, n);
      if (groups > 0)
        out.offers_seeded += offers(s, q, scan, k, seed_bound(s, q, first, last, k, groups, n), n);
    }
  }
  out.cells /= cells;
  out.offers_empty /= double(n);
  out.offers_seeded /= double(n);
  return out;
}

// Pieces of `piece` points along the Hilbert curve: per warp of 32 self-queries, the points of the
// pieces that some lane's final k-th-neighbor sphere reaches, and the pieces tested (within the
// warp's largest final radius of its home box). Means per warp.
struct PieceCounts {
  double points = 0, tested = 0;
};
PieceCounts piece_model(const std::vector<float>& xyz, const std::vector<float>& kth2, int piece) {
  const std::int64_t n = static_cast<std::int64_t>(xyz.size() / 3);
  const SortedCloud sorted = sorted_cloud(xyz, kth2, true);
  const std::vector<float>&s = sorted.s, &r2 = sorted.r2;
  const int pieces = static_cast<int>((n + piece - 1) / piece);
  std::vector<Box> box(pieces);
  for (std::int64_t i = 0; i < n; ++i) box[i / piece].add(&s[3 * i]);
  BoxGrid grid(box, sorted.all, std::max(1, int(std::cbrt(double(pieces) / 8))));
  PieceCounts out;
  const int warps = static_cast<int>((n + kCell - 1) / kCell);
  for (int w = 0; w < warps; ++w) {
    const std::int64_t q0 = std::int64_t(w) * kCell, q1 = std::min(n, q0 + kCell);
    Box home;
    float reach = 0;
    for (std::int64_t q = q0; q < q1; ++q) {
      home.add(&s[3 * q]);
      reach = std::max(reach, std::sqrt(r2[q]));
    }
    grid.near(home, reach, w, [&](int c) {
      float gap = 0;  // between the boxes
      for (int a = 0; a < 3; ++a) {
        const float d = std::max({box[c].lo[a] - home.hi[a], home.lo[a] - box[c].hi[a], 0.f});
        gap += d * d;
      }
      if (gap > reach * reach) return;
      out.tested += 1;
      for (std::int64_t q = q0; q < q1; ++q)
        if (box[c].dist2(&s[3 * q]) <= r2[q]) {
          out.points += double(std::min<std::int64_t>(piece, n - std::int64_t(c) * piece));
          return;
        }
    });
  }
  out.points /= warps;
  out.tested /= warps;
  return out;
}

// The warp-cooperative grid scan of the --grid table (see the top of the file).
struct GridCounts {
  double points = 0, rows = 0, unproven = 0;
};
GridCounts grid_model(const std::vector<float>& xyz, const std::vector<float>& kth2,
                      double per_cell) {
  const std::int64_t n = static_cast<std::int64_t>(xyz.size() / 3);
  const SortedCloud sorted = sorted_cloud(xyz, kth2, true);
  const std::vector<float>&s = sorted.s, &r2 = sorted.r2;
  const Box& all = sorted.all;
  double volume = 1;
  for (int a = 0; a < 3; ++a) volume *= double(all.hi[a]) - all.lo[a];
  const double side = std::cbrt(per_cell * volume / double(n));
  int dims[3];
  for (int a = 0; a < 3; ++a) dims[a] = int((double(all.hi[a]) - all.lo[a]) / side) + 1;
  const auto cell_of = [&](const float* p, int a) {
    return std::clamp(int((double(p[a]) - all.lo[a]) / side), 0, dims[a] - 1);
  };
  // Per (y, z) row, the points of cells [0, x) at row_start[(z * dims[1] + y) * (dims[0] + 1) + x].
  std::vector<std::int64_t> row_start(std::size_t(dims[0] + 1) * dims[1] * dims[2], 0);
  const auto at = [&](int x, int y, int z) {
    return (std::size_t(z) * dims[1] + y) * (dims[0] + 1) + x;
  };
  for (std::int64_t i = 0; i < n; ++i) {
    const float* p = &s[3 * i];
    ++row_start[at(cell_of(p, 0) + 1, cell_of(p, 1), cell_of(p, 2))];
  }
  for (int z = 0; z < dims[2]; ++z)
    for (int y = 0; y < dims[1]; ++y)
      for (int x = 0; x < dims[0]; ++x) row_start[at(x + 1, y, z)] += row_start[at(x, y, z)];
  GridCounts out;
  const std::int64_t warps = (n + kCell - 1) / kCell;
  for (std::int64_t w = 0; w < warps; ++w) {
    const std::int64_t q0 = w * kCell, q1 = std::min(n, q0 + kCell);
    std::vector<std::array<int, 3>> c;
    int lo[3] = {INT32_MAX, INT32_MAX, INT32_MAX}, hi[3] = {-1, -1, -1};
    for (std::int64_t q = q0; q < q1; ++q) {
      const float* p = &s[3 * q];
      c.push_back({cell_of(p, 0), cell_of(p, 1), cell_of(p, 2)});
      double margin = INFINITY;
      for (int a = 0; a < 3; ++a) {
        lo[a] = std::min(lo[a], c.back()[a]);
        hi[a] = std::max(hi[a], c.back()[a]);
        const double below = double(all.lo[a]) + (c.back()[a] - 1) * side;
        const double above = double(all.lo[a]) + (c.back()[a] + 2) * side;
        if (c.back()[a] >= 1) margin = std::min(margin, double(p[a]) - below);
        if (c.back()[a] + 2 <= dims[a] - 1) margin = std::min(margin, above - double(p[a]));
      }
      if (!(double(r2[q]) < margin * margin)) out.unproven += 1;
    }
    for (int z = std::max(lo[2] - 1, 0); z <= std::min(hi[2] + 1, dims[2] - 1); ++z)
      for (int y = std::max(lo[1] - 1, 0); y <= std::min(hi[1] + 1, dims[1] - 1); ++y) {
        int x0 = INT32_MAX, x1 = -1;
        for (const auto& l : c)
          if (std::abs(l[2] - z) <= 1 && std::abs(l[1] - y) <= 1) {
            x0 = std::min(x0, std::max(l[0] - 1, 0));
            x1 = std::max(x1, std::min(l[0] + 1, dims[0] - 1));
          }
        if (x0 > x1) continue;
        out.rows += 1;
        out.points += double(row_start[at(x1 + 1, y, z)] - row_start[at(x0, y, z)]);
      }
  }
  out.points /= double(warps);
  out.rows /= double(warps);
  out.unproven /= double(n);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"pcnn_bench_cell_model: cells a warp must scan and offers a query, on the CPU"};
  long long points = 200000;
  std::string kinds = "uniform", ks = "1,8,32";
  int max_seed_cap = 16;
  std::string piece_sizes, grid_fill;
  app.add_option("--points", points, "points of each synthetic cloud")->capture_default_str();
  app.add_option("--kinds", kinds, "uniform,clustered,lidar")->capture_default_str();
  app.add_option("--ks", ks, "comma-separated k values")->capture_default_str();
  app.add_option("--max-seed-cap", max_seed_cap, "largest list capacity that is seeded")
      ->capture_default_str();
  app.add_option("--pieces", piece_sizes,
                 "also: points a lane computes with boxes of this many points (e.g. 32,16,8,4)");
  app.add_option("--grid", grid_fill,
                 "also: a warp-cooperative scan of a uniform grid of this many points a cell "
                 "(e.g. 1,1.5,2)");
  CLI11_PARSE(app, argc, argv);
  std::printf(
      "# self-kNN (exclude_self), seed 42, cells of %d; cells: per warp, the fewest any "
      "walk can scan; box: mean cell box / (cloud box / cells); offers: per query\n",
      kCell);
  std::printf("%-9s %9s %3s %-7s %8s %7s %13s %14s\n", "kind", "n", "k", "order", "cells", "box",
              "offers_empty", "offers_seeded");
  for (const std::string& kind : pcnn::bench::parse_words(kinds)) {
    const std::vector<float> xyz =
        pcnn::make_synthetic_cloud(pcnn::parse_synthetic_kind(kind), points, 42);
    const std::int64_t n = static_cast<std::int64_t>(xyz.size() / 3);
    for (const long long k : pcnn::bench::parse_list(ks)) {
      pcnn::IndexOptions options;
      options.backend = pcnn::Backend::cpu;
      pcnn::Index index(pcnn::host_points(xyz.data(), n), options);
      const pcnn::KnnResult exact = index.self_knn({static_cast<int>(k), true});
      std::vector<float> kth2(n);
      for (std::int64_t i = 0; i < n; ++i) kth2[i] = exact.sqdist[i * k + (k - 1)];
      int cap = 1;
      while (cap < k) cap *= 2;
      const int groups = cap <= max_seed_cap ? cap : 0;
      for (const bool hilbert : {false, true}) {
        const Counts c = model(xyz, kth2, static_cast<int>(k), groups, hilbert);
        char seeded[32] = "-";
        if (groups > 0) std::snprintf(seeded, sizeof seeded, "%.1f", c.offers_seeded);
        std::printf("%-9s %9lld %3lld %-7s %8.2f %7.2f %13.1f %14s\n", kind.c_str(),
                    static_cast<long long>(n), k, hilbert ? "hilbert" : "morton", c.cells,
                    c.box_volume, c.offers_empty, seeded);
        std::fflush(stdout);
      }
      for (const long long piece : pcnn::bench::parse_list(piece_sizes)) {
        const PieceCounts c = piece_model(xyz, kth2, static_cast<int>(piece));
        std::printf("%-9s %9lld %3lld pieces of %3lld: %8.1f points a lane, %7.1f pieces tested\n",
                    kind.c_str(), static_cast<long long>(n), k, piece, c.points, c.tested);
        std::fflush(stdout);
      }
      for (const std::string& fill : pcnn::bench::parse_words(grid_fill)) {
        const GridCounts c = grid_model(xyz, kth2, std::stod(fill));
        std::printf(
            "%-9s %9lld %3lld grid of %4s a cell: %8.1f points a lane, %5.1f rows a warp, %.1e "
            "unproven\n",
            kind.c_str(), static_cast<long long>(n), k, fill.c_str(), c.points, c.rows, c.unproven);
        std::fflush(stdout);
      }
    }
  }
  return 0;
}
