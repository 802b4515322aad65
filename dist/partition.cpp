// Spatial partitioning by Morton ranges, boxes, and the pieces of the exact merge.
// Compiled with -ffp-contract=off: box_sqdist and exact_sqdist must round as the backends do.
#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <string>
#include <system_error>
#include <thread>

#include "core/cpus.hpp"
#include "cpu/cpu_tree.hpp"
#include "dist/part.hpp"
#include "pcnn/error.hpp"

namespace pcnn {
namespace {

bool finite3(const double* p) {
  return std::isfinite(p[0]) && std::isfinite(p[1]) && std::isfinite(p[2]);
}

// The 21 low bits of v spread to every third bit.
std::uint64_t spread(std::uint64_t v) {
  v &= 0x1fffff;
  v = (v | v << 32) & 0x1f00000000ffffULL;
  v = (v | v << 16) & 0x1f0000ff0000ffULL;
  v = (v | v << 8) & 0x100f00f00f00f00fULL;
  v = (v | v << 4) & 0x10c30c30c30c30c3ULL;
  v = (v | v << 2) & 0x1249249249249249ULL;
  return v;
}

constexpr double kCells = 2097151.0;  // 2^21 - 1

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// Threads for one pass over n points: the usable CPUs, one per 64k points at least.
int pass_threads(std::int64_t n) {
  return static_cast<int>(
      std::min<std::int64_t>(dist::hardware_threads(), std::max<std::int64_t>(1, n >> 16)));
}

}  // namespace

double box_sqdist(const Box& box, const float* q) {
  const double d[3] = {q[0], q[1], q[2]};
  return box_sqdist(box, d);
}

double box_sqdist(const Box& box, const double* q) {
  if (box.empty) return INFINITY;
  double g[3];
  for (int a = 0; a < 3; ++a) {
    const double x = q[a];
    // The gap to the nearer face, as the point distance's own subtraction would round it.
    g[a] = x < box.lo[a] ? box.lo[a] - x : (x > box.hi[a] ? x - box.hi[a] : 0.0);
  }
  return (g[0] * g[0] + g[1] * g[1]) + g[2] * g[2];
}

Partitioning::Partitioning(PointsView points, int parts, std::int64_t sample) : parts_(parts) {
  PCNN_EXPECTS(parts >= 1, "parts must be at least 1, got " + std::to_string(parts));
  PCNN_EXPECTS(points.memory == Memory::host, "partitioning needs points in host memory");
  PCNN_EXPECTS(points.count >= 0 && (points.count == 0 || points.address()) && points.stride >= 3,
               "partitioning: invalid points view");
  if (sample <= 0) sample = 65536;
  // The box and the finite count, a slice of the points a thread (every pass below runs in the
  // same slices, so a slice's count of finite points places its sample).
  const int threads = pass_threads(points.count);
  struct Slice {
    std::array<double, 3> lo{INFINITY, INFINITY, INFINITY}, hi{-INFINITY, -INFINITY, -INFINITY};
    std::int64_t finite = 0;
    std::vector<std::pair<std::uint64_t, std::int64_t>> keys;
  };
  std::vector<Slice> slices(static_cast<std::size_t>(threads));
  dist::parallel_slices(points.count, threads, [&](int t, std::int64_t b, std::int64_t e) {
    Slice s;  // a local one, stored at the end (slices side by side share cache lines)
    for (std::int64_t i = b; i < e; ++i) {
      double p[3];
      dist::read_point(points, i, p);
      if (!finite3(p)) continue;
      ++s.finite;
      for (int a = 0; a < 3; ++a) {
        s.lo[a] = std::min(s.lo[a], p[a]);
        s.hi[a] = std::max(s.hi[a], p[a]);
      }
    }
    slices[static_cast<std::size_t>(t)] = std::move(s);
  });
  std::array<double, 3> lo{INFINITY, INFINITY, INFINITY}, hi{-INFINITY, -INFINITY, -INFINITY};
  std::int64_t finite = 0;
  for (const Slice& s : slices) {
    finite += s.finite;
    for (int a = 0; a < 3; ++a) {
      lo[a] = std::min(lo[a], s.lo[a]);
      hi[a] = std::max(hi[a], s.hi[a]);
    }
  }
  if (finite == 0) lo = hi = {0, 0, 0};
  lo_ = lo;
  // An extent that overflows double (points near ±1.8e308) gets no resolution: every code 0 on
  // that axis, the cuts then fall by index (balanced, still exact).
  for (int a = 0; a < 3; ++a) {
    const double extent = hi[a] - lo[a];
    scale_[a] = extent > 0 && std::isfinite(extent) ? kCells / extent : 0.0;
  }
  if (parts == 1) return;
  // Every step-th finite point, step chosen so that at most `sample` are taken.
  const std::int64_t step = std::max<std::int64_t>(1, (finite + sample - 1) / sample);
  std::vector<std::int64_t> seen_before(slices.size(), 0);  // finite points of earlier slices
  for (std::size_t t = 1; t < slices.size(); ++t)
    seen_before[t] = seen_before[t - 1] + slices[t - 1].finite;
  dist::parallel_slices(points.count, threads, [&](int t, std::int64_t b, std::int64_t e) {
    Slice& s = slices[static_cast<std::size_t>(t)];
    std::int64_t seen = seen_before[static_cast<std::size_t>(t)];
    for (std::int64_t i = b; i < e; ++i) {
      double p[3];
      dist::read_point(points, i, p);
      if (!finite3(p)) continue;
      if (seen++ % step == 0) s.keys.emplace_back(morton_code(p), i);
    }
  });
  std::vector<std::pair<std::uint64_t, std::int64_t>> keys;
  for (const Slice& s : slices) keys.insert(keys.end(), s.keys.begin(), s.keys.end());
  std::sort(keys.begin(), keys.end());
  for (int c = 1; c < parts; ++c) {
    const std::size_t at = keys.empty() ? 0 : keys.size() * static_cast<std::size_t>(c) / parts;
    if (at < keys.size()) {
      cut_code_.push_back(keys[at].first);
      cut_index_.push_back(keys[at].second);
    } else {  // fewer sampled points than parts: the last parts stay empty
      cut_code_.push_back(~std::uint64_t(0));
      cut_index_.push_back(INT64_MAX);
    }
  }
}

std::uint64_t Partitioning::morton_code(const double* p) const {
  std::uint64_t c[3];
  for (int a = 0; a < 3; ++a) {
    const double t = (p[a] - lo_[a]) * scale_[a];  // NaN only where scale is 0: code 0
    c[a] = static_cast<std::uint64_t>(t >= 0 ? std::min(t, kCells) : 0.0);
  }
  return spread(c[0]) << 2 | spread(c[1]) << 1 | spread(c[2]);
}

int Partitioning::part_of(const double* p, std::int64_t index) const {
  if (parts_ == 1) return 0;
  if (!finite3(p)) return static_cast<int>(index % parts_);
  const std::uint64_t c = morton_code(p);
  // The number of cuts at or below (c, index).
  int part = 0;
  while (part < parts_ - 1 &&
         (cut_code_[part] < c || (cut_code_[part] == c && cut_index_[part] <= index)))
    ++part;
  return part;
}

int Partitioning::home_of(const double* q) const {
  if (parts_ == 1 || !finite3(q)) return 0;
  const std::uint64_t c = morton_code(q);
  int part = 0;
  while (part < parts_ - 1 && cut_code_[part] <= c) ++part;
  return part;
}

std::vector<std::vector<std::int32_t>> Partitioning::assign(PointsView points) const {
  PCNN_EXPECTS(points.memory == Memory::host, "partitioning needs points in host memory");
  std::vector<std::vector<std::int32_t>> ids(static_cast<std::size_t>(parts_));
  const int threads = pass_threads(points.count);
  const auto np = static_cast<std::size_t>(parts_);
  std::vector<int> of;
  detail::resize_fresh(of, static_cast<std::size_t>(points.count));
  // Each slice's count per part, then its first place in each part's list: a slice writes its
  // points at their places, ascending like a serial pass. Counters are local to a slice while
  // it runs (slices side by side in `at` share cache lines).
  std::vector<std::int64_t> at(static_cast<std::size_t>(threads) * np, 0);
  dist::parallel_slices(points.count, threads, [&](int t, std::int64_t b, std::int64_t e) {
    std::vector<std::int64_t> count(np, 0);
    for (std::int64_t i = b; i < e; ++i) {
      double p[3];
      dist::read_point(points, i, p);
      const int part = part_of(p, i);
      of[static_cast<std::size_t>(i)] = part;
      ++count[static_cast<std::size_t>(part)];
    }
    std::copy(count.begin(), count.end(), at.begin() + static_cast<std::ptrdiff_t>(t * np));
  });
  for (std::size_t p = 0; p < np; ++p) {
    std::int64_t total = 0;
    for (int t = 0; t < threads; ++t) {
      const std::int64_t c = at[static_cast<std::size_t>(t) * np + p];
      at[static_cast<std::size_t>(t) * np + p] = total;
      total += c;
    }
    detail::resize_fresh(ids[p], static_cast<std::size_t>(total));
  }
  dist::parallel_slices(points.count, threads, [&](int t, std::int64_t b, std::int64_t e) {
    const auto first = at.begin() + static_cast<std::ptrdiff_t>(t * np);
    std::vector<std::int64_t> next(first, first + static_cast<std::ptrdiff_t>(np));
    for (std::int64_t i = b; i < e; ++i) {
      const auto part = static_cast<std::size_t>(of[static_cast<std::size_t>(i)]);
      ids[part][static_cast<std::size_t>(next[part]++)] = static_cast<std::int32_t>(i);
    }
  });
  return ids;
}

namespace {

Box empty_box() {
  Box b;
  b.lo = {INFINITY, INFINITY, INFINITY};
  b.hi = {-INFINITY, -INFINITY, -INFINITY};
  return b;
}

void grow(Box& b, const double* p) {
  b.empty = false;
  for (int a = 0; a < 3; ++a) {
    b.lo[a] = std::min(b.lo[a], p[a]);
    b.hi[a] = std::max(b.hi[a], p[a]);
  }
}

}  // namespace

Box bounding_box(PointsView points, const std::vector<std::int32_t>& ids) {
  PCNN_EXPECTS(points.memory == Memory::host && points.count >= 0 &&
                   (points.count == 0 || points.address()) && points.stride >= 3,
               "bounding_box: invalid points view (host memory, stride >= 3)");
  Box b = empty_box();
  for (const std::int32_t i : ids) {
    PCNN_EXPECTS(i >= 0 && i < points.count, "bounding_box: id " + std::to_string(i) +
                                                 " is not one of the " +
                                                 std::to_string(points.count) + " points");
    double p[3];
    dist::read_point(points, i, p);
    if (finite3(p)) grow(b, p);
  }
  if (b.empty) b.lo = b.hi = {0, 0, 0};
  return b;
}

namespace dist {

double exact_sqdist(const double* a, const double* b) {
  return detail::cpu::sqdist(a[0], a[1], a[2], b[0], b[1], b[2]);
}

Bounds bounds_of(const Partitioning& partitioning, PointsView points,
                 const std::vector<std::int32_t>* ids) {
  const std::int64_t n = ids ? static_cast<std::int64_t>(ids->size()) : points.count;
  const int threads = pass_threads(n);
  std::vector<std::array<Box, 64>> slices(static_cast<std::size_t>(threads));
  parallel_slices(n, threads, [&](int t, std::int64_t b, std::int64_t e) {
    std::array<Box, 64> cell;  // local while the slice runs, stored at the end
    for (Box& c : cell) c = empty_box();
    for (std::int64_t j = b; j < e; ++j) {
      const std::int64_t i = ids ? std::int64_t((*ids)[static_cast<std::size_t>(j)]) : j;
      double p[3];
      read_point(points, i, p);
      if (finite3(p)) grow(cell[partitioning.morton_code(p) >> 57], p);
    }
    slices[static_cast<std::size_t>(t)] = cell;
  });
  Bounds b;
  b.all = empty_box();
  for (int c = 0; c < 64; ++c) {
    Box box = empty_box();
    for (const auto& cell : slices) {
      if (cell[c].empty) continue;
      grow(box, cell[c].lo.data());
      grow(box, cell[c].hi.data());
    }
    if (box.empty) continue;
    b.cells.push_back(box);
    grow(b.all, box.lo.data());
    grow(b.all, box.hi.data());
  }
  if (b.all.empty) b.all.lo = b.all.hi = {0, 0, 0};
  return b;
}

void Packed::gather(const PointsView& v, const std::vector<std::int32_t>& ids, int threads) {
  const auto n = static_cast<std::int64_t>(ids.size());
  const auto copy = [&](auto* out, const auto* in) {
    parallel_for(n, threads, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t j = b; j < e; ++j) {
        const auto* p = in + static_cast<std::int64_t>(ids[static_cast<std::size_t>(j)]) * v.stride;
        for (int a = 0; a < 3; ++a) out[3 * j + a] = p[a];
      }
    });
  };
  f.clear();
  d.clear();
  if (is_double) {
    detail::resize_fresh(d, static_cast<std::size_t>(3 * n));
    copy(d.data(), v.data64);
  } else {
    detail::resize_fresh(f, static_cast<std::size_t>(3 * n));
    copy(f.data(), v.data);
  }
}

