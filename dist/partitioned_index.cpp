// PartitionedIndex: spatial parts of one cloud, each with its own index, searched at once (one
// thread per device) or one after the other (tiles larger than a device), merged exactly; or
// replicas of the whole cloud, one per device, each searching a contiguous share of the rows.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <optional>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>

#include "core/number_text.hpp"
#include "dist/part.hpp"
#include "pcnn/device.hpp"
#include "pcnn/distributed.hpp"
#include "pcnn/error.hpp"
#include "pcnn/memory.hpp"

namespace pcnn {
namespace {

using clock_type = std::chrono::steady_clock;
double ms_since(clock_type::time_point t0) {
  return std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
}

}  // namespace

struct PartitionedIndex::Impl {
  PartitionedOptions options;
  std::int64_t n = 0;
  Partitioning partitioning;
  std::vector<dist::Part> parts;
  std::vector<IndexOptions> part_options;
  std::vector<std::shared_ptr<DeviceMemoryResource>> memory;  // one per device
  std::vector<double> built_ms;  // each part's build at construction (parts, not tiles)
  bool sequential = false;       // tiles
  int threads_per_part = 1;
  PartitionedTimings timings;
  std::vector<Index> replicas;  // the replicated layout: one whole index per device
  std::unique_ptr<dist::ShareExchange> exchange;  // replicas' self-searches cut along the order

  // The queries of one search by home part: the output rows and packed coordinates (a
  // self-search's are the parts' own points).
  struct Batches {
    Batches() = default;
    Batches(const Batches&) = delete;  // out_rows may point into query_rows
    Batches& operator=(const Batches&) = delete;
    Batches(Batches&&) = default;
    Batches& operator=(Batches&&) = default;
    const PointsView* queries = nullptr;
    std::int64_t rows = 0;
    std::vector<std::vector<std::int32_t>> query_rows;  // separate queries: each part's rows
    // Per part: its rows of the outputs (a self-search's: the part's own points, ascending).
    std::vector<const std::vector<std::int32_t>*> out_rows;
    std::vector<dist::Packed> qxyz;
    std::vector<dist::Bounds> bounds;
    const dist::Coords* q(int p, dist::Coords& c) const {
      if (!queries) return nullptr;
      c = qxyz[static_cast<std::size_t>(p)].coords();
      return &c;
    }
  };
  // Refuses queries a search cannot take (exclude_self: self-searches only).
  void check_queries(const PointsView* queries, bool exclude_self) const;
  Batches start(const PointsView* queries);
  // The forwarded queries part t must search: the rows `to(p)` of every part p's batch, in part
  // order; first[p] is where part p's rows start.
  template <class To>
  dist::Packed gather_forwarded(const Batches& b, int t, To&& to,
                                std::vector<std::int64_t>& first) const;
  void finish_timings(clock_type::time_point t_start);

  void dense(const PointsView* queries, const dist::DenseSearch& search,
             MatrixView<std::int32_t> out_idx, MatrixView<float> out_d);
  // count_only: offsets alone (out.offsets), else the whole result.
  void radius(const PointsView* queries, const RadiusParams& params, bool count_only,
              RadiusResult& out);

