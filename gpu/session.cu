// pcnn::KnnSession: staging modes, the chunked two-stream pipeline, and a device arena so that
// repeated calls allocate nothing.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include "detail/cuda_try.cuh"
#include "detail/device_buffer.cuh"
#include "detail/knn_to_host.cuh"
#include "detail/search.cuh"
#include "detail/spatial_index.cuh"
#include "detail/upload.cuh"
#include "pcnn/device.hpp"
#include "pcnn/error.hpp"
#include "pcnn/session.hpp"

namespace pcnn {

Staging parse_staging(const std::string& name) {
  if (name == "auto") return Staging::automatic;
  if (name == "pageable") return Staging::pageable;
  if (name == "pinned") return Staging::pinned;
  if (name == "registered") return Staging::registered;
  if (name == "mapped") return Staging::mapped;
  throw error("unknown staging '" + name + "' (auto, pageable, pinned, registered or mapped)");
}

const char* to_string(Staging staging) {
  switch (staging) {
    case Staging::automatic:
      return "auto";
    case Staging::pageable:
      return "pageable";
    case Staging::pinned:
      return "pinned";
    case Staging::registered:
      return "registered";
    case Staging::mapped:
      return "mapped";
  }
  return "?";
}

Staging resolve_staging(Staging staging, int ordinal) {
  if (staging != Staging::automatic) return staging;
  int integrated = 0, can_map = 0;
  PCNN_CUDA_TRY(cudaDeviceGetAttribute(&integrated, cudaDevAttrIntegrated, ordinal));
  PCNN_CUDA_TRY(cudaDeviceGetAttribute(&can_map, cudaDevAttrCanMapHostMemory, ordinal));
  return integrated && can_map ? Staging::mapped : Staging::pinned;
}

namespace {

using clock_type = std::chrono::steady_clock;

// Host-to-device staging of one cloud, by mode. The result is where kernels read the points:
// device memory, or (mapped) the device's address of page-locked host memory.
struct StagedPoints {
  detail::device_buffer<float> device;
  detail::pinned_buffer<float> host;
  explicit StagedPoints(bool mapped) : host(mapped) {}
};

}  // namespace

// For each chunk of `per` rows (by original query index), the last slot (curve order) holding
// one of its finite queries; counts the finite queries.
__global__ void last_slot_kernel(const float4* __restrict__ sorted, int n, std::int64_t per,
                                 int* __restrict__ last, int* __restrict__ finite) {
  const int s = blockIdx.x * blockDim.x + threadIdx.x;
  if (s >= n) return;
  const float4 q = sorted[s];
  if (!(isfinite(q.x) && isfinite(q.y) && isfinite(q.z))) return;
  atomicMax(last + __float_as_int(q.w) / per, s);
  atomicAdd(finite, 1);
}

// Rows of the non-finite queries (slots from `first` on): no neighbors.
__global__ void empty_rows_kernel(const float4* __restrict__ sorted, int first, int n, int k,
                                  std::int32_t* __restrict__ idx, float* __restrict__ dist) {
  const int s = first + blockIdx.x * blockDim.x + threadIdx.x;
  if (s >= n) return;
  const std::size_t row = static_cast<std::size_t>(__float_as_int(sorted[s].w)) * k;
  for (int j = 0; j < k; ++j) {
    idx[row + j] = -1;
    dist[row + j] = INFINITY;
  }
}

struct KnnSession::Impl {
  SessionOptions options;
  Staging staging;
  detail::DeviceArena arena;  // first: destroyed last, after every buffer taken from it
  cudaStream_t streams[2] = {nullptr, nullptr};
  StagedPoints refs, queries;
  PointsView refs_device;  // where kernels read the references (original order)
  detail::SpatialIndex index;
  bool indexed = false;
  detail::device_buffer<std::int32_t> d_idx[2];
  detail::device_buffer<float> d_dist[2];
  detail::pinned_buffer<std::int32_t> host_idx;  // pinned / mapped results
  detail::pinned_buffer<float> host_dist;
  std::vector<std::int32_t> page_idx;  // pageable / registered results
  std::vector<float> page_dist;
  detail::host_registration reg_idx, reg_dist;        // registered: page_idx / page_dist
  detail::pinned_buffer<std::int32_t> stream_idx[2];  // query_stream's chunk buffers
  detail::pinned_buffer<float> stream_dist[2];
  std::vector<std::int32_t> stream_page_idx[2];
  std::vector<float> stream_page_dist[2];
  std::size_t registered_cells = 0;