void Part::take(const Partitioning& partitioning, PointsView points,
                std::vector<std::int32_t> part_ids) {
  ids = std::move(part_ids);
  xyz = Packed(points.is_double());
  xyz.gather(points, ids, pass_threads(size()));
  bounds = bounds_of(partitioning, coords().view(size()), nullptr);
}

void Part::build(const IndexOptions& options) {
  if (built) return;
  index.emplace(coords().view(size()), options);
  built = true;
}

void Part::release() {
  index.reset();
  built = false;
}

void append_exact(const Part& part, const double* q, const std::int32_t* local_row, std::int64_t n,
                  std::vector<Candidate>& out) {
  const Coords c = part.coords();
  for (std::int64_t j = 0; j < n && local_row[j] >= 0; ++j) {
    const std::int64_t l = local_row[j];
    double p[3];
    c.get(l, p);
    out.push_back({exact_sqdist(q, p), part.ids[static_cast<std::size_t>(l)]});
  }
}

void write_merged(std::vector<Candidate>& c, int k, std::int32_t* idx_row, float* d_row) {
  const std::size_t keep = std::min<std::size_t>(static_cast<std::size_t>(k), c.size());
  std::partial_sort(c.begin(), c.begin() + static_cast<std::ptrdiff_t>(keep), c.end());
  for (int j = 0; j < k; ++j) {
    const bool used = static_cast<std::size_t>(j) < keep;
    idx_row[j] = used ? c[j].index : -1;
    d_row[j] = used ? static_cast<float>(c[j].d) : INFINITY;
  }
}