  // The replicated layout: every device's replica of the whole cloud searches a contiguous share
  // of the rows, all at once.
  void build_replicas(PointsView points);
  std::int64_t share(std::int64_t rows, int d) const {
    return rows * d / static_cast<std::int64_t>(replicas.size());
  }
  void start_replicas(std::int64_t rows);
  // body(d, a, b): replica d's rows [a, b), every non-empty share at once.
  void on_replicas(std::int64_t rows,
                   const std::function<void(int, std::int64_t, std::int64_t)>& body);
  void finish_replicas(clock_type::time_point t_start);
  // Replica d's output views for its rows [a, b).
  using ShareViews = std::function<std::pair<MatrixView<std::int32_t>, MatrixView<float>>(
      int, std::int64_t, std::int64_t)>;
  // Every replica searches its share into out(d, a, b); host outputs (`host_idx`, `host_d`,
  // `rows` × k) are page-locked once for every device, inside the timed search.
  void dense_replicas(const PointsView* queries, const dist::DenseSearch& search, std::int64_t rows,
                      const ShareViews& out, const void* host_idx, const void* host_d);
  // The self-search cut along the replicas' order; false where it cannot run (nothing done).
  bool self_by_position(const dist::DenseSearch& search, std::int64_t rows, const ShareViews& out);
  void check_dense(const PointsView* queries, const dist::DenseSearch& search) const;
  // Rows kept on the devices: `out` checked against the shares, then searched in place.
  void dense_on_devices(const PointsView* queries, const dist::DenseSearch& search,
                        const std::vector<DeviceRows>& out);
  void radius_replicas(const PointsView* queries, const RadiusParams& params, bool count_only,
                       RadiusResult& out);
};

namespace {

// Replicas where they help: CUDA devices, untiled, no cap (a cloud too large for one device is
// what the spatial layout and tiles are for), and more than one device.
bool use_replicas(const PartitionedOptions& o, Backend backend) {
  if (o.layout == Layout::spatial) return false;
  const bool possible = backend == Backend::cuda && o.tiles == 0;
  if (o.layout == Layout::replicated) {
    PCNN_EXPECTS(possible, "the replicated layout needs CUDA devices and no tiles");
    return true;
  }
  return possible && o.max_device_memory == 0 && !o.index.memory && o.devices.size() > 1;
}

}  // namespace

namespace {

// The bytes a host view spans (what page-locking it covers).
std::size_t view_bytes(const PointsView* v) {
  return v ? static_cast<std::size_t>(v->span_bytes()) : 0;
}

}  // namespace

void PartitionedIndex::Impl::build_replicas(PointsView points) {
  const int nd = static_cast<int>(options.devices.size());
  // Built into their places (a default-constructed Index would be an empty CUDA index on the
  // default device, with its own pool and stream, only to be replaced).
  std::vector<std::optional<Index>> built(static_cast<std::size_t>(nd));
  built_ms.assign(static_cast<std::size_t>(nd), 0.0);
  // At once on distinct devices, one after the other where a device holds several replicas
  // (indexes built at once from several threads on one device hung in the driver: H100, driver
  // 580). Distinct peer devices without a cap each upload a share of the points and take the
  // others from their peers (dist::SpreadPoints, NVLink where the devices have it), then index
  // their copy: the host sends the cloud once in all instead of once to each device. Otherwise the
  // points are page-locked once for every device (counted in every build): each index would else
  // lock and unlock them for its own upload, under the others' copies.
  const auto t = clock_type::now();
  std::vector<int> sorted = options.devices;
  std::sort(sorted.begin(), sorted.end());
  const bool distinct = std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end();
  const bool spread = distinct && points.memory == Memory::host && options.max_device_memory == 0 &&
                      !options.index.memory && dist::SpreadPoints::possible(options.devices);
  std::optional<dist::SpreadPoints> copies;
  std::optional<PageLock> lock_points;
  if (spread) {
    try {
      copies.emplace(points, options.devices);
    } catch (const out_of_memory_error&) {
      // A device without room for a copy besides its index: the points are page-locked once
      // and each index uploads them itself.
      copies.reset();
    }
  }
  if (!copies) lock_points.emplace(points.address(), view_bytes(&points));
  dist::for_each(nd, distinct, [&](int d) {
    IndexOptions o = options.index;
    o.device = options.devices[static_cast<std::size_t>(d)];
    if (!o.memory && options.max_device_memory > 0)
      o.memory = make_limited_pool_resource(options.max_device_memory, o.device);
    built[d].emplace(copies ? copies->on(d) : points, o);
    built_ms[d] = ms_since(t);
  });
  for (std::optional<Index>& r : built) replicas.push_back(std::move(*r));
  // Self-searches cut along the order, unless the caller bounds the devices' memory (the shares
  // come from pools of the exchange's own).
  if (!options.index.memory && options.max_device_memory == 0)
    exchange = std::make_unique<dist::ShareExchange>(options.devices);
  timings.replicated = true;
}

void PartitionedIndex::Impl::start_replicas(std::int64_t rows) {
  const int nd = static_cast<int>(replicas.size());
  timings = PartitionedTimings();
  timings.replicated = true;
  timings.parts.resize(static_cast<std::size_t>(nd));
  for (int d = 0; d < nd; ++d) {
    PartStats& st = timings.parts[static_cast<std::size_t>(d)];
    st.device = options.devices[static_cast<std::size_t>(d)];
    st.points = replicas[d].size();
    st.home_queries = share(rows, d + 1) - share(rows, d);
    st.build_ms = built_ms[static_cast<std::size_t>(d)];
  }
}

// Each device's replica searches a contiguous share of the rows straight into its rows of the
// outputs, which the caller page-locks once for every device; the rows are those of one index.
void PartitionedIndex::Impl::on_replicas(
    std::int64_t rows, const std::function<void(int, std::int64_t, std::int64_t)>& body) {
  dist::for_each(static_cast<int>(replicas.size()), true, [&](int d) {
    const std::int64_t a = share(rows, d), b = share(rows, d + 1);
    const auto t = clock_type::now();
    if (b > a) body(d, a, b);
    timings.parts[static_cast<std::size_t>(d)].search_ms += ms_since(t);
  });
}

void PartitionedIndex::Impl::finish_replicas(clock_type::time_point t_start) {
  for (const PartStats& st : timings.parts)  // each counted from the start: the last to finish
    timings.build_ms = std::max(timings.build_ms, st.build_ms);
  timings.home_ms = ms_since(t_start);
  timings.total_ms = timings.home_ms + timings.build_ms;
}

void PartitionedIndex::Impl::dense_replicas(const PointsView* queries,
                                            const dist::DenseSearch& search, std::int64_t rows,
                                            const ShareViews& out, const void* host_idx,
                                            const void* host_d) {
  const auto t_start = clock_type::now();
  start_replicas(rows);
  {
    // Released before the clock stops.
    const std::size_t out_bytes = static_cast<std::size_t>(rows) * search.k * 4;
    const PageLock lock_idx(host_idx, out_bytes), lock_d(host_d, out_bytes),
        lock_q(queries ? queries->address() : nullptr, view_bytes(queries));
    if (!queries && self_by_position(search, rows, out)) {
      finish_replicas(t_start);
      return;
    }
    on_replicas(rows, [&](int d, std::int64_t a, std::int64_t b) {
      const auto [iv, dv] = out(d, a, b);
      if (queries) {
        const PointsView q = queries->slice(a, b - a);
        search.run(replicas[d], &q, iv, dv);
      } else {
        search.run_rows(replicas[d], a, iv, dv);
      }
    });
  }
  finish_replicas(t_start);
}

// A self-search cut along the replicas' order (dist::ShareExchange), where the devices
// may write each other's memory. Rows of a cloud stored in random order, cut into contiguous
// shares, are each scattered over the whole cloud: every replica then searched a sparse, sorted
// half of it (200M points, k = 8, two H100s: 1.47-1.56x one device's search; round 13).
bool PartitionedIndex::Impl::self_by_position(const dist::DenseSearch& search, std::int64_t rows,
                                              const ShareViews& out) {
  if (!exchange) return false;
  const int nd = static_cast<int>(replicas.size());
  std::vector<dist::RowsPlace> places(static_cast<std::size_t>(nd));
  std::vector<std::int64_t> first(static_cast<std::size_t>(nd) + 1);
  for (int d = 0; d <= nd; ++d) first[static_cast<std::size_t>(d)] = share(rows, d);
  for (int d = 0; d < nd; ++d) {
    const auto [iv, dv] = out(d, first[d], first[d + 1]);
    places[static_cast<std::size_t>(d)] = {iv.data, dv.data, iv.memory == Memory::device};
  }
  std::vector<double> ms(static_cast<std::size_t>(nd), 0.0);
  if (!exchange->self_search(replicas, search, first, places, ms)) return false;
  for (int d = 0; d < nd; ++d)
    timings.parts[static_cast<std::size_t>(d)].search_ms += ms[static_cast<std::size_t>(d)];
  timings.by_position = true;
  return true;
}

void PartitionedIndex::Impl::dense_on_devices(const PointsView* queries,
                                              const dist::DenseSearch& search,
                                              const std::vector<DeviceRows>& out) {
  PCNN_EXPECTS(!replicas.empty(),
               "rows kept on the devices need the replicated layout (CUDA devices, no tiles)");
  check_dense(queries, search);
  const std::int64_t rows = queries ? queries->count : n;
  const int nd = static_cast<int>(replicas.size());
  PCNN_EXPECTS(static_cast<int>(out.size()) == nd,
               "rows on the devices: " + std::to_string(out.size()) + " shares for " +
                   std::to_string(nd) + " replicas (see device_rows)");
  for (int d = 0; d < nd; ++d) {
    const DeviceRows& o = out[static_cast<std::size_t>(d)];
    const std::int64_t a = share(rows, d), m = share(rows, d + 1) - a;
    const std::string which = "rows on the devices, share " + std::to_string(d);
    PCNN_EXPECTS(
        o.device == options.devices[static_cast<std::size_t>(d)] && o.first_row == a && o.rows == m,
        which + ": not the share device_rows(" + std::to_string(rows) + ") gives");
    for (const auto& [memory, r, c, data] :
         {std::tuple{o.indices.memory, o.indices.rows, o.indices.cols,
                     static_cast<const void*>(o.indices.data)},
          std::tuple{o.sqdist.memory, o.sqdist.rows, o.sqdist.cols,
                     static_cast<const void*>(o.sqdist.data)}}) {
      PCNN_EXPECTS(memory == Memory::device && r == m && c == search.k && (m == 0 || data),
                   which + ": views must be " + std::to_string(m) + " x " +
                       std::to_string(search.k) + " of device memory");
      PCNN_EXPECTS(m == 0 || dist::device_of(data) == o.device,
                   which + ": a view is not memory of CUDA device " + std::to_string(o.device));
    }
  }
  // No two views may overlap: every share writes all of its own at once.
  std::vector<std::pair<std::uintptr_t, std::uintptr_t>> spans;
  for (const DeviceRows& o : out) {
    const std::uintptr_t bytes = static_cast<std::uintptr_t>(o.rows) * search.k * 4;
    if (bytes == 0) continue;
    for (const void* p :
         {static_cast<const void*>(o.indices.data), static_cast<const void*>(o.sqdist.data)})
      spans.emplace_back(reinterpret_cast<std::uintptr_t>(p),
                         reinterpret_cast<std::uintptr_t>(p) + bytes);
  }
  std::sort(spans.begin(), spans.end());
  for (std::size_t i = 1; i < spans.size(); ++i)
    PCNN_EXPECTS(spans[i].first >= spans[i - 1].second, "rows on the devices: two views overlap");
  dense_replicas(
      queries, search, rows,
      [&](int d, std::int64_t, std::int64_t) {
        const DeviceRows& o = out[static_cast<std::size_t>(d)];
        return std::pair{o.indices, o.sqdist};
      },
      nullptr, nullptr);
}

// Radius on replicas: the counts of each share made global by a running sum (a self-search's
// all counted by the first replica: an index counts its own rows only all at once), then every
// share filled into its range of the pairs.
void PartitionedIndex::Impl::radius_replicas(const PointsView* queries, const RadiusParams& params,
                                             bool count_only, RadiusResult& out) {
  const int nd = static_cast<int>(replicas.size());
  const std::int64_t rows = queries ? queries->count : n;
  const auto t_start = clock_type::now();
  start_replicas(rows);
  out.rows = rows;
  out.offsets.assign(static_cast<std::size_t>(rows) + 1, 0);
  out.indices.clear();
  out.sqdist.clear();
  {
    const PageLock lock_q(queries ? queries->address() : nullptr, view_bytes(queries));
    if (queries) {
      std::vector<std::vector<std::int64_t>> counts(static_cast<std::size_t>(nd));
      on_replicas(rows, [&](int d, std::int64_t a, std::int64_t b) {
        counts[d].assign(static_cast<std::size_t>(b - a) + 1, 0);
        replicas[d].radius_count(queries->slice(a, b - a), params, {counts[d].data(), b - a + 1});
      });
      for (int d = 0; d < nd; ++d) {
        const std::int64_t a = share(rows, d);
        for (std::size_t i = 1; i < counts[d].size(); ++i)
          out.offsets[a + i] = out.offsets[a] + counts[d][i];
      }
    } else if (rows > 0) {
      const auto t = clock_type::now();
      replicas[0].self_radius_count(params, {out.offsets.data(), rows + 1});
      timings.parts[0].search_ms += ms_since(t);
    }
    if (!count_only) {
      const std::int64_t total = out.offsets.back();
      out.indices.resize(static_cast<std::size_t>(total));
      out.sqdist.resize(out.indices.size());
      const std::size_t bytes = static_cast<std::size_t>(total) * 4;
      const PageLock lock_idx(out.indices.data(), bytes), lock_d(out.sqdist.data(), bytes);
      on_replicas(rows, [&](int d, std::int64_t a, std::int64_t b) {
        const ArrayView<const std::int64_t> off{out.offsets.data() + a, b - a + 1};
        const std::int64_t at = out.offsets[a], pairs = out.offsets[b] - at;
        const ArrayView<std::int32_t> iv{out.indices.data() + at, pairs};
        const ArrayView<float> dv{out.sqdist.data() + at, pairs};
        if (queries)
          replicas[d].radius_fill(queries->slice(a, b - a), params, off, iv, dv);
        else
          replicas[d].self_radius_fill_rows(a, params, off, iv, dv);
      });
    }
  }
  finish_replicas(t_start);
}

PartitionedIndex::PartitionedIndex(PointsView points, PartitionedOptions options)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = impl();
  PCNN_EXPECTS(points.memory == Memory::host, "a partitioned index takes points in host memory");
  PCNN_EXPECTS(points.count >= 0 && points.count <= INT32_MAX,
               "references: between 0 and 2^31-1 points");
  PCNN_EXPECTS(points.count == 0 || points.address() != nullptr, "references: null data");
  PCNN_EXPECTS(points.stride >= 3, "references: stride must be at least 3 coordinates");
  PCNN_EXPECTS(options.tiles >= 0 && options.tiles <= 4096, "tiles must be between 0 and 4096");
  Backend backend = options.index.backend;
  if (backend == Backend::automatic)
    backend =
        query_device(options.devices.empty() ? options.index.device : options.devices[0]).available
            ? Backend::cuda
            : Backend::cpu;
  options.index.backend = backend;
  if (options.devices.empty()) options.devices = {options.index.device};
  PCNN_EXPECTS(!(options.index.memory && options.devices.size() > 1),
               "one memory resource cannot serve several devices (give max_device_memory)");
  m.options = options;
  m.n = points.count;
  if (use_replicas(options, backend)) {
    m.build_replicas(points);
    return;
  }
  m.sequential = options.tiles > 0;
  const int nparts = m.sequential ? options.tiles : static_cast<int>(options.devices.size());
  const auto t0 = clock_type::now();
  m.partitioning = Partitioning(points, nparts, options.sample);
  auto ids = m.partitioning.assign(points);
  m.parts.resize(static_cast<std::size_t>(nparts));
  m.threads_per_part =
      m.sequential ? dist::hardware_threads() : std::max(1, dist::hardware_threads() / nparts);
  dist::for_each(nparts, true, [&](int p) {
    m.parts[p].take(m.partitioning, points, std::move(ids[static_cast<std::size_t>(p)]));
  });
  m.timings.partition_ms = ms_since(t0);

