// Exact kNN over the spatial index (see detail/knn_tree.cuh).
#include <cuda/cmath>

#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "detail/cuda_try.cuh"
#include "detail/knn_tree.cuh"
#include "detail/per_device.cuh"
#include "detail/plan.cuh"
#include "detail/radius_tree.cuh"
#include "detail/refine.cuh"
#include "detail/search.cuh"
#include "detail/spatial_index.cuh"
#include "detail/upload.cuh"

namespace pcnn::detail {
namespace {

static_assert(kTreeQueryBlock == kTreeWarps * 32, "a pass must cover whole blocks");

int current_device() {
  int device = 0;
  PCNN_CUDA_TRY(cudaGetDevice(&device));
  return device;
}

int sm_count(int device) {
  int sms = 0;
  PCNN_CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return sms;
}

/// The hybrid search (max_nn <= kCollectRoom) as a collect walk: each lane writes the keys of
/// its query's points within r to its scratch row (NearestCollect; make_room cuts a row that
/// would overflow back to its nearest), then the warp sorts each row and writes its first max_nn.
/// Rows it could not cut are left to hybrid_tree_kernel (a.collected). Against the heap walk
/// alone, this keeps no list in shared memory and sorts whole rows by the warp: the heap, once
/// a lane's list was full, took 28 % of that kernel's stalls with 1.3-1.4 threads of 32 active
/// (bench/results/2026-11-27-round14.md). The keys hold exact distances, so no row needs the
/// float search's settling.
// 8 blocks an SM: 64 registers, without spilling (unbounded, make_room inlined took 96).
__global__ void __launch_bounds__(kTreeWarps * 32, 8)
    hybrid_collect_kernel(const __grid_constant__ TreeView t, TreeKnnArgs a) {
  __shared__ float4 stage_all[kTreeWarps][kStage];
  __shared__ int stack_all[kTreeWarps][kTreeStack];
  if (!warp_has_queries(a)) return;
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  const WarpQueries w(t, a);
  const int first = w.slot - lane - a.slot_begin;  // the warp's first slot in the launch
  std::uint64_t* const rows = a.collect + std::int64_t(first) * kCollect;
  NearestCollect sink{w.q, a.exclude_self ? w.qid + a.query_offset : -1, a.bound,
                      rows + lane * kCollect, a.bound.upper};
  unsigned long long evals =
      radius_walk(t, w.q, w.active, a.bound.upper * kPruneSlack, stage_all[warp], stack_all[warp],
                  sink, [&](int n) { make_room(sink, n, rows, a.k, a.exact.err); });
  const int m_lane = sink.over ? kCollect + 1 : sink.count;
  if (w.in_range) a.collected[first + lane] = m_lane;
  // Rows past the launch's end are not loaded (m 0) nor written.
  const int m_row = w.in_range ? m_lane : -1;
  auto load = [&](int r) {
    return load_warp_row(max(__shfl_sync(kFullMask, m_row, r), 0), std::int64_t(r) * kCollect, 0,
                         rows);
  };
  __syncwarp();  // every lane's keys are written (global memory, ordered within the warp)
  const unsigned ties = for_each_warp_row(load, [&](int r, WarpRow row) {
    const int m = __shfl_sync(kFullMask, m_row, r);
    const auto o = a.out(w.slot - lane + r, __shfl_sync(kFullMask, w.qid, r));
    if (m < 0 || m > kCollect) return false;
    sort_row_keys(row);
    return write_hybrid_row(row, a.k, o.idx, o.dist, rows + r * kCollect);
  });
  __syncwarp();  // the rows with ties are in their spares
  if (ties >> lane & 1) {
    auto* idx = reinterpret_cast<std::int32_t*>(sink.out);
    auto* dist = reinterpret_cast<float*>(sink.out) + kCollect;
    order_ties(a.bound.queries.at(w.qid), a.bound.refs, idx, dist, m_lane);
    const auto o = a.out(w.slot, w.qid);
    write_row(
        o.idx, o.dist, a.k, m_lane, [&](int e) { return idx[e]; }, [&](int e) { return dist[e]; });
  }
  evals = warp_all_reduce(evals, SumOp{});
  if (lane == 0 && evals) atomicAdd(a.evaluations, evals);
}

/// Self-kNN at k = 1 with each point its own candidate (exclude_self false), a thread a query:
/// the nearest is at exact distance 0, the point itself or a copy of it, and the row is the copy
/// with the smallest index. With coordinates stored as floats a copy has equal coordinates, so
/// equal filter coordinates and an equal curve key, and the points of one key (its bits from
/// key_low_bit up) are consecutive, by index (the build's sorts are stable). So the row is the
/// first point before the query in its key's run at exact distance 0, or the query itself. The
/// index's runs are short (short_key_runs: at most kShortKeyRun points, and no shadows, so every
/// finite query is one of the kNN hierarchy's points).
__global__ void first_copy_kernel(const __grid_constant__ TreeView t, TreeKnnArgs a) {
  const int slot = a.slot_begin + blockIdx.x * blockDim.x + threadIdx.x;
  unsigned long long evals = 0;
  if (slot < a.slot_end) {
    const float4 q = a.queries[slot];
    const int qid = __float_as_int(q.w);
    int found = -1;  // padding: a query that is not finite has no neighbor
    if (finite3(q.x, q.y, q.z)) {
      const std::uint64_t key = t.keys[slot];
      const auto same_key = [&](int j) { return same_bucket(t.keys[j], key, t.key_low_bit); };
      found = qid;
      int j = slot - 1;
      if (j >= 0 && same_key(j)) {
        const double3 qe = a.exact.query(q, qid);
        for (; j >= 0 && same_key(j); --j) {
          int id;
          const double3 p = a.exact.ref(j, id);
          ++evals;
          if (exact_sqdist(qe, p) == 0) found = id;  // the earliest wins
        }
      }
    }
    const auto o = a.out(slot, qid);
    write_row(
        o.idx, o.dist, 1, found >= 0 ? 1 : 0, [&](int) { return found; }, [](int) { return 0.f; });
  }
  evals = block_combine(evals, SumOp{}, 0ull);
  if (threadIdx.x == 0 && evals) atomicAdd(a.evaluations, evals);
}

/// Whether a kNN launch's rows are first copies (first_copy_kernel): k = 1 over the index's own
/// points, each its own candidate, no radius, coordinates stored as floats, and short runs of
/// one key. (Doubles that differ by less than 2^-537 are at exact distance 0, their squared
/// differences underflowing, and may still get different keys; a long run of one key, a pile of
/// points within a grid step of each other, is left to the walk, whose cells it was built for.)
bool rows_are_first_copies(const TreeView& tree, const TreeKnnArgs& a) {
  return a.k == 1 && a.self_search && !a.exclude_self && !std::isfinite(a.bound.r2) &&
         a.exact.refs.f32 != nullptr && a.exact.refs.f64 == nullptr && tree.short_key_runs;
}

// The search kernel of `a`: a k = 1 self-search walks without the nearest-first order
// (knn_tree_kernel's kOrdered).
template <int CAP, bool kClaim>
auto search_kernel(const TreeKnnArgs& a) {
  if constexpr (CAP == 1)
    if (a.self_search) return knn_tree_kernel<CAP, kClaim, false>;
  return knn_tree_kernel<CAP, kClaim>;
}

// The blocks of `a`'s search kernel (search_kernel<CAP, kClaim>) resident at once on the device
// (at least one). The occupancy is asked once a device and kernel (it is on every frame's path):
// the two orders of k = 1 may differ where registers are not bounded (sm_75).
template <int CAP, bool kClaim>
int resident_blocks(const TreeKnnArgs& a, int device, int sms) {
  static PerDevice per_sm[2]{};  // [ordered]
  const auto kernel = search_kernel<CAP, kClaim>(a);
  const int fit = asked_once(per_sm[kernel == knn_tree_kernel<CAP, kClaim> ? 1 : 0], device, [&] {
    int blocks = 0;
    PCNN_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, kTreeWarps * 32,
                                                                tree_list_bytes<CAP>()));
    return blocks;
  });
  return std::max(1, fit * sms);
}

