// The CUDA backend of pcnn::Index: the spatial index on the device, host points staged by the
// index's transfer policy, results written into the caller's device memory in place or brought to
// the caller's host memory with the download overlapping the search, and every allocation from the
// index's workspace (so a frame loop of equal sizes allocates nothing after its first frame).
#include <cuda/cmath>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/backend.hpp"
#include "core/parallel_copy.hpp"
#include "detail/cuda_try.cuh"
#include "detail/device_buffer.cuh"
#include "detail/device_scope.cuh"
#include "detail/normals.cuh"
#include "detail/per_device.cuh"
#include "detail/plan.cuh"
#include "detail/radius_bound.cuh"
#include "detail/search.cuh"
#include "detail/spatial_index.cuh"
#include "detail/upload.cuh"
#include "detail/warp_reduce.cuh"
#include "pcnn/device.hpp"
#include "pcnn/error.hpp"

namespace pcnn {
namespace {

using clock_type = std::chrono::steady_clock;

double ms_since(clock_type::time_point t0) {
  return std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
}

bool device_is_integrated(int ordinal) {
  int integrated = 0;
  PCNN_CUDA_TRY(cudaDeviceGetAttribute(&integrated, cudaDevAttrIntegrated, ordinal));
  return integrated != 0;
}

// `automatic` stays automatic on a discrete GPU (chosen per transfer, see staging_for), and
// becomes mapped on an integrated one (Jetson), where host memory is the device's.
Staging resolve_staging(Staging staging, int ordinal) {
  if (staging != Staging::automatic) return staging;
  int can_map = 0;
  PCNN_CUDA_TRY(cudaDeviceGetAttribute(&can_map, cudaDevAttrCanMapHostMemory, ordinal));
  return device_is_integrated(ordinal) && can_map ? Staging::mapped : Staging::automatic;
}

// Pinned staging of more than two chunks goes through them (detail::upload_through_chunks).
constexpr std::size_t kStageChunkWords = detail::kUploadChunkBytes / sizeof(float);

// How `automatic` moves `bytes` of pageable host memory on a discrete GPU: through the index's
// page-locked buffer (one host copy; cheapest for small transfers), or by page-locking the
// caller's memory for the call (no host copy; cheapest above a few MB, where the copy costs more
// than the registration — bench/results/2026-11-22-staging-h200.md). Uploads through the chunks
// were faster for an index built again and again (1.2 GB: 57-76 against 99-123 ms), slower in a
// one-shot command (their first page-locked allocation): bench/results/2026-11-27-round12.md.
constexpr std::size_t kRegisterFrom = std::size_t{8} << 20;

Staging staging_for(Staging staging, std::size_t bytes) {
  if (staging != Staging::automatic) return staging;
  return bytes >= kRegisterFrom ? Staging::registered : Staging::pinned;
}

}  // namespace

// Slots a block of last_slot_kernel covers (8 a thread), and the chunks whose last slots it
// gathers in shared memory (16 KB; more chunks, from a small IndexOptions::chunk_rows, go to
// global memory a warp at a time).
constexpr int kLastSlotThreads = 256, kLastSlotSpan = 8 * kLastSlotThreads;
constexpr int kLastSlotSharedChunks = 4096;

// For each chunk of `per` rows (by original query index), the last slot (curve order) holding
// one of its finite queries; counts the finite queries. The atomics go to a handful of
// addresses (one per chunk), so a block gathers its own first and makes one a chunk it holds and
// one for the count: one a warp took 50 us for 1M queries (ncu, H200), the atomics on each
// address waiting on each other (bench/results/2026-11-29-round24.md).
__global__ void __launch_bounds__(kLastSlotThreads)
    last_slot_kernel(const float4* __restrict__ sorted, int n, std::int64_t per, int chunks,
                     int* __restrict__ last, int* __restrict__ finite) {
  __shared__ int block_last[kLastSlotSharedChunks];
  const int held = min(chunks, kLastSlotSharedChunks);
  for (int c = threadIdx.x; c < held; c += kLastSlotThreads) block_last[c] = -1;
  __syncthreads();
  const int lane = threadIdx.x & 31;
  const std::int64_t begin = std::int64_t(blockIdx.x) * kLastSlotSpan;
  int count = 0;
#pragma unroll
  for (int i = 0; i < kLastSlotSpan / kLastSlotThreads; ++i) {  // whole warps: lanes past n too
    const std::int64_t s = begin + i * kLastSlotThreads + threadIdx.x;
    bool ok = false;
    int chunk = -1;
    if (s < n) {
      const float4 q = sorted[s];
      ok = isfinite(q.x) && isfinite(q.y) && isfinite(q.z);
      if (ok) chunk = static_cast<int>(__float_as_int(q.w) / per);
    }
    count += ok;
    // Slots grow with the lane: the highest lane of those sharing a chunk holds their largest.
    const unsigned same = __match_any_sync(0xffffffffu, chunk);
    if (ok && lane == 31 - __clz(same))
      atomicMax(chunk < held ? block_last + chunk : last + chunk, static_cast<int>(s));
  }
  count = detail::block_combine(count, detail::SumOp{}, 0);  // also orders the writes above
  if (threadIdx.x == 0 && count) atomicAdd(finite, count);
  for (int c = threadIdx.x; c < held; c += kLastSlotThreads)
    if (block_last[c] >= 0) atomicMax(last + c, block_last[c]);
}

// A double's bits mapped so that unsigned order is the doubles' order (for atomics).
__device__ __forceinline__ unsigned long long ordered_bits(double v) {
  const auto b = static_cast<unsigned long long>(__double_as_longlong(v));
  return (b >> 63) ? ~b : b | (1ull << 63);
}
double from_ordered_bits(unsigned long long u) {
  const unsigned long long b = (u >> 63) ? u & ~(1ull << 63) : ~u;
  double v;
  std::memcpy(&v, &b, sizeof v);
  return v;
}

// The bounding box of the finite float64 points (float32 ones take theirs from the build): per
// axis the smallest coordinate (box[0..2]) and the largest (box[3..5]), as ordered bits; box
// starts at (max, 0). One atomic per block and bound (detail::block_combine).
__global__ void extent_kernel(const double* __restrict__ xyz, std::int64_t stride, int n,
                              unsigned long long* __restrict__ box) {
  double lo[3] = {INFINITY, INFINITY, INFINITY}, hi[3] = {-INFINITY, -INFINITY, -INFINITY};
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    const double* p = xyz + static_cast<std::int64_t>(i) * stride;
    if (!(isfinite(p[0]) && isfinite(p[1]) && isfinite(p[2]))) continue;
    for (int a = 0; a < 3; ++a) {
      lo[a] = fmin(lo[a], p[a]);
      hi[a] = fmax(hi[a], p[a]);
    }
  }
  for (int a = 0; a < 3; ++a) {
    const unsigned long long l = detail::block_combine(ordered_bits(lo[a]), detail::MinOp{}, ~0ull);
    const unsigned long long h = detail::block_combine(ordered_bits(hi[a]), detail::MaxOp{}, 0ull);
    if (threadIdx.x == 0) {
      atomicMin(box + a, l);
      atomicMax(box + 3 + a, h);
    }
  }
}

// The float search's coordinates, packed: float((x - origin) * 2^scale_exp), computed in double
// and rounded once (exact for float32 input with a zero origin, unless a value underflows).
// flags[0]: a finite coordinate whose filter value is not finite; flags[1]: the largest
// magnitude of a filter value (as int bits: non-negative floats order as ints).
template <class T>
__global__ void filter_kernel(const T* __restrict__ xyz, std::int64_t stride, int n, double3 origin,
                              int scale_exp, float* __restrict__ out, int* __restrict__ flags) {
  int largest = 0, overflow = 0;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    const T* p = xyz + static_cast<std::int64_t>(i) * stride;
    const double o[3] = {origin.x, origin.y, origin.z};
    for (int a = 0; a < 3; ++a) {
      const double v = double(p[a]);
      const float f = __double2float_rn(ldexp(__dsub_rn(v, o[a]), scale_exp));
      if (isfinite(v) && !isfinite(f)) overflow = 1;
      if (isfinite(f)) largest = max(largest, __float_as_int(fabsf(f)));
      out[3 * static_cast<std::int64_t>(i) + a] = f;
    }
  }
  for (int o = 16; o > 0; o >>= 1) {
    largest = max(largest, __shfl_xor_sync(0xffffffffu, largest, o));
    overflow |= __shfl_xor_sync(0xffffffffu, overflow, o);
  }
  if ((threadIdx.x & 31) == 0) {
    if (overflow) flags[0] = 1;
    atomicMax(flags + 1, largest);
  }
}

// Rows of the non-finite queries (slots [first, n)): no neighbors. Into `idx` / `dist` by
// original index, or with `shares` (count > 0) into the share holding the row.
__global__ void empty_rows_kernel(const float4* __restrict__ sorted, int first, int n, int k,
                                  std::int32_t* idx, float* dist, detail::RowShares shares) {
  const int s = first + blockIdx.x * blockDim.x + threadIdx.x;
  if (s >= n) return;
  const int row = __float_as_int(sorted[s].w);
  if (shares.count > 0) {
    shares.at(row, k, idx, dist);
  } else {
    idx += static_cast<std::size_t>(row) * k;
    dist += static_cast<std::size_t>(row) * k;
  }
  for (int j = 0; j < k; ++j) {
    idx[j] = -1;
    dist[j] = INFINITY;
  }
}