  const std::size_t ndev = options.devices.size();
  if (backend == Backend::cuda) {
    for (std::size_t i = 0; i < ndev; ++i)
      m.memory.push_back(options.index.memory ? options.index.memory
                                              : make_limited_pool_resource(
                                                    options.max_device_memory, options.devices[i]));
  }
  for (int p = 0; p < nparts; ++p) {
    IndexOptions o = options.index;
    if (backend == Backend::cuda) {
      o.device = options.devices[static_cast<std::size_t>(p) % ndev];
      o.memory = m.memory[static_cast<std::size_t>(p) % ndev];
    } else if (!m.sequential) {
      o.threads = options.index.threads > 0 ? options.index.threads : m.threads_per_part;
    }
    m.part_options.push_back(o);
  }
  m.built_ms.assign(static_cast<std::size_t>(nparts), 0.0);
  if (!m.sequential)  // CUDA indexes one after the other, as for replicas
    dist::for_each(nparts, backend != Backend::cuda, [&](int p) {
      const auto t = clock_type::now();
      m.parts[p].build(m.part_options[p]);
      m.built_ms[p] = ms_since(t);
    });
}

PartitionedIndex::~PartitionedIndex() = default;
PartitionedIndex::Impl& PartitionedIndex::impl() const {
  PCNN_EXPECTS(impl_ != nullptr, "use of a moved-from pcnn::PartitionedIndex");
  return *impl_;
}
PartitionedIndex::PartitionedIndex(PartitionedIndex&&) noexcept = default;
PartitionedIndex& PartitionedIndex::operator=(PartitionedIndex&&) noexcept = default;