void to_global(const Part& part, std::int32_t* idx, std::int64_t n) {
  const std::int32_t* g = part.ids.data();
  for (std::int64_t i = 0; i < n; ++i)
    if (idx[i] >= 0) idx[i] = g[idx[i]];
}

void DenseSearch::run(Index& index, const PointsView* q, MatrixView<std::int32_t> iv,
                      MatrixView<float> dv) const {
  if (hybrid) {
    const HybridParams p{radius, k, exclude_self};
    if (q)
      index.hybrid(*q, p, iv, dv);
    else
      index.self_hybrid(p, iv, dv);
  } else {
    const KnnParams p{k, exclude_self};
    if (q)
      index.knn(*q, p, iv, dv);
    else
      index.self_knn(p, iv, dv);
  }
}

void DenseSearch::run_chunked(Index& index, const Coords* q, std::int64_t m, std::int32_t* idx,
                              float* d) const {
  const std::int64_t per = queries_per_call(index, m);
  for (std::int64_t a = 0; a < m; a += per) {
    const std::int64_t c = std::min(per, m - a);
    const MatrixView<std::int32_t> iv{idx + a * k, c, k};
    const MatrixView<float> dv{d + a * k, c, k};
    if (q) {
      const PointsView qv = q->from(a).view(c);
      run(index, &qv, iv, dv);
    } else if (c == m) {
      run(index, nullptr, iv, dv);
    } else {
      run_rows(index, a, iv, dv);
    }
  }
}