// Counts the sampled pairs (i, i + 1) of positions below `pairs` + 1 whose original indices
// fall in different shares (CudaBackend::order_breaks).
__global__ void order_breaks_kernel(const float4* __restrict__ sorted, std::int64_t pairs,
                                    std::int64_t samples, detail::RowShares shares,
                                    unsigned long long* breaks) {
  unsigned int own = 0;
  for (std::int64_t j = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; j < samples;
       j += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int64_t i = j * pairs / samples;
    own +=
        shares.owner(__float_as_int(sorted[i].w)) != shares.owner(__float_as_int(sorted[i + 1].w));
  }
  for (int o = 16; o > 0; o /= 2) own += __shfl_down_sync(0xffffffffu, own, o);
  if ((threadIdx.x & 31) == 0 && own) atomicAdd(breaks, static_cast<unsigned long long>(own));
}

namespace {

class CudaBackend final : public Index::Backend_ {
 public:
  explicit CudaBackend(const IndexOptions& o)
      : options_(o),
        upstream_(o.memory ? o.memory : make_pool_resource(o.device)),
        ws_(upstream_),
        staging_(resolve_staging(o.staging, o.device)),
        mapped_(staging_ == Staging::mapped),
        integrated_(device_is_integrated(o.device)),
        refs_host_(mapped_, &ws_.host),
        queries_host_(mapped_, &ws_.host),
        idx_host_(mapped_, &ws_.host),
        dist_host_(mapped_, &ws_.host) {
    detail::DeviceScope guard(o.device);
    PCNN_CUDA_TRY(cudaDeviceGetAttribute(&sms_, cudaDevAttrMultiProcessorCount, o.device));
    PCNN_CUDA_TRY(cudaStreamCreateWithFlags(&aux_, cudaStreamNonBlocking));
    PCNN_CUDA_TRY(cudaStreamCreateWithFlags(&copy_, cudaStreamNonBlocking));
    SearchTimings t;
    build(PointsView{}, aux_, t);  // an empty index until the first build: searches find nothing
  }
  ~CudaBackend() override {
    if (!aux_) return;
    // On the index's device (without throwing: a destructor), whichever thread destroys it.
    const detail::DeviceScope on(options_.device, std::nothrow);
    PCNN_CUDA_TRY_NO_THROW(cudaEventSynchronize(async_done_.get()));  // _async work on any stream
    PCNN_CUDA_TRY_NO_THROW(cudaStreamSynchronize(aux_));
    PCNN_CUDA_TRY_NO_THROW(cudaStreamDestroy(aux_));
    PCNN_CUDA_TRY_NO_THROW(cudaStreamSynchronize(copy_));
    PCNN_CUDA_TRY_NO_THROW(cudaStreamDestroy(copy_));
  }

  Backend kind() const override { return Backend::cuda; }
  std::int64_t size() const override { return index_.n_total; }
  std::int64_t finite_size() const override { return index_.n; }

  IndexMemoryStats memory_stats() const override {
    IndexMemoryStats s;
    s.device = ws_.stats();
    s.device_allocations = s.device.allocations;
    s.pinned_allocations = ws_.host.pinned.load();
    s.registrations = ws_.host.registrations.load();
    s.registered_now = ws_.host.registered_now.load();
    return s;
  }

  void build(PointsView points, cudaStream_t stream, SearchTimings& t) override {
    detail::DeviceScope guard(options_.device);
    const auto t0 = clock_type::now();
    t = start_timings();
    // Wait for whatever still runs on this index (the last _async call, on whichever stream, and
    // this stream): then every block of the old index is free for the new one, on any stream.
    PCNN_CUDA_TRY(cudaEventSynchronize(async_done_.get()));
    PCNN_CUDA_TRY(cudaStreamSynchronize(stream));
    index_ = detail::SpatialIndex();
    exact_ = detail::device_buffer<float>();
    exact_view_ = PointsView{};
    ws_.end_all();
    try {
      ev_[0].record(stream);
      detail::device_buffer<float> raw;
      const PointsView d = stage(points, raw, refs_host_, stream, t);
      ev_[1].record(stream);
      const detail::ExactCoords exact{d.data, d.data64, d.stride};
      detail::device_buffer<float> scaled;
      auto index_filter = [&] {
        const Filter f = filter_of(d, scaled, stream);
        refs_perturbation_ = f.perturbation;
        refs_as_given_ = f.as_given;
        index_ = detail::build_spatial_index(f.view.data, f.view.stride,
                                             static_cast<int>(f.view.count), exact, stream, ws_);
      };
      if (d.is_double()) {
        choose_frame_f64(d, stream);
        index_filter();
      } else {
        // Float points are searched as they are unless their magnitudes call for a scale: the
        // build's own bounds tell, read at its one round trip, rather than a pass over the
        // points and a round trip of their own before it (~20 us a build). Where they do (rare:
        // magnitudes outside [2^-40, 2^40]), the index is built again on the scaled filter.
        origin_ = {0, 0, 0};
        scale_exp_ = 0;
        index_filter();
        const float* b = index_.host_bounds;
        set_frame({b[0], b[1], b[2]}, {b[3], b[4], b[5]}, false);
        if (scale_exp_ != 0) {
          index_ = detail::SpatialIndex();
          index_filter();
        }
      }
      ev_[2].record(stream);
      // The coordinates as given, kept for the exact refinement and for searches of a range of
      // the indexed points: the staged copy, or a copy of the caller's device memory.
      if (points.memory == Memory::device && d.count > 0) {
        exact_.resize(detail::span_words(d), stream, ws_);
        PCNN_CUDA_TRY(cudaMemcpyAsync(exact_.data(), d.address(), exact_.bytes(),
                                      cudaMemcpyDeviceToDevice, stream));
        exact_view_ = detail::moved_to_device(d, exact_.data());
      } else if (raw.size() > 0) {
        exact_ = std::move(raw);
        exact_view_ = detail::moved_to_device(d, exact_.data());
      } else {
        exact_view_ = d;  // mapped: the index's own page-locked copy, kept until the next build
      }
      PCNN_CUDA_TRY(cudaStreamSynchronize(stream));
    } catch (...) {
      index_ = detail::SpatialIndex();
      abandon_call(stream);
      throw;
    }
    exact_.detach_stream();  // outlives the caller's stream
    t.upload_ms = ev_[1].since(ev_[0]);
    t.build_ms = ev_[2].since(ev_[1]);
    finish_sync_call(stream, t, t0);
  }

  void knn(const PointsView* queries, std::int64_t first_row, const KnnParams& params,
           MatrixView<std::int32_t> indices, MatrixView<float> sqdist, cudaStream_t stream,
           bool sync, SearchTimings& t) override {
    if (queries || (first_row == 0 && indices.rows == index_.n_total)) {
      dense(queries, 0, params, INFINITY, indices, sqdist, stream, sync, t);
      return;
    }
    // Part of the self-search: those indexed points as a separate query set, each still
    // excluding itself (query i is indexed point first_row + i).
    const PointsView rows = self_rows(first_row, indices.rows);
    dense(&rows, static_cast<int>(first_row), params, INFINITY, indices, sqdist, stream, sync, t);
  }

  void hybrid(const PointsView* queries, std::int64_t first_row, const HybridParams& params,
              MatrixView<std::int32_t> indices, MatrixView<float> sqdist, cudaStream_t stream,
              SearchTimings& t) override {
    const KnnParams kp{params.max_nn, params.exclude_self, params.max_rows_per_pass};
    if (queries || (first_row == 0 && indices.rows == index_.n_total)) {
      dense(queries, 0, kp, params.radius, indices, sqdist, stream, true, t);
      return;
    }
    const PointsView rows = self_rows(first_row, indices.rows);
    dense(&rows, static_cast<int>(first_row), kp, params.radius, indices, sqdist, stream, true, t);
  }