std::int64_t PartitionedIndex::size() const { return impl().n; }
int PartitionedIndex::parts() const {
  return static_cast<int>(impl().replicas.empty() ? impl().parts.size() : impl().replicas.size());
}
bool PartitionedIndex::replicated() const { return !impl().replicas.empty(); }
const Partitioning& PartitionedIndex::partitioning() const { return impl().partitioning; }
const PartitionedTimings& PartitionedIndex::last_timings() const { return impl().timings; }

void PartitionedIndex::Impl::check_queries(const PointsView* queries, bool exclude_self) const {
  PCNN_EXPECTS(!(exclude_self && queries),
               "exclude_self applies to a self-search only (no separate query set)");
  if (queries) {
    PCNN_EXPECTS(queries->memory == Memory::host, "queries must be in host memory");
    PCNN_EXPECTS(queries->count >= 0 && queries->count <= INT32_MAX &&
                     (queries->count == 0 || queries->address()) && queries->stride >= 3,
                 "queries: invalid view");
  }
}

void PartitionedIndex::Impl::check_dense(const PointsView* queries,
                                         const dist::DenseSearch& search) const {
  const int k = search.k;
  const char* what = search.hybrid ? "max_nn" : "k";
  PCNN_EXPECTS(k >= 1 && k <= kMaxK, std::string(what) + " must be between 1 and " +
                                         std::to_string(kMaxK) + ", got " + std::to_string(k));
  PCNN_EXPECTS(!search.hybrid || (std::isfinite(search.radius) && search.radius >= 0),
               "radius must be finite and >= 0");
  check_queries(queries, search.exclude_self);
}