std::int64_t queries_per_call(const Index& index, std::int64_t m) {
  const auto& memory = index.options().memory;
  if (!memory) return m;
  return std::min(m, std::max<std::int64_t>(128, memory->available() / 4 / 128 / 128 * 128));
}

void DenseSearch::run_rows(Index& index, std::int64_t first_row, MatrixView<std::int32_t> iv,
                           MatrixView<float> dv) const {
  if (hybrid)
    index.self_hybrid_rows(first_row, HybridParams{radius, k, exclude_self}, iv, dv);
  else
    index.self_knn_rows(first_row, KnnParams{k, exclude_self}, iv, dv);
}

void route(const std::vector<Bounds>& bounds, int home, const Coords& qs, std::int64_t m,
           int threads, const std::function<double(std::int64_t)>& bound,
           std::vector<std::int32_t>& forwarded, std::vector<std::vector<std::int32_t>>& to) {
  const int np = static_cast<int>(bounds.size());
  // Decided per slice of rows, then joined in order.
  const int slices = static_cast<int>(std::min<std::int64_t>(threads, 1 + m / 65536));
  std::vector<std::vector<std::vector<std::int32_t>>> sto(static_cast<std::size_t>(slices));
  std::vector<std::vector<std::int32_t>> fwd(static_cast<std::size_t>(slices));
  for_each(slices, true, [&](int s) {
    auto& mine = sto[s];
    mine.assign(static_cast<std::size_t>(np), {});
    for (std::int64_t j = m * s / slices; j < m * (s + 1) / slices; ++j) {
      double p[3];
      qs.get(j, p);
      if (!finite3(p)) continue;
      const double b = bound(j);
      bool any = false;
      for (int o = 0; o < np; ++o)
        if (o != home && may_hold(bounds[o], p, b)) {
          mine[o].push_back(static_cast<std::int32_t>(j));
          any = true;
        }
      if (any) fwd[s].push_back(static_cast<std::int32_t>(j));
    }
  });
  forwarded.clear();
  to.assign(static_cast<std::size_t>(np), {});
  for (int s = 0; s < slices; ++s) {
    forwarded.insert(forwarded.end(), fwd[s].begin(), fwd[s].end());
    for (int o = 0; o < np; ++o) to[o].insert(to[o].end(), sto[s][o].begin(), sto[s][o].end());
  }
}