  void self_dense_positions(std::int64_t begin, std::int64_t end, const KnnParams& params,
                            double radius, const detail::RowShares& to, cudaStream_t stream,
                            SearchTimings& timings) override {
    PCNN_EXPECTS(begin >= 0 && begin <= end && end <= index_.n_total && to.count > 0,
                 "self_dense_positions: positions out of range or no shares");
    detail::DeviceScope guard(options_.device);
    const auto t0 = clock_type::now();
    SearchTimings t = start_timings();
    try {
      const StagedQueries sq;  // a self-search: nothing to stage
      const detail::ExactSearch ex = exact_search(sq);
      const detail::RadiusBound bound = detail::make_radius_bound(radius, ex);
      const float4* sorted = index_.points.data();
      // Finite points first, non-finite ones (empty rows) after them.
      const std::int64_t finite = std::clamp<std::int64_t>(index_.n, begin, end);
      if (end > finite) {
        empty_rows_kernel<<<static_cast<int>(cuda::ceil_div(end - finite, 256)), 256, 0, stream>>>(
            sorted, static_cast<int>(finite), static_cast<int>(end), params.k, nullptr, nullptr,
            to);
        PCNN_CHECK_LAUNCH();
      }
      const std::int64_t per = std::max<std::int64_t>(1, pass_rows(finite - begin));
      detail::device_buffer<int> outliers(detail::tree_outlier_ints(per), stream, ws_);
      detail::device_buffer<unsigned long long> evals(2, stream, ws_);
      PCNN_CUDA_TRY(cudaMemsetAsync(evals.data(), 0, evals.bytes(), stream));
      ev_[2].record(stream);
      for (std::int64_t p = begin; p < finite; p += per)
        detail::tree_search_range(index_, sorted, true, static_cast<int>(p),
                                  static_cast<int>(std::min(finite, p + per)), params, bound,
                                  nullptr, nullptr, outliers.data(), evals.data(), 0, ex, stream,
                                  ws_, &to);
      ev_[3].record(stream);
      read_counts(evals, stream, t);
      t.search_ms = ev_[3].since(ev_[2]);
    } catch (...) {
      abandon_call(stream);
      throw;
    }
    finish_sync_call(stream, t, t0);
    timings = t;
  }

  double order_breaks(const detail::RowShares& shares, cudaStream_t stream) override {
    PCNN_EXPECTS(shares.count > 0, "order_breaks: no shares");
    const std::int64_t pairs = index_.n - 1;
    if (pairs <= 0) return 0.0;
    detail::DeviceScope guard(options_.device);
    const std::int64_t samples = std::min<std::int64_t>(pairs, std::int64_t(1) << 20);
    detail::device_buffer<unsigned long long> breaks(1, stream, ws_);
    PCNN_CUDA_TRY(cudaMemsetAsync(breaks.data(), 0, breaks.bytes(), stream));
    order_breaks_kernel<<<static_cast<int>(cuda::ceil_div(samples, std::int64_t(1024))), 256, 0,
                          stream>>>(index_.points.data(), pairs, samples, shares, breaks.data());
    PCNN_CHECK_LAUNCH();
    unsigned long long count = 0;
    PCNN_CUDA_TRY(
        cudaMemcpyAsync(&count, breaks.data(), sizeof count, cudaMemcpyDeviceToHost, stream));
    PCNN_CUDA_TRY(cudaStreamSynchronize(stream));
    return static_cast<double>(count) / static_cast<double>(samples);
  }

  std::int64_t original_index_at(std::int64_t pos) override {
    PCNN_EXPECTS(pos >= 0 && pos < index_.n_total, "original_index_at: position out of range");
    detail::DeviceScope guard(options_.device);
    float4 p;
    PCNN_CUDA_TRY(cudaMemcpy(&p, index_.points.data() + pos, sizeof p, cudaMemcpyDeviceToHost));
    std::int32_t id;
    std::memcpy(&id, &p.w, sizeof id);
    return id;
  }

  RadiusResult radius(const PointsView* queries, const RadiusParams& params, cudaStream_t stream,
                      SearchTimings& t) override {
    detail::DeviceScope guard(options_.device);
    const auto t0 = clock_type::now();
    t = start_timings();
    const std::int64_t rows = queries ? queries->count : index_.n_total;
    RadiusResult result;
    result.rows = rows;
    result.offsets.assign(1, 0);
    if (rows == 0) return result;
    try {
      StagedQueries sq;
      stage_radius_queries(queries, rows, sq, stream, t);
      result = detail::radius_query(index_, sq.search_view(), params, &t, stream, ev_[0], ev_[1],
                                    exact_search(sq), ws_);
    } catch (...) {
      abandon_call(stream);
      throw;
    }
    finish_sync_call(stream, t, t0);
    return result;
  }

  std::int64_t radius_count(const PointsView* queries, const RadiusParams& params,
                            ArrayView<std::int64_t> offsets, cudaStream_t stream,
                            SearchTimings& t) override {
    detail::DeviceScope guard(options_.device);
    const auto t0 = clock_type::now();
    t = start_timings();
    const std::int64_t rows = queries ? queries->count : index_.n_total;
    std::vector<std::int64_t> host;
    std::int64_t* h_offsets = offsets.data;
    if (offsets.memory == Memory::device) {
      check_device_pointer(offsets.data, "offsets");
      host.resize(static_cast<std::size_t>(rows) + 1);
      h_offsets = host.data();
    }
    std::int64_t total = 0;
    try {
      StagedQueries sq;
      stage_radius_queries(queries, rows, sq, stream, t);
      total = detail::radius_count_query(index_, sq.search_view(), params, h_offsets, &t, stream,
                                         ev_[0], ev_[1], exact_search(sq), ws_);
      if (!host.empty())
        PCNN_CUDA_TRY(cudaMemcpy(offsets.data, host.data(), host.size() * sizeof(std::int64_t),
                                 cudaMemcpyHostToDevice));
    } catch (...) {
      abandon_call(stream);
      throw;
    }
    finish_sync_call(stream, t, t0);
    return total;
  }

  void radius_fill(const PointsView* queries, std::int64_t first_row, const RadiusParams& params,
                   ArrayView<const std::int64_t> offsets, ArrayView<std::int32_t> indices,
                   ArrayView<float> sqdist, cudaStream_t stream, SearchTimings& t) override {
    detail::DeviceScope guard(options_.device);
    const auto t0 = clock_type::now();
    t = start_timings();
    const std::int64_t rows = offsets.size - 1;
    std::vector<std::int64_t> given(static_cast<std::size_t>(offsets.size));
    if (offsets.memory == Memory::device) {
      check_device_pointer(offsets.data, "offsets");
      PCNN_CUDA_TRY(cudaMemcpy(given.data(), offsets.data, given.size() * sizeof(std::int64_t),
                               cudaMemcpyDeviceToHost));
    } else {
      std::copy(offsets.data, offsets.data + given.size(), given.begin());
    }
    PCNN_EXPECTS(given[0] >= 0, "radius_fill: offsets[0] must be >= 0");
    for (std::int64_t q = 0; q < rows; ++q)
      PCNN_EXPECTS(given[q + 1] >= given[q], "radius_fill: the offsets must not decrease");
    const std::int64_t entries = given[rows] - given[0];
    PCNN_EXPECTS(indices.size == entries,
                 "radius_fill: the outputs hold " + std::to_string(indices.size) +
                     " entries, the offsets give " + std::to_string(entries));
    // A range of the self-search is searched as a separate query set of those indexed points,
    // each still excluding itself.
    const bool range = !queries && !(first_row == 0 && rows == index_.n_total);
    const PointsView range_view = range ? self_rows(first_row, rows) : PointsView{};
    const PointsView* q = range ? &range_view : queries;
    // Host outputs are written in place; device outputs through host memory.
    std::vector<std::int32_t> host_idx;
    std::vector<float> host_dist;
    std::int32_t* out_idx = indices.data;
    float* out_dist = sqdist.data;
    if (indices.memory == Memory::device) {
      check_device_pointer(indices.data, "indices");
      check_device_pointer(sqdist.data, "sqdist");
      host_idx.resize(static_cast<std::size_t>(entries));
      host_dist.resize(host_idx.size());
      out_idx = host_idx.data();
      out_dist = host_dist.data();
    }
    try {
      StagedQueries sq;
      stage_radius_queries(q, rows, sq, stream, t);
      detail::radius_fill_query(index_, sq.search_view(), params,
                                range ? static_cast<int>(first_row) : 0, given.data(), out_idx,
                                out_dist, &t, stream, ev_[0], ev_[1], exact_search(sq), ws_);
      copy_out(indices.data, host_idx.data(), host_idx.size(), indices.memory, stream);
      copy_out(sqdist.data, host_dist.data(), host_dist.size(), sqdist.memory, stream);
    } catch (...) {
      abandon_call(stream);
      throw;
    }
    finish_sync_call(stream, t, t0);
  }