  explicit Impl(SessionOptions o)
      : options(o),
        staging(resolve_staging(o.staging)),
        refs(staging == Staging::mapped),
        queries(staging == Staging::mapped),
        host_idx(staging == Staging::mapped),
        host_dist(staging == Staging::mapped),
        stream_idx{detail::pinned_buffer<std::int32_t>(staging == Staging::mapped),
                   detail::pinned_buffer<std::int32_t>(staging == Staging::mapped)},
        stream_dist{detail::pinned_buffer<float>(staging == Staging::mapped),
                    detail::pinned_buffer<float>(staging == Staging::mapped)} {
    for (auto& s : streams) PCNN_CUDA_TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  }
  ~Impl() {
    for (auto s : streams)
      if (s) {
        PCNN_CUDA_TRY_NO_THROW(cudaStreamSynchronize(s));
        PCNN_CUDA_TRY_NO_THROW(cudaStreamDestroy(s));
      }
  }
  void sync() {
    for (auto s : streams) PCNN_CUDA_TRY(cudaStreamSynchronize(s));
  }

  void check(const PointsView* queries, KnnParams params) const {
    PCNN_EXPECTS(!(params.exclude_self && queries),
                 "exclude_self applies to a self-search only (no separate query set)");
    validate_knn_args({reinterpret_cast<const float*>(1), indexed ? index.n_total : 0, 3}, queries,
                      params);
  }

  // One query call inside the caller's ArenaScope: the search, then the arena's blocks made
  // reusable (after the streams are idle, on every path), and the call's timings.
  void call(const PointsView* queries, KnnParams params, std::int32_t* idx, float* dist,
            SessionTimings* timings) {
    const auto t0 = clock_type::now();
    SessionTimings t;
    t.staging = staging;
    try {
      run(queries, params, idx, dist, t);
    } catch (...) {
      sync();
      arena.end_call();
      throw;
    }
    arena.end_call();
    t.total_ms = std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
    if (timings) *timings = t;
  }

  // Stages `pts` for the device on streams[0]; returns the view kernels read. Records the
  // upload's events and bytes into `t`.
  PointsView stage(StagedPoints& sp, PointsView pts, SessionTimings& t) {
    const std::size_t floats = detail::span_floats(pts);
    const std::size_t bytes = floats * sizeof(float);
    t.upload_bytes += static_cast<std::int64_t>(bytes);
    if (floats == 0) return {nullptr, pts.count, pts.stride};
    cudaStream_t s = streams[0];
    detail::cuda_event start, done;
    const auto h0 = clock_type::now();
    const float* from = pts.data;
    float* to = nullptr;
    detail::host_registration reg;  // registered: for this copy only
    switch (staging) {
      case Staging::mapped:  // kernels read host memory; no transfer before them
        sp.host.ensure(floats);
        std::memcpy(sp.host.data(), pts.data, bytes);
        t.upload_bytes -= static_cast<std::int64_t>(bytes);
        t.host_staging_ms +=
            std::chrono::duration<double, std::milli>(clock_type::now() - h0).count();
        return {sp.host.device_data(), pts.count, pts.stride};
      case Staging::pinned:
        sp.host.ensure(floats);
        std::memcpy(sp.host.data(), pts.data, bytes);
        from = sp.host.data();
        break;
      case Staging::registered:
        reg = detail::host_registration(pts.data, bytes);
        break;
      default:
        break;
    }
    sp.device.resize(floats, s);
    to = sp.device.data();
    t.host_staging_ms += std::chrono::duration<double, std::milli>(clock_type::now() - h0).count();
    start.record(s);
    PCNN_CUDA_TRY(cudaMemcpyAsync(to, from, bytes, cudaMemcpyHostToDevice, s));
    done.record(s);
    PCNN_CUDA_TRY(cudaStreamSynchronize(s));  // before the registration (if any) ends
    t.upload_ms += done.since(start);
    return {to, pts.count, pts.stride};
  }