/// The fewest queries a warp of knn_tree_kernel takes.
inline constexpr int kLeastQueriesPerWarp = 8;

/// The queries a warp of knn_tree_kernel takes in a launch (TreeKnnArgs::group): 32, halved
/// while the launch's warps would still fill no more than half the device's places (resident
/// blocks of the kernel that a launch of one wave takes: the claiming one up to CAP 32, so that
/// a halved launch still claims its outliers), down to kLeastQueriesPerWarp; always 32 where
/// KnnParams::few_queries_per_sm is 0, and from CAP 64 on, where the lists fill the shared memory
/// (3 blocks an SM) and 25k points at k = 64 searched 18 % faster uniform but 18 % slower
/// LiDAR-like in warps of 16. A warp's walk is a chain of dependent loads and votes that
/// runs as long as its queries' cells take, and the queries of a scan sparser than its map each
/// want cells of their own: 25k LiDAR-like scan points against a 1M-point map, 782 warps of 32 (a
/// fifth of an H200's places), searched in 0.59 ms, more than 100k points in 3,125 warps (0.47
/// ms); in 3,125 warps of 8 they took 0.31 ms. Where the warps of 32 fill the device, fewer
/// queries a warp only repeat the walk: 100k scan points took 0.54-0.56 ms in warps of 16 or 8
/// (bench/results/2026-11-29-round30.md).
template <int CAP>
int queries_per_warp(const TreeKnnArgs& a, int device, int sms) {
  if constexpr (!claims_outliers<CAP>()) {
    return 32;
  } else {
    if (a.few_per_sm == 0) return 32;
    const std::int64_t places =
        std::int64_t(resident_blocks<CAP, true>(a, device, sms)) * kTreeWarps;
    const int slots = a.slot_end - a.slot_begin;
    int group = 32;
    while (group > kLeastQueriesPerWarp && 2 * std::int64_t(cuda::ceil_div(slots, group)) <= places)
      group /= 2;
    return group;
  }
}