  void normals(const NormalParams& p, MatrixView<float> normals, ArrayView<float> curvature,
               cudaStream_t stream, SearchTimings& search, NormalTimings& t) override {
    detail::DeviceScope guard(options_.device);
    const std::int64_t n = index_.n_total;
    t.passes = 0;
    if (n == 0) return;
    const bool to_device = normals.memory == Memory::device;
    if (to_device) {
      check_device_pointer(normals.data, "normals");
      check_device_pointer(curvature.data, "curvature");
    }
    const double vp[3] = {p.viewpoint[0], p.viewpoint[1], p.viewpoint[2]};
    detail::cuda_event e0, e1, e2;
    detail::device_buffer<float> d_normals, d_curvature;  // host outputs: a pass's results
    // The normals of rows [first, first + nb.rows), into the caller's device memory or through
    // the buffers above to the caller's host memory. Synchronizes.
    auto compute = [&](std::int64_t first, const detail::NeighborRows& nb) {
      float* out_n = normals.data + first * 3;
      float* out_c = curvature.data + first;
      if (!to_device) {
        d_normals.resize(static_cast<std::size_t>(nb.rows) * 3, stream, ws_);
        d_curvature.resize(static_cast<std::size_t>(nb.rows), stream, ws_);
        out_n = d_normals.data();
        out_c = d_curvature.data();
      }
      e0.record(stream);
      detail::launch_normals(exact_view_, first, nb, vp, out_n, out_c, stream);
      e1.record(stream);
      if (!to_device) {
        PCNN_CUDA_TRY(cudaMemcpyAsync(normals.data + first * 3, out_n, d_normals.bytes(),
                                      cudaMemcpyDeviceToHost, stream));
        PCNN_CUDA_TRY(cudaMemcpyAsync(curvature.data + first, out_c, d_curvature.bytes(),
                                      cudaMemcpyDeviceToHost, stream));
      }
      e2.record(stream);
      PCNN_CUDA_TRY(cudaStreamSynchronize(stream));
      t.normals_ms += e1.since(e0);
      if (!to_device) t.download_ms += e2.since(e1);
      ++t.passes;
    };
    try {
      if (p.k > 0 || p.max_nn > 0) {
        // Dense rows (kNN, or the max_nn nearest within the radius) searched into device memory
        // and consumed there, in passes when all of them do not fit (each pass a range of the
        // indexed points as queries, as self_knn_rows does).
        const int k = p.k > 0 ? p.k : p.max_nn;
        const double radius = p.k > 0 ? INFINITY : p.radius;
        std::int64_t per =
            rows_per_pass(n, std::int64_t(2 * k + 3) * 8 + (to_device ? 0 : 16), 60 * n, 0, [&] {
              return "normals of " + std::to_string(n) + " points with " + std::to_string(k) +
                     " neighbors each";
            });
        if (per == 0) per = n;
        detail::device_buffer<std::int32_t> idx(static_cast<std::size_t>(per) * k, stream, ws_);
        detail::device_buffer<float> d2(idx.size(), stream, ws_);
        for (std::int64_t first = 0; first < n; first += per) {
          const std::int64_t rows = std::min(per, n - first);
          const PointsView range = device_points(exact_view_.data + first * exact_view_.stride,
                                                 rows, exact_view_.stride);
          dense(rows == n ? nullptr : &range, static_cast<int>(first), KnnParams{k, false, 0},
                radius, {idx.data(), rows, k, Memory::device}, {d2.data(), rows, k, Memory::device},
                stream, true, search);
          t.search_ms += double(search.upload_ms) + search.build_ms + search.search_ms;
          compute(first, detail::NeighborRows{idx.data(), nullptr, k, rows});
        }
      } else {
        // Every neighbor within the radius: the radius search's CSR result (host memory, exact
        // in size), uploaded a slice of rows at a time.
        const RadiusResult r = radius(nullptr, RadiusParams{p.radius, false, 0}, stream, search);
        t.search_ms = search.total_ms;
        constexpr std::int64_t kSliceEntries = std::int64_t{1} << 26;
        detail::device_buffer<std::int64_t> off;
        detail::device_buffer<std::int32_t> ids;
        for (std::int64_t first = 0; first < n;) {
          // The most rows from `first` on whose entries stay within the slice (at least one).
          const auto end = std::upper_bound(r.offsets.begin() + first + 1, r.offsets.end(),
                                            r.offsets[first] + kSliceEntries);
          const std::int64_t last =
              std::max<std::int64_t>(first + 1, (end - r.offsets.begin()) - 1);
          const std::int64_t entries = r.offsets[last] - r.offsets[first];
          off.resize(static_cast<std::size_t>(last - first + 1), stream, ws_);
          ids.resize(static_cast<std::size_t>(entries), stream, ws_);
          PCNN_CUDA_TRY(cudaMemcpyAsync(off.data(), r.offsets.data() + first, off.bytes(),
                                        cudaMemcpyHostToDevice, stream));
          if (entries > 0)
            PCNN_CUDA_TRY(cudaMemcpyAsync(ids.data(), r.indices.data() + r.offsets[first],
                                          ids.bytes(), cudaMemcpyHostToDevice, stream));
          compute(first, detail::NeighborRows{ids.data(), off.data(), 0, last - first});
          first = last;
        }
      }
    } catch (...) {
      abandon_call(stream);
      throw;
    }
    ws_.end_call(stream, aux_);
  }

 private:
  // Indexed points [first_row, first_row + rows) as a separate query set (device or mapped
  // memory: the index's own copy of the coordinates as given).
  PointsView self_rows(std::int64_t first_row, std::int64_t rows) const {
    PointsView v = exact_view_.slice(first_row, rows);
    v.memory = Memory::device;
    return v;
  }

  // A search's two counters (distance evaluations, refined rows) into `t`, once `stream` is done.
  static void read_counts(const detail::device_buffer<unsigned long long>& evals,
                          cudaStream_t stream, SearchTimings& t) {
    const detail::TreeSearchStats st = detail::read_search_counts(evals.data(), stream);
    t.distance_evaluations = st.evaluations;
    t.refined_rows = st.refined_rows;
  }

  // The rows of a pass of a search of `rows` rows in curve order. A pass of fewer rows than a few
  // waves of the search kernel (an SM holds 8 blocks of kTreeQueryBlock queries) ends in a long
  // tail: at 1M rows, eight passes of 125k searched in 4.8 ms what one launch searches in 1.8 ms
  // (H100, 132 SMs: a wave is 135k rows). So: four waves at least, and no more than eight passes.
  std::int64_t pass_rows(std::int64_t rows) const {
    const std::int64_t waves = std::int64_t(4) * sms_ * 8 * detail::kTreeQueryBlock;
    const std::int64_t per = options_.chunk_rows > 0
                                 ? options_.chunk_rows
                                 : std::max<std::int64_t>(waves, (rows + 7) / 8);
    return std::min<std::int64_t>(cuda::round_up(per, detail::kTreeQueryBlock), rows);
  }

  // Whether `v` is a range of the index's own copy of the points (self_rows; an empty one may
  // start at its end): device memory, or mapped page-locked memory, which the device-pointer
  // check would refuse.
  bool own_points(const PointsView& v) const {
    const auto* p = static_cast<const char*>(v.address());
    const auto* own = static_cast<const char*>(exact_view_.address());
    return own && p >= own && p <= own + detail::span_words(exact_view_) * sizeof(float);
  }

  SearchTimings start_timings() const {
    SearchTimings t;
    t.backend = Backend::cuda;
    t.staging = staging_ == Staging::automatic ? Staging::pinned : staging_;
    return t;
  }

  // After a call whose work on `stream` (and the aux stream) has finished.
  void finish_sync_call(cudaStream_t stream, SearchTimings& t, clock_type::time_point t0) {
    ws_.end_call(stream, aux_);
    t.total_ms = ms_since(t0);
  }

  // A call that failed part-way: its queued work must finish before its blocks are reused.
  void abandon_call(cudaStream_t stream) noexcept {
    wait_for_streams(stream);
    ws_.end_call(stream, aux_);
  }

  // The work queued on `stream` and the index's own streams has ended (errors ignored).
  void wait_for_streams(cudaStream_t stream) noexcept {
    PCNN_CUDA_TRY_NO_THROW(cudaStreamSynchronize(stream));
    PCNN_CUDA_TRY_NO_THROW(cudaStreamSynchronize(aux_));
    PCNN_CUDA_TRY_NO_THROW(cudaStreamSynchronize(copy_));
  }

  template <class T>
  void copy_out(T* to, const T* from, std::size_t n, Memory memory, cudaStream_t stream) {
    if (n == 0) return;
    if (memory == Memory::host) {
      std::memcpy(to, from, n * sizeof(T));
      return;
    }
    PCNN_CUDA_TRY(cudaMemcpyAsync(to, from, n * sizeof(T), cudaMemcpyHostToDevice, stream));
    PCNN_CUDA_TRY(cudaStreamSynchronize(stream));
  }

  // Device bytes a search of separate `queries` needs besides its results and the working
  // reserve: uploaded, keyed and sorted queries, an outlier slot each, and slack for CUB's
  // scratch and counters.
  static std::int64_t query_bytes(const PointsView& q) {
    const std::int64_t upload =
        q.memory == Memory::device ? 0 : 4 * static_cast<std::int64_t>(detail::span_words(q));
    return upload + 60 * q.count;
  }

  // detail::plan_rows_per_pass over the device memory this index may use, its working memory
  // being detail::working_reserve's share plus `extra` bytes. Where the memory the workspace and
  // its resource hold ready (cached(): a frame's blocks from the last frame, a pool's reserve)
  // takes every row and that working memory, no passes are needed, and the driver is not asked
  // what else is free: cudaMemGetInfo took 42-64 us a call inside the kNN command (H200 host,
  // bench/results/2026-11-30-round35.md), before a 1M-point search could start. Rows that fit in
  // cached memory fit in the available memory too (it holds the cached; the usable share grows
  // with it). `what` names the search in an out-of-memory error.
  template <class What>
  std::int64_t rows_per_pass(std::int64_t rows, std::int64_t row_bytes, std::int64_t extra,
                             std::int64_t forced, What&& what) const {
    const std::int64_t cached = ws_.cached();
    if (forced <= 0 &&
        detail::rows_that_fit(row_bytes, detail::working_reserve(cached) + extra, cached) >= rows)
      return 0;
    const std::int64_t available = ws_.available();
    return detail::plan_rows_per_pass(rows, row_bytes, detail::working_reserve(available) + extra,
                                      forced, what(), available);
  }

