// Spatial partitioning by Morton ranges, boxes, and the pieces of the exact merge.
// Compiled with -ffp-contract=off: box_sqdist and exact_sqdist must round as the backends do.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>
#include <thread>

#include "cpu/cpu_tree.hpp"
#include "dist/part.hpp"
#include "pcnn/error.hpp"

namespace pcnn {
namespace {

bool finite3(const float* p) {
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

}  // namespace

double box_sqdist(const Box& box, const float* q) {
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
  dist::require_float32(points, "partitioning");
  PCNN_EXPECTS(points.count >= 0 && (points.count == 0 || points.data) && points.stride >= 3,
               "partitioning: invalid points view");
  if (sample <= 0) sample = 65536;
  std::array<double, 3> lo{INFINITY, INFINITY, INFINITY}, hi{-INFINITY, -INFINITY, -INFINITY};
  std::int64_t finite = 0;
  for (std::int64_t i = 0; i < points.count; ++i) {
    const float* p = points.data + i * points.stride;
    if (!finite3(p)) continue;
    ++finite;
    for (int a = 0; a < 3; ++a) {
      lo[a] = std::min(lo[a], double(p[a]));
      hi[a] = std::max(hi[a], double(p[a]));
    }
  }
  if (finite == 0) lo = hi = {0, 0, 0};
  lo_ = lo;
  for (int a = 0; a < 3; ++a) scale_[a] = hi[a] > lo[a] ? kCells / (hi[a] - lo[a]) : 0.0;
  if (parts == 1) return;
  // Every step-th finite point, step chosen so that at most `sample` are taken.
  const std::int64_t step = std::max<std::int64_t>(1, (finite + sample - 1) / sample);
  std::vector<std::pair<std::uint64_t, std::int64_t>> keys;
  std::int64_t seen = 0;
  for (std::int64_t i = 0; i < points.count; ++i) {
    const float* p = points.data + i * points.stride;
    if (!finite3(p)) continue;
    if (seen++ % step == 0) keys.emplace_back(morton_code(p), i);
  }
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

std::uint64_t Partitioning::morton_code(const float* p) const {
  std::uint64_t c[3];
  for (int a = 0; a < 3; ++a) {
    const double t = std::clamp((double(p[a]) - lo_[a]) * scale_[a], 0.0, kCells);
    c[a] = static_cast<std::uint64_t>(t);
  }
  return spread(c[0]) << 2 | spread(c[1]) << 1 | spread(c[2]);
}

int Partitioning::part_of(const float* p, std::int64_t index) const {
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

int Partitioning::home_of(const float* q) const {
  if (parts_ == 1 || !finite3(q)) return 0;
  const std::uint64_t c = morton_code(q);
  int part = 0;
  while (part < parts_ - 1 && cut_code_[part] <= c) ++part;
  return part;
}

std::vector<std::vector<std::int32_t>> Partitioning::assign(PointsView points) const {
  dist::require_float32(points, "partitioning");
  std::vector<std::vector<std::int32_t>> ids(static_cast<std::size_t>(parts_));
  const int threads = std::min<std::int64_t>(dist::hardware_threads(),
                                             std::max<std::int64_t>(1, points.count >> 16));
  std::vector<int> of(static_cast<std::size_t>(points.count));
  dist::parallel_for(points.count, threads, [&](std::int64_t a, std::int64_t b) {
    for (std::int64_t i = a; i < b; ++i)
      of[static_cast<std::size_t>(i)] = part_of(points.data + i * points.stride, i);
  });
  std::vector<std::int64_t> count(static_cast<std::size_t>(parts_), 0);
  for (int p : of) ++count[static_cast<std::size_t>(p)];
  for (int p = 0; p < parts_; ++p) ids[static_cast<std::size_t>(p)].reserve(count[p]);
  for (std::int64_t i = 0; i < points.count; ++i)
    ids[static_cast<std::size_t>(of[static_cast<std::size_t>(i)])].push_back(
        static_cast<std::int32_t>(i));
  return ids;
}

namespace {

// The box of the finite points point(0) .. point(n - 1).
template <class Point>
Box box_of(std::int64_t n, Point point) {
  Box b;
  b.lo = {INFINITY, INFINITY, INFINITY};
  b.hi = {-INFINITY, -INFINITY, -INFINITY};
  for (std::int64_t i = 0; i < n; ++i) {
    const float* p = point(i);
    if (!finite3(p)) continue;
    b.empty = false;
    for (int a = 0; a < 3; ++a) {
      b.lo[a] = std::min(b.lo[a], double(p[a]));
      b.hi[a] = std::max(b.hi[a], double(p[a]));
    }
  }
  if (b.empty) b.lo = b.hi = {0, 0, 0};
  return b;
}

}  // namespace

Box bounding_box(PointsView points, const std::vector<std::int32_t>& ids) {
  return box_of(static_cast<std::int64_t>(ids.size()), [&](std::int64_t j) {
    return points.data + std::int64_t(ids[static_cast<std::size_t>(j)]) * points.stride;
  });
}

namespace dist {

void require_float32(const PointsView& points, const char* what) {
  PCNN_EXPECTS(!points.is_double(),
               std::string(what) +
                   ": float64 coordinates (PointsView::data64) are not supported by spatial "
                   "parts, which partition and search float32 points; search them with one "
                   "pcnn::Index");
}

double exact_sqdist(const float* a, const float* b) {
  return detail::cpu::sqdist(a[0], a[1], a[2], b[0], b[1], b[2]);
}

Bounds bounds_of(const Partitioning& partitioning, PointsView points,
                 const std::vector<std::int32_t>* ids) {
  const std::int64_t n = ids ? static_cast<std::int64_t>(ids->size()) : points.count;
  Box cell[64];
  for (Box& c : cell) {
    c.lo = {INFINITY, INFINITY, INFINITY};
    c.hi = {-INFINITY, -INFINITY, -INFINITY};
  }
  for (std::int64_t j = 0; j < n; ++j) {
    const std::int64_t i = ids ? std::int64_t((*ids)[static_cast<std::size_t>(j)]) : j;
    const float* p = points.data + i * points.stride;
    if (!finite3(p)) continue;
    Box& c = cell[partitioning.morton_code(p) >> 57];
    c.empty = false;
    for (int a = 0; a < 3; ++a) {
      c.lo[a] = std::min(c.lo[a], double(p[a]));
      c.hi[a] = std::max(c.hi[a], double(p[a]));
    }
  }
  Bounds b;
  b.all.lo = {INFINITY, INFINITY, INFINITY};
  b.all.hi = {-INFINITY, -INFINITY, -INFINITY};
  for (const Box& c : cell) {
    if (c.empty) continue;
    b.cells.push_back(c);
    b.all.empty = false;
    for (int a = 0; a < 3; ++a) {
      b.all.lo[a] = std::min(b.all.lo[a], c.lo[a]);
      b.all.hi[a] = std::max(b.all.hi[a], c.hi[a]);
    }
  }
  if (b.all.empty) b.all.lo = b.all.hi = {0, 0, 0};
  return b;
}

void Part::take(const Partitioning& partitioning, PointsView points,
                std::vector<std::int32_t> part_ids) {
  ids = std::move(part_ids);
  xyz.resize(ids.size() * 3);
  for (std::size_t j = 0; j < ids.size(); ++j) {
    const float* p = points.data + std::int64_t(ids[j]) * points.stride;
    std::copy(p, p + 3, xyz.begin() + static_cast<std::ptrdiff_t>(3 * j));
  }
  bounds = bounds_of(partitioning, host_points(xyz.data(), size()), nullptr);
}

void Part::build(const IndexOptions& options) {
  if (built) return;
  index.emplace(host_points(xyz.data(), size()), options);
  built = true;
}

void Part::release() {
  index.reset();
  built = false;
}

void append_exact(const Part& part, const float* q, const std::int32_t* local_row, int k,
                  std::vector<Candidate>& out) {
  for (int j = 0; j < k && local_row[j] >= 0; ++j) {
    const std::int64_t l = local_row[j];
    out.push_back(
        {exact_sqdist(q, part.xyz.data() + 3 * l), part.ids[static_cast<std::size_t>(l)]});
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

void search_home(Part& part, int home, const std::vector<Bounds>& bounds, const float* q,
                 std::int64_t m, const KnnParams& params, const IndexOptions& options, int threads,
                 bool map_on_device, HomeRows& out) {
  const int k = params.k;
  const int np = static_cast<int>(bounds.size());
  const float* qs = q ? q : part.xyz.data();
  out.rows = m;
  auto t = std::chrono::steady_clock::now();
  if (!part.built && m > 0) part.build(options);
  out.build_ms += ms_since(t);
  t = std::chrono::steady_clock::now();
  out.idx.resize(static_cast<std::size_t>(m) * k);
  out.d.resize(out.idx.size());
  const MatrixView<std::int32_t> iv{out.idx.data(), m, k};
  const MatrixView<float> dv{out.d.data(), m, k};
  if (m > 0 && map_on_device) {
    knn_global_cuda(part, q, m, params, threads, out.idx.data(), out.d.data());
  } else if (m > 0) {
    if (q)
      part.index->knn(host_points(q, m), params, iv, dv);
    else
      part.index->self_knn(params, iv, dv);
    parallel_for(m * k, threads, [&](std::int64_t a, std::int64_t e) {
      to_global(part, out.idx.data() + a, e - a);
    });
  }
  out.search_ms += ms_since(t);
  // Which other parts may hold a neighbor: decided per slice of rows, then joined in order.
  const int slices = static_cast<int>(std::min<std::int64_t>(threads, 1 + m / 65536));
  std::vector<std::vector<std::vector<std::int32_t>>> to(static_cast<std::size_t>(slices));
  std::vector<std::vector<std::int32_t>> fwd(static_cast<std::size_t>(slices));
  for_each(slices, true, [&](int s) {
    auto& mine = to[s];
    mine.assign(static_cast<std::size_t>(np), {});
    for (std::int64_t j = m * s / slices; j < m * (s + 1) / slices; ++j) {
      const float* p = qs + 3 * j;
      if (!finite3(p)) continue;
      const double kth = kth_upper_bound(&out.d[j * k], &out.idx[j * k], k);
      bool any = false;
      for (int o = 0; o < np; ++o)
        if (o != home && may_hold(bounds[o], p, kth)) {
          mine[o].push_back(static_cast<std::int32_t>(j));
          any = true;
        }
      if (any) fwd[s].push_back(static_cast<std::int32_t>(j));
    }
  });
  out.forwarded.clear();
  out.to.assign(static_cast<std::size_t>(np), {});
  for (int s = 0; s < slices; ++s) {
    out.forwarded.insert(out.forwarded.end(), fwd[s].begin(), fwd[s].end());
    for (int o = 0; o < np; ++o)
      out.to[o].insert(out.to[o].end(), to[s][o].begin(), to[s][o].end());
  }
  // The forwarded rows' own candidates, exact: each global index found back in the part's
  // ascending table.
  out.merging.assign(out.forwarded.size(), {});
  std::int32_t local[kMaxK];
  for (std::size_t f = 0; f < out.forwarded.size(); ++f) {
    const std::int64_t j = out.forwarded[f];
    for (int c = 0; c < k; ++c) {
      const std::int32_t g = out.idx[j * k + c];
      local[c] =
          g < 0 ? -1
                : static_cast<std::int32_t>(std::lower_bound(part.ids.begin(), part.ids.end(), g) -
                                            part.ids.begin());
    }
    append_exact(part, qs + 3 * j, local, k, out.merging[f]);
  }
}

void answer(Part& part, const float* q, std::int64_t m, int k, const IndexOptions& options,
            Answer& out, double& build_ms, double& search_ms) {
  out.d.assign(static_cast<std::size_t>(m) * k, INFINITY);
  out.idx.assign(out.d.size(), -1);
  if (m == 0) return;
  auto t = std::chrono::steady_clock::now();
  if (!part.built) part.build(options);
  build_ms += ms_since(t);
  t = std::chrono::steady_clock::now();
  std::vector<std::int32_t> local(out.idx.size());
  std::vector<float> d(out.idx.size());
  part.index->knn(host_points(q, m), KnnParams{k}, {local.data(), m, k}, {d.data(), m, k});
  search_ms += ms_since(t);
  std::vector<Candidate> c;
  for (std::int64_t i = 0; i < m; ++i) {
    c.clear();
    append_exact(part, q + 3 * i, &local[i * k], k, c);
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
    write_merged(home.merging[f], k, &home.idx[j * k], &home.d[j * k]);
  }
}

int hardware_threads() {
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

void parallel_for(std::int64_t n, int threads,
                  const std::function<void(std::int64_t, std::int64_t)>& body) {
  threads = static_cast<int>(std::max<std::int64_t>(1, std::min<std::int64_t>(threads, n)));
  if (threads == 1) {
    if (n > 0) body(0, n);
    return;
  }
  for_each(threads, true, [&](int t) { body(n * t / threads, n * (t + 1) / threads); });
}

void for_each(int n, bool parallel, const std::function<void(int)>& body) {
  if (!parallel || n <= 1) {
    for (int i = 0; i < n; ++i) body(i);
    return;
  }
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(n));
  std::vector<std::thread> pool;
  for (int i = 0; i < n; ++i)
    pool.emplace_back([&, i] {
      try {
        body(i);
      } catch (...) {
        errors[static_cast<std::size_t>(i)] = std::current_exception();
      }
    });
  for (auto& t : pool) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace dist
}  // namespace pcnn
