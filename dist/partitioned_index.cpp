// PartitionedIndex: spatial parts of one cloud, each with its own index, searched at once (one
// thread per device) or one after the other (tiles larger than a device), merged exactly.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>
#include <sstream>
#include <string>

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

  void search(const PointsView* queries, const KnnParams& params, MatrixView<std::int32_t> out_idx,
              MatrixView<float> out_d);
  void build_replicas(PointsView points);
  void search_replicas(const PointsView* queries, const KnnParams& params,
                       MatrixView<std::int32_t> out_idx, MatrixView<float> out_d);
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

void PartitionedIndex::Impl::build_replicas(PointsView points) {
  const int nd = static_cast<int>(options.devices.size());
  replicas.resize(static_cast<std::size_t>(nd));
  built_ms.assign(static_cast<std::size_t>(nd), 0.0);
  // One after the other: indexes built at once from several threads on one device hung in the
  // driver (H100, driver 580); searching at once from several threads does not.
  dist::for_each(nd, false, [&](int d) {
    IndexOptions o = options.index;
    o.device = options.devices[static_cast<std::size_t>(d)];
    if (!o.memory && options.max_device_memory > 0)
      o.memory = make_limited_pool_resource(options.max_device_memory, o.device);
    const auto t = clock_type::now();
    replicas[d] = Index(points, o);
    built_ms[d] = ms_since(t);
  });
  timings.replicated = true;
}

// Each device's replica searches a contiguous share of the rows straight into its rows of the
// outputs, which are page-locked once for every device; the rows are those of one index.
void PartitionedIndex::Impl::search_replicas(const PointsView* queries, const KnnParams& params,
                                             MatrixView<std::int32_t> out_idx,
                                             MatrixView<float> out_d) {
  const int nd = static_cast<int>(replicas.size());
  const int k = params.k;
  const std::int64_t rows = out_idx.rows;
  const auto t_start = clock_type::now();
  timings = PartitionedTimings();
  timings.replicated = true;
  timings.parts.resize(static_cast<std::size_t>(nd));
  const std::size_t out_bytes = static_cast<std::size_t>(rows) * k * 4;
  std::optional<dist::PortableLock> lock_idx, lock_d, lock_q;  // released before the clock stops
  lock_idx.emplace(out_idx.data, out_bytes);
  lock_d.emplace(out_d.data, out_bytes);
  if (queries && queries->count > 0)
    lock_q.emplace(queries->address(),
                   static_cast<std::size_t>((queries->count - 1) * queries->stride + 3) *
                       queries->scalar_bytes());
  dist::for_each(nd, true, [&](int d) {
    const std::int64_t a = rows * d / nd, b = rows * (d + 1) / nd;
    PartStats& st = timings.parts[static_cast<std::size_t>(d)];
    st.device = options.devices[static_cast<std::size_t>(d)];
    st.points = replicas[d].size();
    st.home_queries = b - a;
    st.build_ms = built_ms[static_cast<std::size_t>(d)];
    const auto t = clock_type::now();
    const MatrixView<std::int32_t> iv{out_idx.data + a * k, b - a, k, out_idx.memory};
    const MatrixView<float> dv{out_d.data + a * k, b - a, k, out_d.memory};
    if (b > a) {
      if (queries)
        replicas[d].knn(queries->slice(a, b - a), params, iv, dv);
      else
        replicas[d].self_knn_rows(a, params, iv, dv);
    }
    st.search_ms = ms_since(t);
  });
  lock_q.reset();
  lock_d.reset();
  lock_idx.reset();
  for (const PartStats& st : timings.parts)
    timings.build_ms += st.build_ms;  // built one after the other
  timings.home_ms = ms_since(t_start);
  timings.total_ms = timings.home_ms + timings.build_ms;
}