  // Where kernels read `pts`: device memory as given, or staged from host memory by the mode.
  // The copy is queued on `stream`; a page-locked staging buffer is not refilled before the
  // device has read its last contents.
  PointsView stage(PointsView pts, detail::device_buffer<float>& dev,
                   detail::pinned_buffer<float>& pinned, cudaStream_t stream, SearchTimings& t) {
    if (pts.memory == Memory::device) {
      if (pts.count > 0 && !own_points(pts)) check_device_pointer(pts.address(), "points");
      return pts;
    }
    // In 4-byte words (floats, or halves of doubles): the buffers hold either type.
    const std::size_t words = detail::span_words(pts), bytes = words * sizeof(float);
    if (words == 0) return detail::moved_to_device(pts, nullptr);
    const void* from = pts.address();
    detail::PieceLocks locks;
    const bool locked = detail::is_page_locked(from);
    const Staging mode = staging_for(staging_, bytes);
    t.staging = mode;  // what this transfer resolved to (a search: its results' mode, later)
    if (mapped_ || (mode == Staging::pinned && !locked)) {
      // The last copy out of the buffer is done, and (mapped) the last _async search reading it.
      PCNN_CUDA_TRY(cudaEventSynchronize(staged_.get()));
      if (mapped_) PCNN_CUDA_TRY(cudaEventSynchronize(async_done_.get()));
      if (!mapped_ && words > 2 * kStageChunkWords)
        return stage_chunks(pts, from, words, dev, pinned, stream, t);
      pinned.ensure(words);
      std::memcpy(pinned.data(), from, bytes);
      from = pinned.data();
      if (mapped_) return detail::moved_to_device(pts, pinned.device_data());
    } else if (mode == Staging::registered && !locked) {
      locks = detail::PieceLocks(from, bytes, &ws_.host);
    }
    dev.resize(words, stream, ws_);
    try {
      locks.copy(0, bytes, [&](std::size_t at, std::size_t n) {
        PCNN_CUDA_TRY(cudaMemcpyAsync(reinterpret_cast<char*>(dev.data()) + at,
                                      static_cast<const char*>(from) + at, n,
                                      cudaMemcpyHostToDevice, stream));
      });
    } catch (...) {
      // The pieces queued so far are copied before their locks are undone.
      if (locks.active()) PCNN_CUDA_TRY_NO_THROW(cudaStreamSynchronize(stream));
      throw;
    }
    staged_.record(stream);
    t.upload_bytes += static_cast<std::int64_t>(bytes);
    if (locks.active()) PCNN_CUDA_TRY(cudaStreamSynchronize(stream));  // before it is unlocked
    return detail::moved_to_device(pts, dev.data());
  }

  // Large pageable points through two page-locked chunks of the buffer
  // (detail::upload_through_chunks), which stays two chunks whatever the cloud (not a page-locked
  // copy of all of it).
  PointsView stage_chunks(PointsView pts, const void* from, std::size_t words,
                          detail::device_buffer<float>& dev, detail::pinned_buffer<float>& pinned,
                          cudaStream_t stream, SearchTimings& t) {
    pinned.ensure(2 * kStageChunkWords);
    dev.resize(words, stream, ws_);
    detail::upload_through_chunks(dev.data(), from, words * sizeof(float),
                                  reinterpret_cast<char*>(pinned.data()), chunk_sent_, stream);
    staged_.record(stream);
    t.upload_bytes += static_cast<std::int64_t>(words * sizeof(float));
    return detail::moved_to_device(pts, dev.data());
  }

  // kNN and hybrid: dense rows × k into the caller's outputs.
  // `query_offset`: with exclude_self, query i is indexed point i + query_offset. `radius`:
  // hybrid search within it (infinity: kNN).
  void dense(const PointsView* queries, int query_offset, const KnnParams& params, double radius,
             MatrixView<std::int32_t> indices, MatrixView<float> sqdist, cudaStream_t stream,
             bool sync, SearchTimings& timings) {
    detail::DeviceScope guard(options_.device);
    const auto t0 = clock_type::now();
    // An _async call leaves the last synchronizing call's timings as they are.
    SearchTimings t = start_timings();
    const std::int64_t rows = indices.rows;
    if (rows == 0) {
      if (sync) {
        finish_sync_call(stream, t, t0);
        timings = t;
      }
      return;
    }
    try {
      ev_[0].record(stream);
      StagedQueries sq;
      stage_queries(queries, sq, stream, t);
      ev_[1].record(stream);
      const detail::ExactSearch ex = exact_search(sq);
      const detail::RadiusBound bound = detail::make_radius_bound(radius, ex);
      if (indices.memory == Memory::device) {
        check_device_pointer(indices.data, "indices");
        check_device_pointer(sqdist.data, "sqdist");
      }
      if (indices.memory == Memory::device)
        dense_to_device(sq.search_view(), query_offset, params, bound, ex, indices.data,
                        sqdist.data, stream, sync, t);
      else
        dense_to_host(sq.search_view(), query_offset, params, bound, ex, indices.data, sqdist.data,
                      stream, t);
    } catch (...) {
      abandon_call(stream);
      throw;
    }
    if (!sync) {  // blocks freed by this call are reusable on `stream` at once, elsewhere after
                  // the next synchronizing call; build() and the destructor wait for this event
      async_done_.record(stream);
      return;
    }
    PCNN_CUDA_TRY(cudaStreamSynchronize(stream));
    t.upload_ms = ev_[1].since(ev_[0]);
    finish_sync_call(stream, t, t0);
    timings = t;
  }

  // The frame of the float search, from the indexed points: filter = (x - origin) * 2^scale_exp,
  // rounded to float. float32 points keep a zero origin (the caller re-centers them; pcnn::Cloud
  // does so exactly), so that the filter is the caller's coordinates, exactly; their scale comes
  // from the build's bounds (build). float64 points (here, from a pass over them) are
  // re-centered on their bounding box's center. The scale is 1 unless the largest offset would
  // make float squares underflow or overflow (below 2^-40 or above 2^40): then a power of two
  // brings it to about 1. Reported distances come from the exact coordinates either way.
  void choose_frame_f64(const PointsView& d, cudaStream_t stream) {
    scale_exp_ = 0;
    origin_ = {0, 0, 0};
    if (d.count == 0) return;
    detail::device_buffer<unsigned long long> box(6, stream, ws_);
    PCNN_CUDA_TRY(cudaMemsetAsync(box.data(), 0xff, 3 * sizeof(unsigned long long), stream));
    PCNN_CUDA_TRY(cudaMemsetAsync(box.data() + 3, 0, 3 * sizeof(unsigned long long), stream));
    const auto blocks =
        static_cast<int>(std::min<std::int64_t>(cuda::ceil_div(d.count, 256), 1024));
    extent_kernel<<<blocks, 256, 0, stream>>>(d.data64, d.stride, static_cast<int>(d.count),
                                              box.data());
    PCNN_CHECK_LAUNCH();
    unsigned long long bits[6];
    PCNN_CUDA_TRY(cudaMemcpyAsync(bits, box.data(), sizeof bits, cudaMemcpyDeviceToHost, stream));
    PCNN_CUDA_TRY(cudaStreamSynchronize(stream));
    std::array<double, 3> lo, hi;
    for (int a = 0; a < 3; ++a) {
      lo[a] = from_ordered_bits(bits[a]);
      hi[a] = from_ordered_bits(bits[3 + a]);
    }
    set_frame(lo, hi, true);
  }

  // The frame from the finite points' bounds (lo > hi: there are none): float64 points
  // centered, and a scale where the largest offset is outside [2^-40, 2^40].
  void set_frame(const std::array<double, 3>& lo, const std::array<double, 3>& hi, bool center) {
    scale_exp_ = 0;
    origin_ = {0, 0, 0};
    double largest = 0;
    for (int a = 0; a < 3; ++a) {
      if (!(lo[a] <= hi[a])) {  // no finite point
        origin_ = {0, 0, 0};
        return;
      }
      if (center) origin_[a] = lo[a] / 2 + hi[a] / 2;
      largest = std::max({largest, std::fabs(lo[a] - origin_[a]), std::fabs(hi[a] - origin_[a])});
    }
    if (largest == 0 || (largest >= 0x1p-40 && largest <= 0x1p40)) return;
    scale_exp_ = -std::ilogb(largest);  // the largest becomes about 1
  }

  // What the float search sees of some points: their filter coordinates (see choose_frame_f64),
  // and `perturbation`, a bound on how far any filter coordinate is from (x - origin) * 2^scale
  // (the half-ulp rounding of a float64 offset, or of a float32 value scaled below float's normal
  // range; 0 when the filter is exact).
  struct Filter {
    PointsView view;
    double perturbation = 0;
    bool as_given = false;  // `view` is the points themselves (float, no shift, no scale)
  };