PartitionedIndex::Impl::Batches PartitionedIndex::Impl::start(const PointsView* queries) {
  const int np = static_cast<int>(parts.size());
  PartitionedTimings& tm = timings;
  const double partition_ms = tm.partition_ms;
  tm = PartitionedTimings();
  tm.partition_ms = partition_ms;
  tm.parts.resize(static_cast<std::size_t>(np));
  for (int p = 0; p < np; ++p) {
    tm.parts[p].device = part_options[p].backend == Backend::cuda ? part_options[p].device : p;
    tm.parts[p].points = parts[p].size();
    tm.parts[p].build_ms = built_ms[p];
  }
  Batches b;
  b.queries = queries;
  b.rows = queries ? queries->count : n;
  b.out_rows.resize(static_cast<std::size_t>(np));
  if (queries) {
    b.qxyz.assign(static_cast<std::size_t>(np), dist::Packed(queries->is_double()));
    b.query_rows.resize(static_cast<std::size_t>(np));
    for (std::int64_t r = 0; r < queries->count; ++r) {  // count <= INT32_MAX (check_queries)
      double q[3];
      dist::read_point(*queries, r, q);
      const int p = partitioning.home_of(q);
      b.query_rows[p].push_back(static_cast<std::int32_t>(r));
      b.qxyz[p].push(*queries, r);
    }
    for (int p = 0; p < np; ++p) b.out_rows[p] = &b.query_rows[p];
  } else {
    for (int p = 0; p < np; ++p) b.out_rows[p] = &parts[p].ids;
  }
  for (const dist::Part& part : parts) b.bounds.push_back(part.bounds);
  return b;
}

template <class To>
dist::Packed PartitionedIndex::Impl::gather_forwarded(const Batches& b, int t, To&& to,
                                                      std::vector<std::int64_t>& first) const {
  const int np = static_cast<int>(parts.size());
  dist::Packed xyz(b.queries ? b.queries->is_double() : parts[0].xyz.is_double);
  first.assign(static_cast<std::size_t>(np) + 1, 0);
  for (int p = 0; p < np; ++p) {
    first[p] = xyz.size();
    const dist::Coords c = b.queries ? b.qxyz[p].coords() : parts[p].coords();
    for (std::int32_t j : to(p)[static_cast<std::size_t>(t)]) xyz.push(c, j);
  }
  first[np] = xyz.size();
  return xyz;
}

void PartitionedIndex::Impl::finish_timings(clock_type::time_point t_start) {
  PartitionedTimings& tm = timings;
  for (const PartStats& s : tm.parts) {
    tm.queries_forwarded += s.queries_forwarded;
    tm.build_ms = sequential || options.index.backend == Backend::cuda  // built in turn
                      ? tm.build_ms + s.build_ms
                      : std::max(tm.build_ms, s.build_ms);
  }
  // Parts built at construction count as part of the build + search total.
  tm.total_ms = ms_since(t_start) + (sequential ? 0.0 : tm.build_ms);
}