PartitionedIndex::PartitionedIndex(PointsView points, PartitionedOptions options)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  PCNN_EXPECTS(points.memory == Memory::host, "a partitioned index takes points in host memory");
  PCNN_EXPECTS(points.count >= 0 && points.count <= INT32_MAX,
               "references: between 0 and 2^31-1 points");
  PCNN_EXPECTS(points.count == 0 || points.address() != nullptr, "references: null data");
  PCNN_EXPECTS(points.stride >= 3, "references: stride must be at least 3 floats");
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
  dist::require_float32(points, "references");
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
PartitionedIndex::PartitionedIndex(PartitionedIndex&&) noexcept = default;
PartitionedIndex& PartitionedIndex::operator=(PartitionedIndex&&) noexcept = default;

std::int64_t PartitionedIndex::size() const { return impl_->n; }
int PartitionedIndex::parts() const {
  return static_cast<int>(impl_->replicas.empty() ? impl_->parts.size() : impl_->replicas.size());
}
bool PartitionedIndex::replicated() const { return !impl_->replicas.empty(); }
const Partitioning& PartitionedIndex::partitioning() const { return impl_->partitioning; }
const PartitionedTimings& PartitionedIndex::last_timings() const { return impl_->timings; }

void PartitionedIndex::Impl::search(const PointsView* queries, const KnnParams& params,
                                    MatrixView<std::int32_t> out_idx, MatrixView<float> out_d) {
  const int np = static_cast<int>(parts.size());
  const int k = params.k;
  PCNN_EXPECTS(k >= 1 && k <= kMaxK,
               "k must be between 1 and " + std::to_string(kMaxK) + ", got " + std::to_string(k));
  PCNN_EXPECTS(!(params.exclude_self && queries),
               "exclude_self applies to a self-search only (no separate query set)");
  const std::int64_t rows = queries ? queries->count : n;
  if (queries) {
    PCNN_EXPECTS(queries->memory == Memory::host, "queries must be in host memory");
    if (replicas.empty()) dist::require_float32(*queries, "queries");
    PCNN_EXPECTS(queries->count >= 0 && queries->count <= INT32_MAX &&
                     (queries->count == 0 || queries->address()) && queries->stride >= 3,
                 "queries: invalid view");
  }
  PCNN_EXPECTS(out_idx.memory == Memory::host && out_d.memory == Memory::host,
               "a partitioned index writes host memory");
  PCNN_EXPECTS(out_idx.rows == rows && out_idx.cols == k && out_d.rows == rows && out_d.cols == k &&
                   (rows == 0 || (out_idx.data && out_d.data)),
               "outputs must be " + std::to_string(rows) + " x " + std::to_string(k));
  if (!replicas.empty()) return search_replicas(queries, params, out_idx, out_d);
  const auto t_start = clock_type::now();
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

  // The home batches (output rows and coordinates): a self-search's are the parts' own points.
  std::vector<std::vector<std::int64_t>> out_rows(static_cast<std::size_t>(np));
  std::vector<std::vector<float>> qxyz(static_cast<std::size_t>(np));
  if (queries) {
    for (std::int64_t r = 0; r < rows; ++r) {
      const float* q = queries->data + r * queries->stride;
      const int p = partitioning.home_of(q);
      out_rows[p].push_back(r);
      qxyz[p].insert(qxyz[p].end(), q, q + 3);
    }
  } else {
    for (int p = 0; p < np; ++p) out_rows[p].assign(parts[p].ids.begin(), parts[p].ids.end());
  }
  auto q_of = [&](int p) { return queries ? qxyz[p].data() : parts[p].xyz.data(); };
  std::vector<dist::Bounds> bounds;
  for (const dist::Part& part : parts) bounds.push_back(part.bounds);

  // 1. Every query in its home part; rows that no other part can change are final.
  const auto t_home = clock_type::now();
  std::vector<dist::HomeRows> home(static_cast<std::size_t>(np));
  dist::for_each(np, !sequential, [&](int p) {
    const std::int64_t m = static_cast<std::int64_t>(out_rows[p].size());
    const bool on_device = part_options[p].backend == Backend::cuda &&
                           options.max_device_memory == 0 && !options.index.memory;
    dist::search_home(parts[p], p, bounds, queries ? qxyz[p].data() : nullptr, m, params,
                      part_options[p], threads_per_part, on_device, home[p]);
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
    std::vector<float> xyz;
    from[t].assign(static_cast<std::size_t>(np) + 1, 0);
    for (int p = 0; p < np; ++p) {
      from[t][p] = static_cast<std::int64_t>(xyz.size() / 3);
      for (std::int32_t j : home[p].to[t])
        xyz.insert(xyz.end(), q_of(p) + 3 * j, q_of(p) + 3 * j + 3);
    }
    const std::int64_t m = static_cast<std::int64_t>(xyz.size() / 3);
    from[t][np] = m;
    PartStats& st = tm.parts[t];
    st.queries_received = m;
    dist::answer(parts[t], xyz.data(), m, k, part_options[t], answers[t], st.build_ms,
                 st.search_ms);
    if (sequential && m > 0) parts[t].release();
  });

  // 3. The merge on exact distances, and every row to its place.
  dist::for_each(np, !sequential, [&](int p) {
    dist::HomeRows& h = home[p];
    for (int t = 0; t < np; ++t) {
      const std::size_t at = static_cast<std::size_t>(from[t][p]) * k;
      if (!h.to[t].empty()) dist::add_answers(h, t, &answers[t].d[at], &answers[t].idx[at], k);
    }
    dist::finish_merge(h, k);
    const std::vector<std::int64_t>& r = out_rows[p];
    dist::parallel_for(h.rows, threads_per_part, [&](std::int64_t a, std::int64_t e) {
      for (std::int64_t j = a; j < e; ++j) {
        std::copy(&h.idx[j * k], &h.idx[j * k] + k, out_idx.data + r[j] * k);
        std::copy(&h.d[j * k], &h.d[j * k] + k, out_d.data + r[j] * k);
      }
    });
  });
  tm.boundary_ms = ms_since(t_boundary);
  for (const PartStats& s : tm.parts) {
    tm.queries_forwarded += s.queries_forwarded;
    tm.build_ms = sequential || options.index.backend == Backend::cuda  // built in turn
                      ? tm.build_ms + s.build_ms
                      : std::max(tm.build_ms, s.build_ms);
  }
  // Parts built at construction count as part of the build + search total.
  tm.total_ms = ms_since(t_start) + (sequential ? 0.0 : tm.build_ms);
}