  // The filter of device points `d`: `d` itself when it is exact as it is, or a computed copy in
  // `buf`. A finite coordinate that the frame would push out of float's range (queries far
  // beyond the indexed points' magnitude) is refused rather than searched as if not finite.
  Filter filter_of(const PointsView& d, detail::device_buffer<float>& buf, cudaStream_t stream) {
    const bool zero_origin = origin_[0] == 0 && origin_[1] == 0 && origin_[2] == 0;
    const bool exact_input = !d.is_double() && zero_origin;
    if (d.count == 0 || (exact_input && scale_exp_ == 0)) return {d, 0.0, true};
    buf.resize(static_cast<std::size_t>(d.count) * 3, stream, ws_);
    detail::device_buffer<int> flags(2, stream, ws_);
    PCNN_CUDA_TRY(cudaMemsetAsync(flags.data(), 0, flags.bytes(), stream));
    const auto blocks =
        static_cast<int>(std::min<std::int64_t>(cuda::ceil_div(d.count, 256), 4096));
    const double3 o = make_double3(origin_[0], origin_[1], origin_[2]);
    if (d.is_double())
      filter_kernel<<<blocks, 256, 0, stream>>>(d.data64, d.stride, static_cast<int>(d.count), o,
                                                scale_exp_, buf.data(), flags.data());
    else
      filter_kernel<<<blocks, 256, 0, stream>>>(d.data, d.stride, static_cast<int>(d.count), o,
                                                scale_exp_, buf.data(), flags.data());
    PCNN_CHECK_LAUNCH();
    int host[2] = {0, 0};
    PCNN_CUDA_TRY(cudaMemcpyAsync(host, flags.data(), sizeof host, cudaMemcpyDeviceToHost, stream));
    PCNN_CUDA_TRY(cudaStreamSynchronize(stream));
    PCNN_EXPECTS(!host[0],
                 "queries: coordinates too far from the indexed points (the float search works "
                 "on offsets from the indexed points' center, scaled by 2^" +
                     std::to_string(scale_exp_) + ", and a query's overflows float)");
    float largest;
    std::memcpy(&largest, &host[1], sizeof largest);
    // Rounding to nearest moves a value by at most 2^-24 of itself (normal range) or 2^-150
    // (subnormal); the double subtraction before it by 2^-53 of the offset. Twice both, for
    // margin.
    const double perturbation =
        exact_input ? (scale_exp_ < 0 ? 0x1p-149 : 0.0) : double(largest) * 0x1p-23 + 0x1p-148;
    return {device_points(buf.data(), d.count, 3), perturbation};
  }

  // The queries of one search on the device (none for a self-search): as given, staged (where
  // exact distances come from), and as the float search sees them (filter_of). The buffers
  // live as long as the call's work needs them.
  struct StagedQueries {
    detail::device_buffer<float> raw, scaled;
    PointsView exact;
    Filter filter;
    bool given = false;
    const PointsView* search_view() const { return given ? &filter.view : nullptr; }
  };

  void stage_queries(const PointsView* queries, StagedQueries& sq, cudaStream_t stream,
                     SearchTimings& t) {
    if (!queries) return;
    sq.given = true;
    sq.exact = stage(*queries, sq.raw, queries_host_, stream, t);
    sq.filter = filter_of(sq.exact, sq.scaled, stream);
  }

  // A radius search's queries, once its per-row working memory is known to fit; the staging
  // between events 0 and 1.
  void stage_radius_queries(const PointsView* queries, std::int64_t rows, StagedQueries& sq,
                            cudaStream_t stream, SearchTimings& t) {
    const std::int64_t available = ws_.available();
    detail::check_radius_fits(
        queries ? detail::working_reserve(available) + query_bytes(*queries) : 0, rows, available);
    ev_[0].record(stream);
    stage_queries(queries, sq, stream, t);
    ev_[1].record(stream);
  }

  // The exact coordinates of a search: the indexed points as given, and the queries' (the
  // staged query view; the indexed points themselves for a self-search), and how far the float
  // filter is from them (the larger of the indexed points' and the queries' filter error).
  detail::ExactSearch exact_search(const StagedQueries& sq) const {
    detail::ExactSearch ex;
    ex.refs = {exact_view_.data, exact_view_.data64, exact_view_.stride};
    ex.queries =
        sq.given ? detail::ExactCoords{sq.exact.data, sq.exact.data64, sq.exact.stride} : ex.refs;
    ex.err.scale_exp = scale_exp_;
    ex.err.perturbation = std::max(refs_perturbation_, sq.filter.perturbation);
    ex.filter_exact = refs_as_given_ && (!sq.given || sq.filter.as_given);
    return ex;
  }

  // A device view must be device (or managed) memory of this index's device.
  void check_device_pointer(const void* p, const char* what) const {
    if (!p) return;
    cudaPointerAttributes attr{};
    const cudaError_t err = cudaPointerGetAttributes(&attr, p);
    if (err != cudaSuccess) static_cast<void>(cudaGetLastError());
    PCNN_EXPECTS(err == cudaSuccess &&
                     (attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged) &&
                     attr.device == options_.device,
                 std::string(what) + ": a device view must point to memory of CUDA device " +
                     std::to_string(options_.device));
  }

  // The caller's device memory holds every row: the search writes there directly.
  void dense_to_device(const PointsView* d_queries, int query_offset, const KnnParams& params,
                       const detail::RadiusBound& bound, const detail::ExactSearch& ex,
                       std::int32_t* idx, float* dist, cudaStream_t stream, bool sync,
                       SearchTimings& t) {
    detail::KnnOutput out;
    out.d_idx = idx;
    out.d_dist = dist;
    out.query_offset = query_offset;
    const detail::TreeSearchStats st =
        detail::tree_query(index_, d_queries, params, bound, out, ex, stream, ev_[2], ws_, sync);
    ev_[3].record(stream);
    if (!sync) return;
    PCNN_CUDA_TRY(cudaStreamSynchronize(stream));
    t.build_ms = ev_[2].since(ev_[1]);
    t.search_ms = ev_[3].since(ev_[2]);
    t.distance_evaluations = st.evaluations;
    t.refined_rows = st.refined_rows;
  }

  // Rows for host memory. When every row fits on the device, the search runs along the index's
  // curve (its fastest order): in one pass whose kernels write the rows to the host themselves
  // where they can (curve_order_search), else in passes, each chunk of rows going to the host on
  // a stream of its own as soon as all its queries are done; otherwise passes of rows, each
  // downloaded before the next, so that results larger than the device memory left still work.
  // (The row bytes below are what the kNN command reserves for: knn_device_bytes, knn_command.)
  void dense_to_host(const PointsView* d_queries, int query_offset, const KnnParams& params,
                     const detail::RadiusBound& bound, const detail::ExactSearch& ex,
                     std::int32_t* out_idx, float* out_dist, cudaStream_t stream,
                     SearchTimings& t) {
    const int k = params.k;
    const std::int64_t rows = d_queries ? d_queries->count : index_.n_total;
    const std::size_t cells = static_cast<std::size_t>(rows) * k;
    // Per row: its k results, a flagged group and reach, an outlier slot and its limit, a
    // second pair for passes in turn (two passes' scratch at once: curve_order_search), and,
    // where rows may be forwarded, the forwarding's counters (forward_counter_bytes).
    const std::int64_t forward_bytes = may_forward(k, bound) ? detail::forward_counter_bytes(k) : 0;
    const std::int64_t per_pass = rows_per_pass(
        rows, std::int64_t(k + 2) * 8 + 12 + forward_bytes, d_queries ? query_bytes(*d_queries) : 0,
        params.max_rows_per_pass, [&] {
          return "a search of " + std::to_string(rows) + " queries with k = " + std::to_string(k);
        });
    // Where the device writes and the host reads: the caller's memory when it is page-locked
    // (or page-locked for this call: registered staging, by pieces as the downloads reach them),
    // else the index's page-locked buffers.
    detail::PieceLocks lock_idx, lock_dist;
    const bool locked = detail::is_page_locked(out_idx) && detail::is_page_locked(out_dist);
    bool direct = locked && !mapped_;
    const Staging mode = staging_for(staging_, cells * 8);
    t.staging = mode;
    const bool registered = !locked && mode == Staging::registered;
    if (registered) {
      lock_idx = detail::PieceLocks(out_idx, cells * sizeof(std::int32_t), &ws_.host);
      lock_dist = detail::PieceLocks(out_dist, cells * sizeof(float), &ws_.host);
      direct = true;
    }
    if (mode == Staging::pageable && !locked) direct = true;
    std::int32_t* h_idx = out_idx;
    float* h_dist = out_dist;
    if (!direct) {
      idx_host_.ensure(cells);
      dist_host_.ensure(cells);
      h_idx = idx_host_.data();
      h_dist = dist_host_.data();
    }
    t.download_bytes = static_cast<std::int64_t>(cells) * 8;  // curve_order_search: less
    try {
      if (per_pass > 0) {  // rows do not fit: passes, each brought to the host before the next
        detail::device_buffer<std::int32_t> d_idx(static_cast<std::size_t>(per_pass) * k, stream,
                                                  ws_);
        detail::device_buffer<float> d_dist(d_idx.size(), stream, ws_);
        // (tree_query copies each pass's rows into them on the host: nothing to lock.)
        detail::KnnOutput out{d_idx.data(), d_dist.data(), per_pass, h_idx, h_dist, query_offset};
        const detail::TreeSearchStats st = detail::tree_query(index_, d_queries, params, bound, out,
                                                              ex, stream, ev_[2], ws_, true);
        t.search_ms = st.search_ms;
        t.download_ms = st.download_ms;
        t.passes = st.passes;
        t.distance_evaluations = st.evaluations;
        t.refined_rows = st.refined_rows;
      } else {
        curve_order_search(d_queries, query_offset, params, bound, ex, h_idx, h_dist, stream, t,
                           lock_idx, lock_dist);
      }
    } catch (...) {
      // Copies into the caller's rows may still run: they end before the unwinding undoes the
      // rows' locks (lock_idx, lock_dist).
      wait_for_streams(stream);
      throw;
    }
    if (h_idx != out_idx)
      detail::parallel_copy({{out_idx, h_idx, cells * sizeof(std::int32_t)},
                             {out_dist, h_dist, cells * sizeof(float)}});
  }