void PartitionedIndex::Impl::dense(const PointsView* queries, const dist::DenseSearch& search,
                                   MatrixView<std::int32_t> out_idx, MatrixView<float> out_d) {
  const int np = static_cast<int>(parts.size());
  const int k = search.k;
  check_dense(queries, search);
  const std::int64_t rows = queries ? queries->count : n;
  PCNN_EXPECTS(out_idx.memory == Memory::host && out_d.memory == Memory::host,
               "a partitioned index writes host memory (replicas: see DeviceRows)");
  PCNN_EXPECTS(out_idx.rows == rows && out_idx.cols == k && out_d.rows == rows && out_d.cols == k &&
                   (rows == 0 || (out_idx.data && out_d.data)),
               "outputs must be " + std::to_string(rows) + " x " + std::to_string(k));
  if (!replicas.empty())
    return dense_replicas(
        queries, search, rows,
        [&](int, std::int64_t a, std::int64_t b) {
          return std::pair{MatrixView<std::int32_t>{out_idx.data + a * k, b - a, k, out_idx.memory},
                           MatrixView<float>{out_d.data + a * k, b - a, k, out_d.memory}};
        },
        out_idx.data, out_d.data);
  const auto t_start = clock_type::now();
  const Batches b = start(queries);
  PartitionedTimings& tm = timings;

  // 1. Every query in its home part; rows that no other part can change are final.
  const auto t_home = clock_type::now();
  std::vector<dist::HomeRows> home(static_cast<std::size_t>(np));
  dist::for_each(np, !sequential, [&](int p) {
    const std::int64_t m = static_cast<std::int64_t>(b.out_rows[p]->size());
    const bool on_device = part_options[p].backend == Backend::cuda &&
                           options.max_device_memory == 0 && !options.index.memory;
    // Parts on one device search at once (unless tiles) and share its memory.
    const int sharing =
        sequential ? 1
                   : static_cast<int>(std::count_if(part_options.begin(), part_options.end(),
                                                    [&](const IndexOptions& o) {
                                                      return o.device == part_options[p].device;
                                                    }));
    // Each part writes its own rows, and only those, at their places in the outputs; the merge
    // then overwrites the forwarded ones.
    home[p].out_idx = out_idx.data;
    home[p].out_d = out_d.data;
    home[p].place = b.out_rows[p]->data();
    dist::Coords c;
    dist::search_home(parts[p], p, b.bounds, b.q(p, c), m, search, part_options[p],
                      threads_per_part, on_device, home[p], sharing);
    if (sequential) parts[p].release();
    PartStats& st = tm.parts[p];
    st.home_queries = m;
    st.queries_forwarded = static_cast<std::int64_t>(home[p].forwarded.size());
    st.build_ms += home[p].build_ms;
    st.search_ms += home[p].search_ms;
  });
  tm.home_ms = ms_since(t_home);

  // 2. Forwarded queries searched in the parts that may hold their neighbors, answered with
  // exact distances and global indices.
  const auto t_boundary = clock_type::now();
  std::vector<dist::Answer> answers(static_cast<std::size_t>(np));
  std::vector<std::vector<std::int64_t>> from(static_cast<std::size_t>(np));
  dist::for_each(np, !sequential, [&](int t) {
    const dist::Packed xyz = gather_forwarded(
        b, t, [&](int p) -> const auto& { return home[p].to; }, from[t]);
    const std::int64_t m = xyz.size();
    PartStats& st = tm.parts[t];
    st.queries_received = m;
    dist::answer(parts[t], xyz.coords(), m, search, part_options[t], answers[t], st.build_ms,
                 st.search_ms);
    if (sequential && m > 0) parts[t].release();
  });

  // 3. The merge on exact distances, into the forwarded rows' places (the others are final).
  dist::for_each(np, !sequential, [&](int p) {
    dist::HomeRows& h = home[p];
    for (int t = 0; t < np; ++t) {
      const std::size_t at = static_cast<std::size_t>(from[t][p]) * k;
      if (!h.to[t].empty()) dist::add_answers(h, t, &answers[t].d[at], &answers[t].idx[at], k);
    }
    dist::finish_merge(h, k);
  });
  tm.boundary_ms = ms_since(t_boundary);
  finish_timings(t_start);
}