  // Where the results of `cells` entries land on the host for query(): the session's own
  // buffers of the mode's kind.
  void own_results(std::size_t cells) {
    if (staging == Staging::pinned || staging == Staging::mapped) {
      host_idx.ensure(cells);
      host_dist.ensure(cells);
      return;
    }
    if (page_idx.size() < cells) {
      if (staging == Staging::registered) {  // grow, then page-lock the new buffers once
        reg_idx = detail::host_registration();
        reg_dist = detail::host_registration();
      }
      page_idx.assign(cells, 0);
      page_dist.assign(cells, 0.f);
    }
    if (staging == Staging::registered && registered_cells < page_idx.size()) {
      reg_idx = detail::host_registration(page_idx.data(), page_idx.size() * sizeof(std::int32_t));
      reg_dist = detail::host_registration(page_dist.data(), page_dist.size() * sizeof(float));
      registered_cells = page_idx.size();
    }
  }

  // The search, results to `out_idx` / `out_dist` (host memory that is page-locked or mapped as
  // the mode needs). When every row fits on the device: passes over the queries in curve order
  // (the search's fastest order), rows by original index into one device buffer, and each chunk
  // of rows sent to the host, on the second stream, as soon as every query in it is searched —
  // early when the input's order is spatially coherent (scans), at the end when it is random.
  // Otherwise chunks of rows searched one after the other (run_chunks).
  void run(const PointsView* host_queries, KnnParams params, std::int32_t* out_idx, float* out_dist,
           SessionTimings& t) {
    PCNN_EXPECTS(indexed, "KnnSession: query before set_reference");
    const std::int64_t rows = host_queries ? host_queries->count : index.n_total;
    const int k = params.k;
    const bool mapped = staging == Staging::mapped;
    // Every row on the device at once, besides the sorted queries and the search's workspace?
    const std::int64_t working = detail::tree_working_bytes({nullptr, 0, 3}, host_queries, true);
    if (detail::plan_rows_per_pass(rows, mapped ? 1 : std::int64_t(k) * 8, working, 0,
                                   "a session query of " + std::to_string(rows) +
                                       " points with k = " + std::to_string(k)) != 0) {
      run_chunks(host_queries, params, out_idx, out_dist, t);
      return;
    }
    const PointsView q = host_queries ? stage(queries, *host_queries, t) : refs_device;
    if (rows == 0) return;
    cudaStream_t s0 = streams[0], s1 = streams[1];
    detail::device_buffer<float4> sorted_buf;
    if (host_queries)
      sorted_buf = detail::sort_queries(index, q.data, q.stride, static_cast<int>(rows), s0);
    const float4* sorted = host_queries ? sorted_buf.data() : index.points.data();
    std::int64_t per =
        options.chunk_rows > 0 ? options.chunk_rows : std::max<std::int64_t>(65536, (rows + 7) / 8);
    per = std::min(
        (per + detail::kTreeQueryBlock - 1) / detail::kTreeQueryBlock * detail::kTreeQueryBlock,
        rows);
    const int chunks = static_cast<int>((rows + per - 1) / per);
    const std::size_t cells = static_cast<std::size_t>(rows) * k;
    detail::device_buffer<std::int32_t> all_idx(mapped ? 0 : cells, s0);
    detail::device_buffer<float> all_dist(mapped ? 0 : cells, s0);
    std::int32_t* d_out_idx = mapped ? host_idx.device_data() : all_idx.data();
    float* d_out_dist = mapped ? host_dist.device_data() : all_dist.data();
    detail::device_buffer<int> last(chunks + 1, s0), outlier_slots(per, s0), outlier_count(1, s0);
    detail::device_buffer<unsigned long long> evals(1, s0);
    PCNN_CUDA_TRY(cudaMemsetAsync(last.data(), 0xff, last.bytes(), s0));  // -1
    PCNN_CUDA_TRY(cudaMemsetAsync(last.data() + chunks, 0, sizeof(int), s0));
    PCNN_CUDA_TRY(cudaMemsetAsync(evals.data(), 0, evals.bytes(), s0));
    const int blocks = static_cast<int>((rows + 255) / 256);
    last_slot_kernel<<<blocks, 256, 0, s0>>>(sorted, static_cast<int>(rows), per, last.data(),
                                             last.data() + chunks);
    PCNN_CHECK_LAUNCH();
    std::vector<int> last_host(chunks + 1);
    PCNN_CUDA_TRY(
        cudaMemcpyAsync(last_host.data(), last.data(), last.bytes(), cudaMemcpyDeviceToHost, s0));
    PCNN_CUDA_TRY(cudaStreamSynchronize(s0));
    const int finite = last_host[chunks];
    if (finite < rows) {
      empty_rows_kernel<<<blocks, 256, 0, s0>>>(sorted, finite, static_cast<int>(rows), k,
                                                d_out_idx, d_out_dist);
      PCNN_CHECK_LAUNCH();
    }
    const int passes = finite > 0 ? static_cast<int>((finite + per - 1) / per) : 0;
    std::vector<detail::cuda_event> pass_start(passes), pass_done(passes), dl_start(chunks),
        dl_done(chunks);
    auto download = [&](int j) {  // rows [j * per, ...) to the host, on s1
      const std::int64_t a = j * per, n = std::min(per, rows - a);
      dl_start[j].record(s1);
      PCNN_CUDA_TRY(cudaMemcpyAsync(out_idx + a * k, d_out_idx + a * k,
                                    n * k * sizeof(std::int32_t), cudaMemcpyDeviceToHost, s1));
      PCNN_CUDA_TRY(cudaMemcpyAsync(out_dist + a * k, d_out_dist + a * k, n * k * sizeof(float),
                                    cudaMemcpyDeviceToHost, s1));
      dl_done[j].record(s1);
    };
    std::vector<char> sent(chunks, 0);
    for (int p = 0; p < passes; ++p) {
      const int begin = static_cast<int>(p * per),
                end = static_cast<int>(std::min<std::int64_t>(finite, (p + 1) * per));
      pass_start[p].record(s0);
      detail::tree_search_range(index, sorted, host_queries == nullptr, begin, end, params,
                                d_out_idx, d_out_dist, outlier_slots.data(), outlier_count.data(),
                                evals.data(), s0);
      pass_done[p].record(s0);
      if (mapped) continue;
      bool waited = false;
      for (int j = 0; j < chunks; ++j)
        if (!sent[j] && (last_host[j] < end || p == passes - 1)) {
          if (!waited) PCNN_CUDA_TRY(cudaStreamWaitEvent(s1, pass_done[p].get(), 0));
          waited = true;
          download(j);
          sent[j] = 1;
        }
    }
    if (!mapped && passes == 0)  // nothing to search: the empty rows only
      for (int j = 0; j < chunks; ++j) {
        PCNN_CUDA_TRY(cudaStreamSynchronize(s0));
        download(j);
      }
    sync();
    for (int p = 0; p < passes; ++p) t.search_ms += pass_done[p].since(pass_start[p]);
    if (!mapped) {
      for (int j = 0; j < chunks; ++j) t.download_ms += dl_done[j].since(dl_start[j]);
      t.download_bytes += static_cast<std::int64_t>(cells) * 8;
    }
    t.chunks = chunks;
  }