void search_home(Part& part, int home, const std::vector<Bounds>& bounds, const Coords* q,
                 std::int64_t m, const DenseSearch& search, const IndexOptions& options,
                 int threads, bool map_on_device, HomeRows& out, int sharing) {
  const int k = search.k;
  const Coords qs = q ? *q : part.coords();
  out.rows = m;
  auto t = std::chrono::steady_clock::now();
  if (!part.built && m > 0) part.build(options);
  out.build_ms += ms_since(t);
  t = std::chrono::steady_clock::now();
  const bool global_on_device = m > 0 && map_on_device && !search.hybrid;
  const bool placed_at_once = global_on_device && out.out_idx;  // rows straight to their places
  out.idx.clear();
  out.d.clear();
  if (!placed_at_once) {
    detail::resize_fresh(out.idx, static_cast<std::size_t>(m) * k);
    detail::resize_fresh(out.d, out.idx.size());
  }
  if (global_on_device) {
    GlobalRows how;
    how.place = placed_at_once ? out.place : nullptr;
    how.sharing = sharing;
    knn_global_cuda(part, q, m, KnnParams{k, search.exclude_self}, threads,
                    placed_at_once ? out.out_idx : out.idx.data(),
                    placed_at_once ? out.out_d : out.d.data(), how);
  } else if (m > 0) {
    search.run_chunked(*part.index, q, m, out.idx.data(), out.d.data());
    parallel_for(m * k, threads, [&](std::int64_t a, std::int64_t e) {
      to_global(part, out.idx.data() + a, e - a);
    });
  }
  if (out.out_idx && !placed_at_once) {  // each row to its place; the part's own copy let go
    parallel_for(m, threads, [&](std::int64_t a, std::int64_t e) {
      place_rows(out.idx.data() + a * k, out.d.data() + a * k, a, e - a, k, out.place, out.out_idx,
                 out.out_d);
    });
    out.idx = {};
    out.d = {};
  }
  out.search_ms += ms_since(t);
  // Which other parts may hold a neighbor: within the row's k-th distance (hybrid: and r²).
  const double limit = search.limit();
  route(
      bounds, home, qs, m, threads,
      [&](std::int64_t j) {
        return std::min(kth_upper_bound(out.row_d(j, k), out.row_idx(j, k), k), limit);
      },
      out.forwarded, out.to);
  // The forwarded rows' own candidates, exact: each global index found back in the part's
  // ascending table, on every thread (in a cloud stored in random order each search is some
  // dozen cache misses of a table as large as the part).
  out.merging.assign(out.forwarded.size(), {});
  const std::int64_t nf = static_cast<std::int64_t>(out.forwarded.size());
  parallel_for(nf, static_cast<int>(std::min<std::int64_t>(threads, 1 + nf / 4096)),
               [&](std::int64_t a, std::int64_t e) {
                 std::int32_t local[kMaxK];
                 for (std::int64_t f = a; f < e; ++f) {
                   const std::int64_t j = out.forwarded[f];
                   const std::int32_t* row = out.row_idx(j, k);
                   for (int c = 0; c < k; ++c) {
                     const std::int32_t g = row[c];
                     local[c] = g < 0 ? -1
                                      : static_cast<std::int32_t>(
                                            std::lower_bound(part.ids.begin(), part.ids.end(), g) -
                                            part.ids.begin());
                   }
                   double p[3];
                   qs.get(j, p);
                   append_exact(part, p, local, k, out.merging[f]);
                 }
               });
}