void PartitionedIndex::Impl::radius(const PointsView* queries, const RadiusParams& params,
                                    bool count_only, RadiusResult& out) {
  const int np = static_cast<int>(parts.size());
  PCNN_EXPECTS(std::isfinite(params.radius) && params.radius >= 0,
               "radius must be finite and >= 0, got " + detail::number_text(params.radius));
  check_queries(queries, params.exclude_self);
  if (!replicas.empty()) return radius_replicas(queries, params, count_only, out);
  const auto t_start = clock_type::now();
  const Batches b = start(queries);
  PartitionedTimings& tm = timings;

  // 1. Every query in its home part, and where else its ball reaches.
  const auto t_home = clock_type::now();
  std::vector<dist::RadiusHome> home(static_cast<std::size_t>(np));
  dist::for_each(np, !sequential, [&](int p) {
    const std::int64_t m = static_cast<std::int64_t>(b.out_rows[p]->size());
    dist::Coords c;
    dist::radius_home(parts[p], p, b.bounds, b.q(p, c), m, params, count_only, part_options[p],
                      threads_per_part, home[p]);
    if (sequential) parts[p].release();
    PartStats& st = tm.parts[p];
    st.home_queries = m;
    st.queries_forwarded = static_cast<std::int64_t>(home[p].forwarded.size());
    st.build_ms += home[p].build_ms;
    st.search_ms += home[p].search_ms;
  });
  tm.home_ms = ms_since(t_home);

  // 2. The forwarded queries in the parts their balls reach.
  const auto t_boundary = clock_type::now();
  std::vector<dist::RadiusRows> answers(static_cast<std::size_t>(np));
  std::vector<std::vector<std::int64_t>> from(static_cast<std::size_t>(np));
  dist::for_each(np, !sequential, [&](int t) {
    const dist::Packed xyz = gather_forwarded(
        b, t, [&](int p) -> const auto& { return home[p].to; }, from[t]);
    const std::int64_t m = xyz.size();
    PartStats& st = tm.parts[t];
    st.queries_received = m;
    const dist::Coords c = xyz.coords();
    dist::radius_in_part(parts[t], &c, m, params, count_only, part_options[t], threads_per_part,
                         answers[t], st.build_ms, st.search_ms);
    if (sequential && m > 0) parts[t].release();
  });

  // 3. The merge, and every row to its place in the CSR result.
  std::vector<const dist::RadiusRows*> ans;
  for (const dist::RadiusRows& a : answers) ans.push_back(&a);
  dist::for_each(np, !sequential, [&](int p) {
    std::vector<std::int64_t> first(static_cast<std::size_t>(np));
    for (int t = 0; t < np; ++t) first[t] = from[t][p];
    dist::merge_radius(home[p], ans, first, count_only);
    home[p].own = dist::RadiusRows();  // merged: the home rows are no longer needed
  });
  out.rows = b.rows;
  out.offsets.assign(static_cast<std::size_t>(b.rows) + 1, 0);
  for (int p = 0; p < np; ++p) {
    const dist::RadiusRows& h = home[p].merged;
    const std::vector<std::int32_t>& r = *b.out_rows[p];
    for (std::size_t j = 0; j < r.size(); ++j)
      out.offsets[r[j] + 1] = h.offsets[j + 1] - h.offsets[j];
  }
  for (std::int64_t r = 0; r < b.rows; ++r) out.offsets[r + 1] += out.offsets[r];
  out.indices.clear();
  out.sqdist.clear();
  if (!count_only) {
    out.indices.resize(static_cast<std::size_t>(out.offsets.back()));
    out.sqdist.resize(out.indices.size());
    dist::for_each(np, !sequential, [&](int p) {
      const dist::RadiusRows& h = home[p].merged;
      const std::vector<std::int32_t>& r = *b.out_rows[p];
      for (std::size_t j = 0; j < r.size(); ++j) {
        std::int64_t at = out.offsets[r[j]];
        for (std::int64_t e = h.offsets[j]; e < h.offsets[j + 1]; ++e, ++at) {
          out.indices[at] = h.idx[e];
          out.sqdist[at] = static_cast<float>(h.d[e]);
        }
      }
    });
  }
  tm.boundary_ms = ms_since(t_boundary);
  finish_timings(t_start);
}

namespace {

// An owning dense result of rows × k.
KnnResult dense_result(std::int64_t rows, int k) {
  PCNN_EXPECTS(k >= 1 && k <= kMaxK, "k must be between 1 and " + std::to_string(kMaxK));
  PCNN_EXPECTS(rows >= 0, "queries: negative count");
  KnnResult r;
  r.rows = rows;
  r.k = k;
  detail::resize_fresh(r.indices, static_cast<std::size_t>(rows) * k);
  detail::resize_fresh(r.sqdist, r.indices.size());
  return r;
}

MatrixView<std::int32_t> idx_view(KnnResult& r) { return {r.indices.data(), r.rows, r.k}; }
MatrixView<float> d_view(KnnResult& r) { return {r.sqdist.data(), r.rows, r.k}; }

std::int64_t copy_offsets(const RadiusResult& r, ArrayView<std::int64_t> offsets) {
  PCNN_EXPECTS(offsets.memory == Memory::host && offsets.size == r.rows + 1 && offsets.data,
               "offsets must be " + std::to_string(r.rows + 1) + " entries of host memory");
  std::copy(r.offsets.begin(), r.offsets.end(), offsets.data);
  return r.offsets.back();
}

}  // namespace

void PartitionedIndex::self_knn(const KnnParams& params, MatrixView<std::int32_t> indices,
                                MatrixView<float> sqdist) {
  impl().dense(nullptr, dist::DenseSearch::of(params), indices, sqdist);
}

KnnResult PartitionedIndex::self_knn(const KnnParams& params) {
  KnnResult r = dense_result(impl().n, params.k);
  self_knn(params, idx_view(r), d_view(r));
  return r;
}

void PartitionedIndex::knn(PointsView queries, const KnnParams& params,
                           MatrixView<std::int32_t> indices, MatrixView<float> sqdist) {
  impl().dense(&queries, dist::DenseSearch::of(params), indices, sqdist);
}