  // Where chunk c (rows [a, a + n)) lands on the host; in mapped mode also the device's
  // address of that memory, which the search writes directly.
  struct ChunkTarget {
    std::int32_t* idx;
    float* dist;
    std::int32_t* mapped_idx = nullptr;
    float* mapped_dist = nullptr;
  };

  // The search in chunks of rows over the two streams: chunk c is searched on streams[c % 2]
  // into device buffer set c % 2 and copied to target(c, a, n) on the same stream, so chunk c + 1
  // is searched while chunk c downloads. done(c, a, n) is called, in order, once chunk c is in
  // host memory (at most two chunks are in flight). For results larger than the device memory
  // left, and for streaming.
  template <class Target, class Done>
  void run_chunks(const PointsView* host_queries, KnnParams params, Target target, Done done,
                  SessionTimings& t) {
    PCNN_EXPECTS(indexed, "KnnSession: query before set_reference");
    const std::int64_t rows = host_queries ? host_queries->count : index.n_total;
    const int k = params.k;
    PointsView q = host_queries ? stage(queries, *host_queries, t) : refs_device;
    if (rows == 0) return;
    const bool mapped = staging == Staging::mapped;
    const std::int64_t chunk = chunk_rows(rows, k);
    if (!mapped)
      for (int b = 0; b < 2; ++b) {
        d_idx[b].resize(static_cast<std::size_t>(chunk) * k, streams[b]);
        d_dist[b].resize(static_cast<std::size_t>(chunk) * k, streams[b]);
      }
    const int chunks = static_cast<int>((rows + chunk - 1) / chunk);
    std::vector<detail::cuda_event> ev(3 * chunks);
    auto finish = [&](int c) {
      PCNN_CUDA_TRY(cudaStreamSynchronize(streams[c % 2]));
      t.search_ms += ev[3 * c + 1].since(ev[3 * c]);
      t.download_ms += ev[3 * c + 2].since(ev[3 * c + 1]);
      done(c, c * chunk, std::min(chunk, rows - c * chunk));
    };
    for (int c = 0; c < chunks; ++c) {
      const std::int64_t a = c * chunk, n = std::min(chunk, rows - a);
      const int b = c % 2;
      cudaStream_t s = streams[b];
      const ChunkTarget to = target(c, a, n);
      const PointsView cq{q.data + a * q.stride, n, q.stride};
      detail::KnnOutput out;
      out.d_idx = mapped ? to.mapped_idx : d_idx[b].data();
      out.d_dist = mapped ? to.mapped_dist : d_dist[b].data();
      out.query_offset = static_cast<int>(a);
      detail::cuda_event built;
      ev[3 * c].record(s);
      detail::tree_query(index, &cq, params, detail::RadiusBound{}, out, s, built);
      ev[3 * c + 1].record(s);
      if (!mapped) {
        const std::size_t cells = static_cast<std::size_t>(n) * k;
        PCNN_CUDA_TRY(cudaMemcpyAsync(to.idx, d_idx[b].data(), cells * sizeof(std::int32_t),
                                      cudaMemcpyDeviceToHost, s));
        PCNN_CUDA_TRY(cudaMemcpyAsync(to.dist, d_dist[b].data(), cells * sizeof(float),
                                      cudaMemcpyDeviceToHost, s));
      }
      ev[3 * c + 2].record(s);
      if (c > 0) finish(c - 1);
    }
    finish(chunks - 1);
    if (!mapped) t.download_bytes += rows * k * 8;
    t.chunks = chunks;
  }