void answer(Part& part, const Coords& q, std::int64_t m, const DenseSearch& search,
            const IndexOptions& options, Answer& out, double& build_ms, double& search_ms) {
  const int k = search.k;
  out.d.assign(static_cast<std::size_t>(m) * k, INFINITY);
  out.idx.assign(out.d.size(), -1);
  if (m == 0) return;
  auto t = std::chrono::steady_clock::now();
  if (!part.built) part.build(options);
  build_ms += ms_since(t);
  t = std::chrono::steady_clock::now();
  std::vector<std::int32_t> local(out.idx.size());
  std::vector<float> d(out.idx.size());
  DenseSearch forwarded = search;
  forwarded.exclude_self = false;  // the query is not one of this part's points
  forwarded.run_chunked(*part.index, &q, m, local.data(), d.data());
  search_ms += ms_since(t);
  std::vector<Candidate> c;
  for (std::int64_t i = 0; i < m; ++i) {
    c.clear();
    double p[3];
    q.get(i, p);
    append_exact(part, p, &local[i * k], k, c);
    for (std::size_t j = 0; j < c.size(); ++j) {
      out.d[i * k + j] = c[j].d;
      out.idx[i * k + j] = c[j].index;
    }
  }
}

void add_answers(HomeRows& home, int t, const double* d, const std::int32_t* idx, int k) {
  // home.to[t] and home.forwarded are both ascending: walk them together.
  std::size_t f = 0;
  const auto& rows = home.to[static_cast<std::size_t>(t)];
  for (std::size_t i = 0; i < rows.size(); ++i) {
    while (home.forwarded[f] != rows[i]) ++f;
    for (int j = 0; j < k && idx[i * k + j] >= 0; ++j)
      home.merging[f].push_back({d[i * k + j], idx[i * k + j]});
  }
}