/// Lists every slot of the launch as an outlier (few queries: each searched by a warp of its own).
__global__ void list_all_kernel(TreeKnnArgs a) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x, slots = a.slot_end - a.slot_begin;
  if (i == 0) {
    a.outliers[0] = slots;
    a.outliers[1] = 0;
  }
  if (i < slots) {
    a.outliers[kOutlierCounters + i] = ~(a.slot_begin + i);
    *outlier_limit(a, i) = __float_as_int(INFINITY);
  }
}

/// After the kernels that write a forwarding launch's rows: copies every segment not yet copied
/// (rows of the gather and others: RowForward; with sweeps, complete segments no sweep reached), a
/// warp for 32 host lines at a time.
__global__ void forward_rest_kernel(RowForward f, const std::int32_t* idx, const float* dist) {
  const int lane = threadIdx.x & 31, lines = f.lines();
  const int warps = static_cast<int>(gridDim.x * blockDim.x / 32);
  for (int w = static_cast<int>((blockIdx.x * blockDim.x + threadIdx.x) / 32);
       std::int64_t(w) * 32 < lines; w += warps) {
    const int line = w * 32 + lane;
    const unsigned rest =
        line < lines ? line_halves(f, line,
                                   [&](int s) {
                                     return f.done[s] != (f.cursor ? kSegmentSent : f.entries(s));
                                   })
                     : 0u;
    copy_lines(f, idx, dist, line, rest);
  }
}