  // Whether a kNN search's rows may be forwarded to the host by its kernels (curve_order_search):
  // not where they are written in place (mapped) or on an integrated GPU.
  bool may_forward(int k, const detail::RadiusBound& bound) const {
    return !mapped_ && !integrated_ && detail::forwardable_rows(k, std::isfinite(bound.r2));
  }

  // Every row on the device; one pass in curve order whose kernels forward the rows to the host,
  // or passes (in turn on s0 and the aux stream) and chunks of rows (by original index)
  // downloaded on the copy stream once their last query is searched.
  // Every pass is queued first; then the downloads, each piece after `lock_idx` and `lock_dist`
  // have page-locked its bytes of the caller's rows (registered staging; nothing to lock
  // otherwise): the locking (~28 ms for 640 MB on the H200's host) overlaps the queued passes,
  // and then the downloads of the pieces locked before it (registering on a thread of its own
  // while the passes were being queued gained nothing).
  // Synchronizes.
  void curve_order_search(const PointsView* d_queries, int query_offset, const KnnParams& params,
                          const detail::RadiusBound& bound, const detail::ExactSearch& ex,
                          std::int32_t* out_idx, float* out_dist, cudaStream_t s0, SearchTimings& t,
                          detail::PieceLocks& lock_idx, detail::PieceLocks& lock_dist) {
    const int k = params.k;
    const std::int64_t rows = d_queries ? d_queries->count : index_.n_total;
    cudaStream_t s1 = copy_;
    detail::device_buffer<float4> sorted_buf;
    if (d_queries)
      sorted_buf = detail::sort_queries(index_, d_queries->data, d_queries->stride,
                                        static_cast<int>(rows), s0, ws_);
    const float4* sorted = d_queries ? sorted_buf.data() : index_.points.data();
    ev_[2].record(s0);
    const std::int64_t per = pass_rows(rows);
    const int chunks = static_cast<int>(cuda::ceil_div(rows, per));
    const std::size_t cells = static_cast<std::size_t>(rows) * k;
    detail::device_buffer<std::int32_t> all_idx(mapped_ ? 0 : cells, s0, ws_);
    detail::device_buffer<float> all_dist(mapped_ ? 0 : cells, s0, ws_);
    std::int32_t* d_out_idx = mapped_ ? idx_host_.device_data() : all_idx.data();
    float* d_out_dist = mapped_ ? dist_host_.device_data() : all_dist.data();
    detail::device_buffer<unsigned long long> evals(2, s0, ws_);  // evaluations, refined rows
    PCNN_CUDA_TRY(cudaMemsetAsync(evals.data(), 0, evals.bytes(), s0));
    const int blocks = static_cast<int>(cuda::ceil_div(rows, 256));
    int finite = static_cast<int>(rows);
    last_host_.assign(chunks + 1, static_cast<int>(rows) - 1);
    // A search in one pass into page-locked rows: its kernels forward the rows to the host as
    // they complete, so that they cross the link while it runs rather than after it
    // (detail/row_forward.cuh). Only into page-locked memory pcnn made (the index's staging
    // buffers, pcnn::allocate_page_locked, pcnn::PageLock: own_locked_alias; rows this call
    // locks itself, by pieces as their downloads reach them, are downloaded), and where both arrays
    // begin at the same place in a 128-byte line (forwardable_layout), so that a segment is the
    // same entries' part of a line in each. Not on an integrated GPU, whose "host" rows are its own
    // memory: no link to hide. The counters take rows * forward_counter_bytes(k) (in
    // plan_rows_per_pass's bytes a row).
    detail::RowForward forward;
    if (may_forward(k, bound) && detail::forwardable_layout(out_idx, out_dist)) {
      forward.host_idx = static_cast<std::int32_t*>(
          detail::own_locked_alias(out_idx, cells * sizeof(std::int32_t)));
      forward.host_dist =
          static_cast<float*>(detail::own_locked_alias(out_dist, cells * sizeof(float)));
      forward.cells = static_cast<std::int64_t>(cells);
      forward.lead = detail::forward_lead(out_idx);
    }
    // Rows that can be forwarded are searched in one pass, every row in it: no chunk is
    // downloaded (only a window's tail, below), so where chunks end is not asked (a round trip of
    // ~50 us before a 1M-point search, H200), and the kernels write the non-finite queries' empty
    // rows themselves. Beyond forward_any_order_bytes() of rows, as they complete only where they
    // complete in some spatial order (a chunk ends before the last pass, which that round trip
    // finds); else swept or a window of them (row_forward.cuh says why; 10M LiDAR-like points,
    // k = 32, H200: 53.7 ms forwarded as they complete, 64.4 swept).
    const bool forwardable = forward.host_idx && forward.host_dist;
    bool one_forwarded_pass = forwardable && cells * (sizeof(std::int32_t) + sizeof(float)) <=
                                                 detail::forward_any_order_bytes().load();
    if (chunks > 1 && !one_forwarded_pass) {
      // Where each chunk's last query lies, so that its download can start after the pass that
      // searches it, and how many queries are finite: a round trip to the host. One chunk waits
      // for the one pass anyway, and the search kernels write a non-finite query's empty row
      // themselves, so a single chunk (a frame) is launched over every row without it.
      detail::device_buffer<int> last(chunks + 1, s0, ws_);
      PCNN_CUDA_TRY(cudaMemsetAsync(last.data(), 0xff, last.bytes(), s0));  // -1
      PCNN_CUDA_TRY(cudaMemsetAsync(last.data() + chunks, 0, sizeof(int), s0));
      last_slot_kernel<<<cuda::ceil_div(rows, std::int64_t(kLastSlotSpan)), kLastSlotThreads, 0,
                         s0>>>(sorted, static_cast<int>(rows), per, chunks, last.data(),
                               last.data() + chunks);
      PCNN_CHECK_LAUNCH();
      PCNN_CUDA_TRY(cudaMemcpyAsync(last_host_.data(), last.data(), last.bytes(),
                                    cudaMemcpyDeviceToHost, s0));
      PCNN_CUDA_TRY(cudaStreamSynchronize(s0));
      finite = last_host_[chunks];
    }
    // Passes of `per` rows let a chunk go down while later passes search, but each has a tail
    // (its kernel's last blocks and longest outlier; a clustered cloud's 1M-point search, H200:
    // 0.2-0.3 ms of 1.8), which the next pass fills only in part (in turns, below). Where no
    // chunk ends before the last pass (a cloud stored in no spatial order), nothing would go down
    // early: then one kNN pass. (Not hybrid: its collect walk's scratch, 516 bytes a row, is
    // sized by the pass, and without it the walk is 1.3-1.7x slower.)
    std::int64_t pass = per;
    if (chunks > 1 && finite > per && !std::isfinite(bound.r2) && !one_forwarded_pass) {
      const std::int64_t last_pass_begin = (finite - 1) / per * per;
      bool early = false, ordered = false;  // ordered: a chunk with a finite query ends early
      for (int j = 0; j < chunks; ++j) {
        early = early || last_host_[j] < last_pass_begin;
        ordered = ordered || (last_host_[j] >= 0 && last_host_[j] < last_pass_begin);
      }
      if (!early) pass = finite;
      one_forwarded_pass = forwardable && ordered;
    }
    // Rows beyond it in no spatial order (or of one chunk, whose order is not asked): swept, or
    // a window of them forwarded as they complete and the rest downloaded after the search (10M
    // uniform points, H200, GPU total ms, window against sweeps: k = 32 68.6 -> 53.6-53.9, k = 16
    // 33.7-34.0 -> 31.7-32.0; bench/results/2026-11-30-round37.md).
    std::int64_t tail = static_cast<std::int64_t>(cells);  // the entries downloaded after it
    bool sweep = false;
    if (forwardable && !one_forwarded_pass && k >= detail::kSweepFromK) {
      sweep = true;
      one_forwarded_pass = true;
    } else if (forwardable && !one_forwarded_pass) {
      const std::int64_t window =
          detail::forward_window(detail::forward_any_order_bytes().load(), forward.lead);
      if (window > 0) {
        forward.cells = tail = window;
        one_forwarded_pass = true;
      }
    }
    if (one_forwarded_pass) {  // every row, the non-finite queries' empty ones too
      finite = static_cast<int>(rows);
      pass = finite;
    } else if (finite < rows) {
      empty_rows_kernel<<<blocks, 256, 0, s0>>>(sorted, finite, static_cast<int>(rows), k,
                                                d_out_idx, d_out_dist, detail::RowShares{});
      PCNN_CHECK_LAUNCH();
    }
    detail::device_buffer<int> outliers(detail::tree_outlier_ints(pass), s0, ws_);
    const int passes = finite > 0 ? static_cast<int>((finite + pass - 1) / pass) : 0;
    detail::device_buffer<int> forward_done;
    detail::device_buffer<unsigned long long> forward_cursor;
    if (one_forwarded_pass && passes == 1) {
      if (sweep) {  // first: a cursor makes the segments half lines
        forward_cursor.resize(1, s0, ws_);
        forward.cursor = forward_cursor.data();
      }
      forward_done.resize(forward.segments(), s0, ws_);
      forward.done = forward_done.data();
    }
    bool forwarded = false;
    while (pass_events_.size() < static_cast<std::size_t>(2 * passes + 2 * chunks + 2))
      pass_events_.push_back(std::make_unique<detail::cuda_event>());
    auto ev = [&](int i) -> detail::cuda_event& { return *pass_events_[i]; };
    // Entries [a, a + n) to the host on s1, timed by chunk j's events.
    auto download_entries = [&](std::int64_t a, std::int64_t n, int j) {
      ev(2 * passes + 2 * j).record(s1);
      auto copy = [&](detail::PieceLocks& locks, auto* host, const auto* dev) {
        constexpr std::size_t size = sizeof(*host);
        locks.copy(a * size, (a + n) * size, [&](std::size_t at, std::size_t bytes) {
          PCNN_CUDA_TRY(cudaMemcpyAsync(reinterpret_cast<char*>(host) + at,
                                        reinterpret_cast<const char*>(dev) + at, bytes,
                                        cudaMemcpyDeviceToHost, s1));
        });
      };
      copy(lock_idx, out_idx, d_out_idx);
      copy(lock_dist, out_dist, d_out_dist);
      ev(2 * passes + 2 * j + 1).record(s1);
    };
    auto download = [&](int j) {  // rows [j * per, ...)
      download_entries(j * per * k, std::min(per, rows - j * per) * k, j);
    };
    auto pass_end = [&](int p) {
      return static_cast<int>(std::min<std::int64_t>(finite, (p + 1) * pass));
    };
    // Passes in turn on s0 and the aux stream: a pass ends with its outliers, a warp each, whose
    // longest search is the pass's tail (1M LiDAR-like points, H200: 0.25 ms at k = 8, 0.79 at
    // k = 32; ncu, bench/results/2026-11-29-round23.md), which the next pass's warps now fill.
    // Not hybrid: its scratch, sized by the free memory, would be taken twice.
    const bool turns = passes > 1 && !std::isfinite(bound.r2);
    detail::device_buffer<int> outliers_aux(turns ? outliers.size() : 0, s0, ws_);
    detail::cuda_event& ready = ev(2 * passes + 2 * chunks);
    detail::cuda_event& aux_done = ev(2 * passes + 2 * chunks + 1);
    if (turns) {
      ready.record(s0);
      PCNN_CUDA_TRY(cudaStreamWaitEvent(aux_, ready.get(), 0));
    }
    for (int p = 0; p < passes; ++p) {
      const bool on_aux = turns && p % 2 == 1;
      cudaStream_t sp = on_aux ? aux_ : s0;
      ev(2 * p).record(sp);
      forwarded = detail::tree_search_range(
          index_, sorted, d_queries == nullptr, static_cast<int>(p * pass), pass_end(p), params,
          bound, d_out_idx, d_out_dist, on_aux ? outliers_aux.data() : outliers.data(),
          evals.data(), query_offset, ex, sp, ws_, nullptr, forward.done ? &forward : nullptr);
      ev(2 * p + 1).record(sp);
    }
    if (turns) {  // s0 reads the counts and releases the buffers: after the aux stream's passes
      aux_done.record(aux_);
      PCNN_CUDA_TRY(cudaStreamWaitEvent(s0, aux_done.get(), 0));
    }
    // Every chunk after the first pass that ends past its last query (the last pass at the
    // latest).
    if (!mapped_ && !forwarded) {
      sent_.assign(chunks, 0);
      for (int p = 0; p < passes; ++p) {
        bool waited = false;
        for (int j = 0; j < chunks; ++j)
          if (!sent_[j] && (last_host_[j] < pass_end(p) || p == passes - 1)) {
            if (!waited) {
              PCNN_CUDA_TRY(cudaStreamWaitEvent(s1, ev(2 * p + 1).get(), 0));
              // In turns, the pass before it ran on the other stream.
              if (turns && p > 0) PCNN_CUDA_TRY(cudaStreamWaitEvent(s1, ev(2 * p - 1).get(), 0));
            }
            waited = true;
            download(j);
            sent_[j] = 1;
          }
      }
    }
    const std::int64_t tail_entries = forwarded ? static_cast<std::int64_t>(cells) - tail : 0;
    if (tail_entries > 0) {  // after the one pass
      PCNN_CUDA_TRY(cudaStreamWaitEvent(s1, ev(1).get(), 0));
      download_entries(tail, tail_entries, 0);
    }
    if (!mapped_ && passes == 0) {  // nothing to search: the empty rows only
      PCNN_CUDA_TRY(cudaStreamSynchronize(s0));
      for (int j = 0; j < chunks; ++j) download(j);
    }
    read_counts(evals, s0, t);  // synchronizes s0: rows forwarded by its kernels are on the host
    PCNN_CUDA_TRY(cudaStreamSynchronize(s1));
    // The passes' span (in turns, they overlap).
    for (int p = 0; p < passes; ++p)
      t.search_ms = std::max(t.search_ms, ev(2 * p + 1).since(ev(0)));
    if (!mapped_ && !forwarded)
      for (int j = 0; j < chunks; ++j)
        t.download_ms += ev(2 * passes + 2 * j + 1).since(ev(2 * passes + 2 * j));
    if (tail_entries > 0) {
      t.download_ms = ev(2 * passes + 1).since(ev(2 * passes));
      t.download_bytes = tail_entries * 8;
    }
    t.build_ms = ev_[2].since(ev_[1]);
    t.passes = chunks;
  }