KnnResult PartitionedIndex::knn(PointsView queries, const KnnParams& params) {
  KnnResult r = dense_result(queries.count, params.k);
  knn(queries, params, idx_view(r), d_view(r));
  return r;
}

void PartitionedIndex::self_hybrid(const HybridParams& params, MatrixView<std::int32_t> indices,
                                   MatrixView<float> sqdist) {
  impl().dense(nullptr, dist::DenseSearch::of(params), indices, sqdist);
}

HybridResult PartitionedIndex::self_hybrid(const HybridParams& params) {
  HybridResult r{dense_result(impl().n, params.max_nn), {}};
  self_hybrid(params, idx_view(r.knn), d_view(r.knn));
  r.counts = row_counts(r.knn);
  return r;
}

void PartitionedIndex::hybrid(PointsView queries, const HybridParams& params,
                              MatrixView<std::int32_t> indices, MatrixView<float> sqdist) {
  impl().dense(&queries, dist::DenseSearch::of(params), indices, sqdist);
}

HybridResult PartitionedIndex::hybrid(PointsView queries, const HybridParams& params) {
  HybridResult r{dense_result(queries.count, params.max_nn), {}};
  hybrid(queries, params, idx_view(r.knn), d_view(r.knn));
  r.counts = row_counts(r.knn);
  return r;
}

std::vector<DeviceRows> PartitionedIndex::device_rows(std::int64_t rows) const {
  PCNN_EXPECTS(!impl().replicas.empty(),
               "rows kept on the devices need the replicated layout (CUDA devices, no tiles)");
  PCNN_EXPECTS(rows >= 0, "rows must be >= 0");
  std::vector<DeviceRows> out(impl().replicas.size());
  for (std::size_t d = 0; d < out.size(); ++d) {
    out[d].device = impl().options.devices[d];
    out[d].first_row = impl().share(rows, static_cast<int>(d));
    out[d].rows = impl().share(rows, static_cast<int>(d) + 1) - out[d].first_row;
  }
  return out;
}

void PartitionedIndex::self_knn_on_devices(const KnnParams& params,
                                           const std::vector<DeviceRows>& out) {
  impl().dense_on_devices(nullptr, dist::DenseSearch::of(params), out);
}

void PartitionedIndex::knn_on_devices(PointsView queries, const KnnParams& params,
                                      const std::vector<DeviceRows>& out) {
  impl().dense_on_devices(&queries, dist::DenseSearch::of(params), out);
}

void PartitionedIndex::self_hybrid_on_devices(const HybridParams& params,
                                              const std::vector<DeviceRows>& out) {
  impl().dense_on_devices(nullptr, dist::DenseSearch::of(params), out);
}

void PartitionedIndex::hybrid_on_devices(PointsView queries, const HybridParams& params,
                                         const std::vector<DeviceRows>& out) {
  impl().dense_on_devices(&queries, dist::DenseSearch::of(params), out);
}

std::int64_t PartitionedIndex::self_radius_count(const RadiusParams& params,
                                                 ArrayView<std::int64_t> offsets) {
  RadiusResult r;
  impl().radius(nullptr, params, true, r);
  return copy_offsets(r, offsets);
}

std::int64_t PartitionedIndex::radius_count(PointsView queries, const RadiusParams& params,
                                            ArrayView<std::int64_t> offsets) {
  RadiusResult r;
  impl().radius(&queries, params, true, r);
  return copy_offsets(r, offsets);
}

RadiusResult PartitionedIndex::self_radius(const RadiusParams& params) {
  RadiusResult r;
  impl().radius(nullptr, params, false, r);
  return r;
}

RadiusResult PartitionedIndex::radius(PointsView queries, const RadiusParams& params) {
  RadiusResult r;
  impl().radius(&queries, params, false, r);
  return r;
}

Layout parse_layout(const std::string& name) {
  if (name == "auto") return Layout::automatic;
  if (name == "spatial") return Layout::spatial;
  if (name == "replicated") return Layout::replicated;
  throw invalid_argument_error("--layout: '" + name + "' is not auto, spatial or replicated");
}

std::vector<int> parse_devices(const std::string& list, Backend backend) {
  if (list == "all") {
    if (backend == Backend::cpu) return {0};
    const int n = device_count();
    if (n == 0) throw no_device_error("--devices all: no CUDA device is present");
    std::vector<int> all(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) all[i] = i;
    return all;
  }
  std::vector<int> out;
  std::stringstream ss(list);
  for (std::string item; std::getline(ss, item, ',');) {
    std::size_t used = 0;
    int v = -1;
    try {
      v = std::stoi(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    PCNN_EXPECTS(used == item.size() && !item.empty() && v >= 0 && v < 4096,
                 "--devices: '" + list + "' is not 'all' or a list of device ordinals like 0,1");
    PCNN_EXPECTS(std::find(out.begin(), out.end(), v) == out.end() || backend == Backend::cpu,
                 "--devices: device " + std::to_string(v) + " listed twice");
    out.push_back(v);
  }
  PCNN_EXPECTS(!out.empty(), "--devices: empty list");
  return out;
}

}  // namespace pcnn