// Whether knn_tree_outlier_kernel<CAP> may start on `device` before the search kernel ahead of
// it has ended (programmatic dependent launch): compute capability 9.0 on, and both kernels'
// code built for it (griddepcontrol is compiled in from sm_90 only: a build for older
// architectures alone, run on a newer device from its PTX, has neither the early start nor the
// wait). Asked once a device.
template <int CAP>
bool starts_early(int device) {
  static PerDevice known{};  // 1: it may
  return asked_once(known, device, [&] {
           int major = 0;
           PCNN_CUDA_TRY(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
           if (major < 9) return 0;
           cudaFuncAttributes search{}, outliers{};
           PCNN_CUDA_TRY(cudaFuncGetAttributes(&search, knn_tree_kernel<CAP, false>));
           PCNN_CUDA_TRY(cudaFuncGetAttributes(&outliers, knn_tree_outlier_kernel<CAP>));
           return search.ptxVersion >= 90 && outliers.ptxVersion >= 90 ? 1 : 0;
         }) == 1;
}

// One launch over the slots [a.slot_begin, a.slot_end), then the outliers it found, then the
// gather of the rows either flagged (no host round trip: those kernels read their counts on the
// device). A hybrid search (a radius bound) takes the fixed-radius walk instead, which has no
// outliers.
template <int CAP>
bool launch(const TreeView& tree, TreeKnnArgs a, cudaStream_t stream) {
  constexpr int threads = kTreeWarps * 32;
  int blocks = cuda::ceil_div(a.slot_end - a.slot_begin, threads);
  constexpr int list_bytes = tree_list_bytes<CAP>(),
                hybrid_bytes = tree_list_bytes<CAP, (CAP <= 32)>();
  const bool hybrid = std::isfinite(a.bound.r2);
  if (list_bytes > 48 * 1024)  // above the default limit a kernel must opt in
    PCNN_CUDA_TRY(cudaFuncSetAttribute(knn_tree_kernel<CAP, false>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, list_bytes));
  if (hybrid_bytes > 48 * 1024)
    PCNN_CUDA_TRY(cudaFuncSetAttribute(hybrid_tree_kernel<CAP>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, hybrid_bytes));
  const int device = current_device(), sms = sm_count(device);
  const RowForward forward = a.forward;  // for the shared walk's launch only (below)
  a.forward = {};
  if (CAP == 1 && rows_are_first_copies(tree, a)) {
    constexpr int copy_threads = 256;
    first_copy_kernel<<<cuda::ceil_div(a.slot_end - a.slot_begin, copy_threads), copy_threads, 0,
                        stream>>>(tree, a);
    PCNN_CHECK_LAUNCH();
  } else if (hybrid) {
    if (a.collect) {
      hybrid_collect_kernel<<<blocks, threads, 0, stream>>>(tree, a);
      PCNN_CHECK_LAUNCH();
    }
    // Every row, or after the collect walk the rows it could not hold (none, mostly: its warps
    // then only read their counts).
    hybrid_tree_kernel<CAP><<<blocks, threads, hybrid_bytes, stream>>>(tree, a);
    PCNN_CHECK_LAUNCH();
  } else if (a.slot_end - a.slot_begin <= std::int64_t(a.few_per_sm) * sms && tree.levels > 0) {
    // Few queries (kFewQueriesPerSm): a warp each (search_outlier), every query listed as an
    // outlier. The kernels of the shared walk are loaded here too (at k = 1 both orders: a
    // command's warm-up is a self-search, its search perhaps not), so that a larger search later
    // does not load them: with lazy loading, a command whose small warm-up search took this way
    // paid ~0.35 ms at its first shared walk.
    cudaFuncAttributes attributes;
    PCNN_CUDA_TRY(cudaFuncGetAttributes(&attributes, knn_tree_kernel<CAP, false>));
    if constexpr (claims_outliers<CAP>())
      PCNN_CUDA_TRY(cudaFuncGetAttributes(&attributes, knn_tree_kernel<CAP, true>));
    if constexpr (CAP == 1) {
      PCNN_CUDA_TRY(cudaFuncGetAttributes(&attributes, knn_tree_kernel<CAP, false, false>));
      PCNN_CUDA_TRY(cudaFuncGetAttributes(&attributes, knn_tree_kernel<CAP, true, false>));
    }
    const int slots = a.slot_end - a.slot_begin;
    list_all_kernel<<<cuda::ceil_div(slots, threads), threads, 0, stream>>>(a);
    PCNN_CHECK_LAUNCH();
    knn_tree_outlier_kernel<CAP>
        <<<cuda::ceil_div(slots, kTreeWarps), threads, 0, stream>>>(tree, a);
    PCNN_CHECK_LAUNCH();
  } else {
    // In a launch of one wave, warps that finish their queries search the outliers while others
    // run. In a longer one, the last wave is shorter than an outlier's search (~100 us), and a
    // warp there that listed many would search them one after another (a 1M LiDAR self-search
    // took 2.6 ms instead of 0.45): they are left to the outlier kernel, a warp each.
    a.group = queries_per_warp<CAP>(a, device, sms);
    blocks = cuda::ceil_div(a.slot_end - a.slot_begin, kTreeWarps * a.group);
    bool claim = false;
    if constexpr (claims_outliers<CAP>())
      claim = blocks <= resident_blocks<CAP, true>(a, device, sms);
    // Slow warps hand their queries off in a one-wave search of a query set. A self-search's
    // first limits come from the queries' own cells and its warps take about as long as each
    // other: there the waiting and the hand-offs made the 100k frame's search 7-9 % slower.
    a.hand_off = claim && !a.self_search && a.few_per_sm != 0;
    // The launch's rows to the host as they complete, so that they cross the link while it runs
    // instead of after its last warp (LiDAR-like frames, k = 8, H200, per frame: 100k scan points
    // against a 1M map 0.53-0.56 -> 0.44 ms; self-searches of 100k 0.44-0.46 -> 0.40-0.42, 400k
    // 1.05 -> 0.92, 1M 2.38 -> 1.87; bench/results/2026-11-30-round33.md, section 7).
    if (forward.done) {
      a.forward = forward;
      PCNN_CUDA_TRY(
          cudaMemsetAsync(forward.done, 0, std::size_t(forward.segments()) * sizeof(int), stream));
      if (forward.cursor)
        PCNN_CUDA_TRY(cudaMemsetAsync(forward.cursor, 0, sizeof(*forward.cursor), stream));
    }
    // The counters, and the list, which is read while written (one fill: a second one cost 6 us
    // of a 160 us search).
    const int cleared = kOutlierCounters + (a.slot_end - a.slot_begin);
    PCNN_CUDA_TRY(cudaMemsetAsync(a.outliers, 0, cleared * sizeof(int), stream));
    // Warps that take their groups in turn need no more blocks than are resident at once.
    int grid = blocks;
    if constexpr (takes_slot_groups<CAP>()) {
      int resident = resident_blocks<CAP, false>(a, device, sms);
      if constexpr (claims_outliers<CAP>())
        if (claim) resident = resident_blocks<CAP, true>(a, device, sms);
      grid = std::min(blocks, resident);
    }
    if constexpr (claims_outliers<CAP>())
      if (claim) search_kernel<CAP, true>(a)<<<grid, threads, list_bytes, stream>>>(tree, a);
    if (!claim) search_kernel<CAP, false>(a)<<<grid, threads, list_bytes, stream>>>(tree, a);
    PCNN_CHECK_LAUNCH();
    // Outliers are rare (a fraction of a percent): a few waves of warps cover those left. After
    // a search kernel that does not claim them, started early (knn_tree_outlier_kernel): it
    // searches them from that kernel's last wave on; 1M points (H200) searched 4 % faster
    // clustered and 4-8 % LiDAR-like at k = 8 and 32, uniform unchanged; but 1-4 % slower at
    // k = 64, why is not known, so not from CAP 64 on (bench/results/2026-11-29-round27.md). A
    // claiming launch (one wave) searches its outliers inside.
    const bool early_start = !claim && CAP <= 32 && starts_early<CAP>(device);
    const int outlier_blocks = std::max(1, std::min(blocks * kTreeWarps, 4 * sms));
    cudaLaunchAttribute early{};
    early.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    early.val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(outlier_blocks);
    config.blockDim = dim3(threads);
    config.stream = stream;
    config.attrs = &early;
    config.numAttrs = early_start ? 1 : 0;
    PCNN_CUDA_TRY(cudaLaunchKernelEx(&config, knn_tree_outlier_kernel<CAP>, tree, a));
  }
  // Flagged rows are rare too, except on lattices and duplicates.
  gather_flagged_kernel<CAP>
      <<<std::max(1, std::min(blocks, 2 * sms)), threads, 0, stream>>>(tree, a);
  PCNN_CHECK_LAUNCH();
  if (!a.forward.done) return false;
  // The segments no search kernel completed (rows the gather wrote, among others).
  constexpr int rest_threads = 256;
  forward_rest_kernel<<<std::max(
                            1, std::min(cuda::ceil_div(a.forward.lines(), rest_threads), 4 * sms)),
                        rest_threads, 0, stream>>>(a.forward, a.out_idx, a.out_dist);
  PCNN_CHECK_LAUNCH();
  return true;
}

// Calls f(std::integral_constant<int, CAP>{}) with the smallest list capacity that holds k: the
// one place the capacities are listed.
template <class F>
void with_capacity(int k, F&& f) {
  using std::integral_constant;
  if (k <= 1) return f(integral_constant<int, 1>{});
  if (k <= 2) return f(integral_constant<int, 2>{});
  if (k <= 4) return f(integral_constant<int, 4>{});
  if (k <= 8) return f(integral_constant<int, 8>{});
  if (k <= 16) return f(integral_constant<int, 16>{});
  if (k <= 32) return f(integral_constant<int, 32>{});
  if (k <= 64) return f(integral_constant<int, 64>{});
  static_assert(kMaxK == 128, "add a capacity for the new kMaxK");
  f(integral_constant<int, 128>{});
}

// The search of a launch's slots, each row settled exactly in the kernels' epilogue, then the
// gather of the rows they flagged (see detail/refine.cuh), with no host round trip: the gather
// reads the count of flagged groups on the device.
bool launch_exact(const TreeView& tree, TreeKnnArgs a, const ExactSearch& ex, cudaStream_t stream,
                  DeviceMemoryResource& mr) {
  const int slots = a.slot_end - a.slot_begin;
  if (slots <= 0) return false;
  device_buffer<int2> groups(slots, stream, mr);  // a group holds at least one row
  device_buffer<int> group_count(1, stream, mr);
  device_buffer<float> reach(slots, stream, mr);
  PCNN_CUDA_TRY(cudaMemsetAsync(group_count.data(), 0, sizeof(int), stream));
  a.exact.refs = ex.refs;
  a.exact.queries = ex.queries;
  a.exact.err = ex.err;
  a.exact.term = ex.err.widen_term();
  a.exact.points = tree.points;
  a.exact.filter_exact = ex.filter_exact;
  a.exact.groups = groups.data();
  a.exact.group_count = group_count.data();
  a.exact.reach = reach.data();
  a.exact.refined = a.evaluations ? a.evaluations + 1 : nullptr;
  // A hybrid search of max_nn <= kCollectRoom collects first where its scratch fits (kCollect
  // keys and a count a query), else the heap walk alone: as exact, and slower (1M points,
  // max_nn 32, H100: 2.97 against 1.72 ms uniform, 2.28 against 1.51 LiDAR-like;
  // bench/results/2026-11-27-round15.md).
  device_buffer<std::uint64_t> collect;
  device_buffer<int> collected;
  const std::int64_t available =
      std::isfinite(a.bound.r2) && a.k <= kCollectRoom ? mr.available() : 0;
  if (std::int64_t(slots) * (kCollect * 8 + 4) <=
      available - available / 10 - working_reserve(available)) {
    collect.resize(std::size_t(slots) * kCollect, stream, mr);
    collected.resize(slots, stream, mr);
    a.collect = collect.data();
    a.collected = collected.data();
  }
  bool forwarded = false;
  with_capacity(a.k, [&](auto cap) { forwarded = launch<decltype(cap)::value>(tree, a, stream); });
  return forwarded;
}

// Chunked output: the passes, each downloaded and its rows put in place on the host.
void run_passes(const TreeView& tree, TreeKnnArgs a, int n_queries, const KnnOutput& out,
                const ExactSearch& ex, cudaStream_t stream, DeviceMemoryResource& mr,
                TreeSearchStats& stats) {
  const int k = a.k;
  const auto per_pass = static_cast<int>(out.rows_per_pass);
  std::vector<std::int32_t> idx(static_cast<std::size_t>(per_pass) * k), qid(per_pass);
  std::vector<float> dist(idx.size());
  stats.passes = 0;
  for (int begin = 0; begin < n_queries; begin += per_pass) {
    const int end = begin + std::min(per_pass, n_queries - begin);
    const std::size_t cells = static_cast<std::size_t>(end - begin) * k;
    a.slot_begin = begin;
    a.slot_end = end;
    a.out_slot_base = begin;
    cuda_event start, searched, downloaded;
    start.record(stream);
    launch_exact(tree, a, ex, stream, mr);
    searched.record(stream);
    PCNN_CUDA_TRY(cudaMemcpyAsync(idx.data(), a.out_idx, cells * sizeof(std::int32_t),
                                  cudaMemcpyDeviceToHost, stream));
    PCNN_CUDA_TRY(cudaMemcpyAsync(dist.data(), a.out_dist, cells * sizeof(float),
                                  cudaMemcpyDeviceToHost, stream));
    // The original index of each query of the pass: the w word of its sorted point.
    PCNN_CUDA_TRY(cudaMemcpy2DAsync(qid.data(), sizeof(int), &a.queries[begin].w, sizeof(float4),
                                    sizeof(int), end - begin, cudaMemcpyDeviceToHost, stream));
    downloaded.record(stream);
    PCNN_CUDA_TRY(cudaStreamSynchronize(stream));
    for (int r = 0; r < end - begin; ++r) {
      const std::size_t to = static_cast<std::size_t>(qid[r]) * k, from = std::size_t(r) * k;
      std::memcpy(out.h_idx + to, idx.data() + from, k * sizeof(std::int32_t));
      std::memcpy(out.h_dist + to, dist.data() + from, k * sizeof(float));
    }
    stats.search_ms += searched.since(start);
    stats.download_ms += downloaded.since(searched);
    ++stats.passes;
  }
}

// What a launch takes from the caller's parameters.
TreeKnnArgs knn_args(const KnnParams& params, const RadiusBound& bound) {
  TreeKnnArgs a;
  a.k = params.k;
  a.exclude_self = params.exclude_self;
  a.few_per_sm = params.few_queries_per_sm < 0 ? kFewQueriesPerSm : params.few_queries_per_sm;
  a.bound = bound;
  return a;
}

}  // namespace