  IndexOptions options_;
  std::shared_ptr<DeviceMemoryResource> upstream_;  // before everything allocated from it
  detail::Workspace ws_;
  Staging staging_;
  bool mapped_;
  bool integrated_;  // an integrated GPU (Jetson): host memory is the device's
  cudaStream_t aux_ = nullptr;
  cudaStream_t copy_ = nullptr;  // curve_order_search's downloads (nothing is allocated there)
  int sms_ = 1;                  // the device's multiprocessors (the passes' size)
  detail::SpatialIndex index_;
  // The float search's frame (choose_frame_f64, set_frame): filter = (x - origin_) × 2^scale_exp_,
  // rounded.
  int scale_exp_ = 0;
  std::array<double, 3> origin_{};
  double refs_perturbation_ = 0;        // how far the indexed points' filter is from exact
  bool refs_as_given_ = false;          // the indexed points' filter is the points themselves
  detail::device_buffer<float> exact_;  // the indexed points as given (float32 or float64 words)
  PointsView exact_view_;               // where they are (exact_, or mapped page-locked memory)
  detail::pinned_buffer<float> refs_host_, queries_host_;
  detail::pinned_buffer<std::int32_t> idx_host_;
  detail::pinned_buffer<float> dist_host_;
  detail::cuda_event ev_[4], staged_, async_done_, chunk_sent_[2];
  std::vector<std::unique_ptr<detail::cuda_event>> pass_events_;
  std::vector<int> last_host_;  // curve_order_search's chunks (kept: a frame allocates nothing)
  std::vector<char> sent_;
};

}  // namespace

namespace detail {
namespace {
KernelsLoaded search_kernels;  // by load_search_kernels
}  // namespace

void load_search_kernels(int device) {
  if (!search_kernels.first_load(device)) return;
  cudaFuncAttributes attributes;
  PCNN_CUDA_TRY(cudaFuncGetAttributes(&attributes, last_slot_kernel));
  PCNN_CUDA_TRY(cudaFuncGetAttributes(&attributes, empty_rows_kernel));
}

void forget_search_kernels(int device) { search_kernels.forget(device); }

std::atomic<std::size_t>& forward_any_order_bytes() {
  static std::atomic<std::size_t> bytes{std::size_t{512} << 20};
  return bytes;
}

std::unique_ptr<Index::Backend_> make_cuda_backend(const IndexOptions& options) {
  const DeviceInfo info = query_device(options.device);
  if (!info.available) throw no_device_error("no usable CUDA device: " + info.reason);
  // The backend's events and staging are made by its members' constructors, before its own
  // body runs: on the index's device, whatever device the calling thread has (an index of
  // device 1 made from a thread on device 0 had device-0 events: invalid resource handle).
  detail::DeviceScope guard(options.device);
  return std::make_unique<CudaBackend>(options);
}
}  // namespace detail

}  // namespace pcnn