void PartitionedIndex::self_knn(const KnnParams& params, MatrixView<std::int32_t> indices,
                                MatrixView<float> sqdist) {
  impl_->search(nullptr, params, indices, sqdist);
}

KnnResult PartitionedIndex::self_knn(const KnnParams& params) {
  KnnResult r;
  r.rows = impl_->n;
  r.k = params.k;
  PCNN_EXPECTS(params.k >= 1 && params.k <= kMaxK, "k must be between 1 and 128");
  r.indices.resize(static_cast<std::size_t>(r.rows) * r.k);
  r.sqdist.resize(r.indices.size());
  self_knn(params, {r.indices.data(), r.rows, r.k}, {r.sqdist.data(), r.rows, r.k});
  return r;
}

void PartitionedIndex::knn(PointsView queries, const KnnParams& params,
                           MatrixView<std::int32_t> indices, MatrixView<float> sqdist) {
  impl_->search(&queries, params, indices, sqdist);
}

KnnResult PartitionedIndex::knn(PointsView queries, const KnnParams& params) {
  KnnResult r;
  r.rows = queries.count;
  r.k = params.k;
  PCNN_EXPECTS(params.k >= 1 && params.k <= kMaxK, "k must be between 1 and 128");
  PCNN_EXPECTS(queries.count >= 0, "queries: negative count");
  r.indices.resize(static_cast<std::size_t>(r.rows) * r.k);
  r.sqdist.resize(r.indices.size());
  knn(queries, params, {r.indices.data(), r.rows, r.k}, {r.sqdist.data(), r.rows, r.k});
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