void finish_merge(HomeRows& home, int k) {
  for (std::size_t f = 0; f < home.forwarded.size(); ++f) {
    const std::int64_t j = home.forwarded[f];
    write_merged(home.merging[f], k, home.row_idx(j, k), home.row_d(j, k));
  }
}

void radius_in_part(Part& part, const Coords* q, std::int64_t m, const RadiusParams& params,
                    bool count_only, const IndexOptions& options, int threads, RadiusRows& out,
                    double& build_ms, double& search_ms) {
  out.offsets.assign(static_cast<std::size_t>(m) + 1, 0);
  out.d.clear();
  out.idx.clear();
  if (m == 0) return;
  auto t = std::chrono::steady_clock::now();
  if (!part.built) part.build(options);
  build_ms += ms_since(t);
  t = std::chrono::steady_clock::now();
  const RadiusParams p{params.radius, q ? false : params.exclude_self, params.max_rows_per_pass};
  const PointsView qv = q ? q->view(m) : PointsView{};
  const ArrayView<std::int64_t> off{out.offsets.data(), m + 1};
  const std::int64_t total =
      q ? part.index->radius_count(qv, p, off) : part.index->self_radius_count(p, off);
  if (!count_only) {
    std::vector<float> fd(static_cast<std::size_t>(total));
    out.idx.resize(fd.size());
    const ArrayView<const std::int64_t> coff{out.offsets.data(), m + 1};
    if (q)
      part.index->radius_fill(qv, p, coff, {out.idx.data(), total}, {fd.data(), total});
    else
      part.index->self_radius_fill(p, coff, {out.idx.data(), total}, {fd.data(), total});
    search_ms += ms_since(t);
    // Exact distances from the coordinates as stored, and global indices. The index's rows are
    // sorted by (distance, local index) = (distance, global index): they stay in order.
    out.d.resize(fd.size());
    const Coords qs = q ? *q : part.coords();
    const Coords pc = part.coords();
    parallel_for(m, threads, [&](std::int64_t a, std::int64_t e) {
      for (std::int64_t j = a; j < e; ++j) {
        double x[3];
        qs.get(j, x);
        for (std::int64_t c = out.offsets[j]; c < out.offsets[j + 1]; ++c) {
          double y[3];
          const std::int32_t l = out.idx[c];
          pc.get(l, y);
          out.d[c] = exact_sqdist(x, y);
          out.idx[c] = part.ids[static_cast<std::size_t>(l)];
        }
      }
    });
    return;
  }
  search_ms += ms_since(t);
}

void radius_home(Part& part, int home, const std::vector<Bounds>& bounds, const Coords* q,
                 std::int64_t m, const RadiusParams& params, bool count_only,
                 const IndexOptions& options, int threads, RadiusHome& out) {
  out.rows = m;
  radius_in_part(part, q, m, params, count_only, options, threads, out.own, out.build_ms,
                 out.search_ms);
  const double r2 = params.radius * params.radius;  // the index's own r²
  route(
      bounds, home, q ? *q : part.coords(), m, threads, [&](std::int64_t) { return r2; },
      out.forwarded, out.to);
}