bool tree_search_range(const SpatialIndex& index, const float4* queries, bool self_search,
                       int slot_begin, int slot_end, KnnParams params, const RadiusBound& bound,
                       std::int32_t* d_idx, float* d_dist, int* outliers,
                       unsigned long long* evaluations, int query_offset, const ExactSearch& ex,
                       cudaStream_t stream, DeviceMemoryResource& mr, const RowShares* shares,
                       const RowForward* forward) {
  if (slot_end <= slot_begin) return false;
  TreeKnnArgs a = knn_args(params, bound);
  a.queries = queries;
  a.slot_begin = slot_begin;
  a.slot_end = slot_end;
  a.self_search = self_search;
  a.out_idx = d_idx;
  a.out_dist = d_dist;
  a.outliers = outliers;
  a.evaluations = evaluations;
  a.query_offset = query_offset;
  if (shares) a.shares = *shares;
  if (forward && !shares) a.forward = *forward;
  return launch_exact(index.knn_view(), a, ex, stream, mr);
}

TreeSearchStats tree_query(const SpatialIndex& index, const PointsView* queries, KnnParams params,
                           const RadiusBound& bound, const KnnOutput& out, const ExactSearch& ex,
                           cudaStream_t stream, cuda_event& built, DeviceMemoryResource& mr,
                           bool read_stats) {
  device_buffer<float4> sorted_queries;
  if (queries)
    sorted_queries = sort_queries(index, queries->data, queries->stride,
                                  static_cast<int>(queries->count), stream, mr);
  const int n_queries = queries ? static_cast<int>(queries->count) : index.n_total;

  TreeKnnArgs a = knn_args(params, bound);
  a.queries = queries ? sorted_queries.data() : index.points.data();
  a.slot_begin = 0;
  a.slot_end = n_queries;
  a.self_search = queries == nullptr;
  a.out_idx = out.d_idx;
  a.out_dist = out.d_dist;
  a.query_offset = out.query_offset;
  const std::int64_t per_pass = out.rows_per_pass > 0 ? out.rows_per_pass : n_queries;
  device_buffer<int> outliers(tree_outlier_ints(per_pass), stream, mr);
  device_buffer<unsigned long long> evaluations(2, stream, mr);  // evaluations, refined rows
  a.outliers = outliers.data();
  a.evaluations = evaluations.data();
  PCNN_CUDA_TRY(cudaMemsetAsync(evaluations.data(), 0, evaluations.bytes(), stream));
  built.record(stream);
  TreeSearchStats stats;
  if (n_queries == 0) return stats;

  const TreeView tree = index.knn_view();
  if (out.rows_per_pass > 0)
    run_passes(tree, a, n_queries, out, ex, stream, mr, stats);
  else
    launch_exact(tree, a, ex, stream, mr);
  if (!read_stats) return stats;
  const TreeSearchStats counted = read_search_counts(evaluations.data(), stream);
  stats.evaluations = counted.evaluations;
  stats.refined_rows = counted.refined_rows;
  return stats;
}

TreeSearchStats read_search_counts(const unsigned long long* counters, cudaStream_t stream) {
  unsigned long long counts[2] = {0, 0};
  PCNN_CUDA_TRY(cudaMemcpyAsync(counts, counters, sizeof counts, cudaMemcpyDeviceToHost, stream));
  PCNN_CUDA_TRY(cudaStreamSynchronize(stream));
  TreeSearchStats st;
  st.evaluations = static_cast<std::int64_t>(counts[0]);
  st.refined_rows = static_cast<std::int64_t>(counts[1]);
  return st;
}

}  // namespace pcnn::detail