  // Into whole result arrays (`out_*`: host memory, page-locked or mapped as the mode needs).
  void run_chunks(const PointsView* host_queries, KnnParams params, std::int32_t* out_idx,
                  float* out_dist, SessionTimings& t) {
    const bool mapped = staging == Staging::mapped;
    std::int32_t* m_idx = mapped ? host_idx.device_data() : nullptr;
    float* m_dist = mapped ? host_dist.device_data() : nullptr;
    const int k = params.k;
    run_chunks(
        host_queries, params,
        [&](int, std::int64_t a, std::int64_t) {
          return ChunkTarget{out_idx + a * k, out_dist + a * k, mapped ? m_idx + a * k : nullptr,
                             mapped ? m_dist + a * k : nullptr};
        },
        [](int, std::int64_t, std::int64_t) {}, t);
  }

  // Rows per chunk: the option, or a quarter of the queries (at least 64k), within memory.
  std::int64_t chunk_rows(std::int64_t rows, int k) const {
    const bool mapped = staging == Staging::mapped;
    std::int64_t chunk =
        options.chunk_rows > 0 ? options.chunk_rows : std::max<std::int64_t>(65536, (rows + 3) / 4);
    chunk =
        (chunk + detail::kTreeQueryBlock - 1) / detail::kTreeQueryBlock * detail::kTreeQueryBlock;
    // Per row of a chunk: the two device buffer sets (none when mapped), and the search's
    // workspace for its query (sorted copy, key, sort buffers, outlier slot: 64 bytes).
    const std::int64_t per_row = (mapped ? 0 : 2 * std::int64_t(k) * 8) + 64;
    const std::int64_t memory_chunk = detail::plan_rows_per_pass(
        rows, per_row, std::int64_t(16) << 20, 0,
        "a session query of " + std::to_string(rows) + " points with k = " + std::to_string(k));
    if (memory_chunk > 0) chunk = std::min(chunk, memory_chunk);
    return std::min(chunk, rows);
  }
};

KnnSession::KnnSession(SessionOptions options) : impl_(std::make_unique<Impl>(options)) {}
KnnSession::~KnnSession() = default;
KnnSession::KnnSession(KnnSession&&) noexcept = default;
KnnSession& KnnSession::operator=(KnnSession&&) noexcept = default;

Staging KnnSession::staging() const { return impl_->staging; }
std::int64_t KnnSession::size() const { return impl_->indexed ? impl_->index.n_total : 0; }

void KnnSession::set_reference(PointsView refs, SessionTimings* timings) {
  PCNN_EXPECTS(impl_ != nullptr, "KnnSession: use of a moved-from session");
  validate_knn_args(refs, nullptr, {1, false});
  Impl& m = *impl_;
  const auto t0 = clock_type::now();
  SessionTimings t;
  t.staging = m.staging;
  detail::ArenaScope scope(&m.arena);
  m.sync();
  m.index = detail::SpatialIndex();  // its blocks are free again: nothing runs any more
  m.indexed = false;
  m.arena.end_call();
  m.refs_device = m.stage(m.refs, refs, t);
  detail::cuda_event start, built;
  start.record(m.streams[0]);
  m.index = detail::build_spatial_index(m.refs_device.data, refs.stride,
                                        static_cast<int>(refs.count), m.streams[0]);
  built.record(m.streams[0]);
  m.sync();
  m.indexed = true;
  m.arena.end_call();
  t.build_ms = built.since(start);
  t.total_ms = std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
  if (timings) *timings = t;
}

KnnView KnnSession::query(const PointsView* queries, KnnParams params, SessionTimings* timings) {
  PCNN_EXPECTS(impl_ != nullptr, "KnnSession: use of a moved-from session");
  Impl& m = *impl_;
  const std::int64_t rows = queries ? queries->count : size();
  m.check(queries, params);
  detail::ArenaScope scope(&m.arena);
  m.own_results(std::max<std::size_t>(static_cast<std::size_t>(rows) * params.k, 1));
  const bool page_locked = m.staging == Staging::pinned || m.staging == Staging::mapped;
  std::int32_t* idx = page_locked ? m.host_idx.data() : m.page_idx.data();
  float* dist = page_locked ? m.host_dist.data() : m.page_dist.data();
  m.call(queries, params, idx, dist, timings);
  return {rows, params.k, idx, dist};
}

void KnnSession::query_stream(const PointsView* queries, KnnParams params, const KnnSink& sink,
                              SessionTimings* timings) {
  PCNN_EXPECTS(impl_ != nullptr, "KnnSession: use of a moved-from session");
  Impl& m = *impl_;
  m.check(queries, params);
  detail::ArenaScope scope(&m.arena);
  const int k = params.k;
  // Two chunk-sized host buffers, alternating (page-locked; ordinary memory in pageable mode).
  const bool pageable = m.staging == Staging::pageable, mapped = m.staging == Staging::mapped;
  const std::int64_t rows = queries ? queries->count : size();
  // The loop's chunk size (it may choose smaller once the queries are on the device).
  const std::int64_t chunk = std::max<std::int64_t>(1, m.chunk_rows(rows, k));
  const std::size_t cells = static_cast<std::size_t>(chunk) * k;
  for (int b = 0; b < 2; ++b) {
    if (pageable) {
      if (m.stream_page_idx[b].size() < cells) {
        m.stream_page_idx[b].assign(cells, 0);
        m.stream_page_dist[b].assign(cells, 0.f);
      }
    } else {
      m.stream_idx[b].ensure(cells);
      m.stream_dist[b].ensure(cells);
    }
  }
  auto host_idx = [&](int b) {
    return pageable ? m.stream_page_idx[b].data() : m.stream_idx[b].data();
  };
  auto host_dist = [&](int b) {
    return pageable ? m.stream_page_dist[b].data() : m.stream_dist[b].data();
  };
  const auto t0 = clock_type::now();
  SessionTimings t;
  t.staging = m.staging;
  try {
    m.run_chunks(
        queries, params,
        [&](int c, std::int64_t, std::int64_t) {
          const int b = c % 2;
          return Impl::ChunkTarget{host_idx(b), host_dist(b),
                                   mapped ? m.stream_idx[b].device_data() : nullptr,
                                   mapped ? m.stream_dist[b].device_data() : nullptr};
        },
        [&](int c, std::int64_t a, std::int64_t n) {
          sink(a, KnnView{n, k, host_idx(c % 2), host_dist(c % 2)});
        },
        t);
  } catch (...) {
    m.sync();
    m.arena.end_call();
    throw;
  }
  m.arena.end_call();
  t.total_ms = std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
  if (timings) *timings = t;
}

void KnnSession::query_into(const PointsView* queries, KnnParams params, std::int32_t* indices,
                            float* sqdist, SessionTimings* timings) {
  PCNN_EXPECTS(impl_ != nullptr, "KnnSession: use of a moved-from session");
  Impl& m = *impl_;
  const std::int64_t rows = queries ? queries->count : size();
  const std::size_t cells = static_cast<std::size_t>(rows) * params.k;
  PCNN_EXPECTS(cells == 0 || (indices && sqdist), "KnnSession::query_into: null output buffers");
  if (m.staging == Staging::pinned || m.staging == Staging::mapped) {
    // Through the session's page-locked buffers, then one copy into the caller's.
    const KnnView v = query(queries, params, timings);
    std::memcpy(indices, v.indices, cells * sizeof(std::int32_t));
    std::memcpy(sqdist, v.sqdist, cells * sizeof(float));
    return;
  }
  m.check(queries, params);
  detail::ArenaScope scope(&m.arena);
  // Registered: the caller's buffers are page-locked for this call (released on every path).
  detail::host_registration reg_idx, reg_dist;
  if (m.staging == Staging::registered && cells > 0) {
    reg_idx = detail::host_registration(indices, cells * sizeof(std::int32_t));
    reg_dist = detail::host_registration(sqdist, cells * sizeof(float));
  }
  m.call(queries, params, indices, sqdist, timings);
}

}  // namespace pcnn