void merge_radius(RadiusHome& home, const std::vector<const RadiusRows*>& answers,
                  const std::vector<std::int64_t>& first, bool count_only) {
  const std::int64_t m = home.rows;
  const int np = static_cast<int>(answers.size());
  RadiusRows& out = home.merged;
  // Row j's rows in each answering part: f(answer, its row) for each, walking every to[t] along
  // the rows (j ascending).
  std::vector<std::size_t> at(static_cast<std::size_t>(np), 0);
  auto answered = [&](std::int64_t j, auto&& f) {
    for (int t = 0; t < np; ++t) {
      const auto& rows = home.to[static_cast<std::size_t>(t)];
      std::size_t& i = at[static_cast<std::size_t>(t)];
      if (i < rows.size() && rows[i] == j) {
        f(*answers[t], first[t] + static_cast<std::int64_t>(i));
        ++i;
      }
    }
  };
  out.offsets.assign(static_cast<std::size_t>(m) + 1, 0);
  for (std::int64_t j = 0; j < m; ++j) {
    std::int64_t count = home.own.offsets[j + 1] - home.own.offsets[j];
    answered(
        j, [&](const RadiusRows& a, std::int64_t r) { count += a.offsets[r + 1] - a.offsets[r]; });
    out.offsets[j + 1] = out.offsets[j] + count;
  }
  out.d.clear();
  out.idx.clear();
  if (count_only) return;
  out.d.resize(static_cast<std::size_t>(out.offsets[m]));
  out.idx.resize(out.d.size());
  std::fill(at.begin(), at.end(), 0);
  std::vector<Candidate> c;
  for (std::int64_t j = 0; j < m; ++j) {
    c.clear();
    for (std::int64_t e = home.own.offsets[j]; e < home.own.offsets[j + 1]; ++e)
      c.push_back({home.own.d[e], home.own.idx[e]});
    bool merged = false;
    answered(j, [&](const RadiusRows& a, std::int64_t r) {
      for (std::int64_t e = a.offsets[r]; e < a.offsets[r + 1]; ++e)
        c.push_back({a.d[e], a.idx[e]});
      merged = merged || a.offsets[r + 1] > a.offsets[r];
    });
    if (merged) std::sort(c.begin(), c.end());
    for (std::size_t e = 0; e < c.size(); ++e) {
      out.d[out.offsets[j] + e] = c[e].d;
      out.idx[out.offsets[j] + e] = c[e].index;
    }
  }
}

int hardware_threads() { return detail::usable_cpus(); }

void parallel_for(std::int64_t n, int threads,
                  const std::function<void(std::int64_t, std::int64_t)>& body) {
  threads = static_cast<int>(std::max<std::int64_t>(1, std::min<std::int64_t>(threads, n)));
  if (threads == 1) {
    if (n > 0) body(0, n);
    return;
  }
  parallel_slices(n, threads, [&](int, std::int64_t b, std::int64_t e) { body(b, e); });
}

void parallel_slices(std::int64_t n, int threads,
                     const std::function<void(int, std::int64_t, std::int64_t)>& body) {
  for_each(threads, threads > 1, [&](int t) { body(t, n * t / threads, n * (t + 1) / threads); });
}

void for_each(int n, bool parallel, const std::function<void(int)>& body) {
  if (!parallel || n <= 1) {
    for (int i = 0; i < n; ++i) body(i);
    return;
  }
  // Items are taken in turn by the threads below and the calling one. Where no more threads can
  // be made (a process or memory limit: `ulimit -v`, a container's pids limit), fewer take them
  // all: slower, not wrong (the items never wait on each other). A thread that failed to start
  // was std::terminate() with the others left joinable (--tiles 1024 under ulimit -v 4000000).
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(n));
  std::atomic<int> next{0};
  auto work = [&] {
    for (int i; (i = next.fetch_add(1)) < n;) {
      try {
        body(i);
      } catch (...) {
        errors[static_cast<std::size_t>(i)] = std::current_exception();
      }
    }
  };
  // As many threads as items, up to the CPUs' (at least 8, for the devices of a host: an item may
  // be a GPU's part, which waits on its device): --tiles 4096 made 4095 threads, whose stacks
  // took the address space that the items then needed.
  const int threads = std::min(n, std::max(hardware_threads(), 8));
  std::vector<std::thread> pool;
  for (int i = 1; i < threads; ++i) {
    try {
      pool.emplace_back(work);
    } catch (const std::system_error&) {
      break;
    } catch (const std::bad_alloc&) {
      break;
    }
  }
  work();
  for (auto& t : pool) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace dist
}  // namespace pcnn
