// pcnn — the index: one owning object, one family of searches, for every caller.
//
//   pcnn::Index index(pcnn::host_points(xyz.data(), n));            // builds (GPU if usable)
//   pcnn::KnnResult r = index.self_knn({8, /*exclude_self=*/true});
//   index.knn(queries, {8}, indices_view, sqdist_view, stream);     // into the caller's memory
//
// Conventions of every search (both backends, every output location):
// - kNN rows hold the k nearest indexed points sorted by (squared distance, index): ties go to
//   the smaller index. Where fewer than k exist (or the query is not finite) the row is padded
//   with index -1 and squared distance +infinity.
// - Radius membership is d² <= r² (inclusive), decided exactly; radius rows in CSR form.
// - Distances are squared, in the units of the coordinates squared, as float.
// - Outputs are caller-owned views (host: pageable or page-locked; device: CUDA backend only),
//   their sizes checked. The stream is the last argument; a call without `_async` synchronizes
//   with it before returning, an `_async` call does not: its outputs are ready once the stream
//   has reached that point. Until then, device and page-locked host inputs of the call must not
//   change (pageable ones are staged before it returns). An `_async` call into host outputs
//   waits for its rows (only device outputs make it fully asynchronous). build() and the
//   destructor wait for the last `_async` call, whichever stream it was on.
// - Convenience forms return owning results (KnnResult, RadiusResult, HybridResult).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "pcnn/cuda_stream.hpp"
#include "pcnn/knn.hpp"
#include "pcnn/memory.hpp"
#include "pcnn/points.hpp"
#include "pcnn/radius.hpp"

namespace pcnn {

namespace detail {
struct IndexAccess;  // features built on an index (normals) reach its backend through this
}  // namespace detail

/// What runs the searches.
enum class Backend {
  automatic,  ///< the CUDA backend when a usable device is present, else the CPU backend
  cuda,       ///< the GPU (throws pcnn::no_device_error when none is usable)
  cpu,        ///< exact multi-threaded CPU search (host memory only)
};
/// Parses "auto", "cuda" or "cpu"; throws pcnn::invalid_argument_error otherwise.
Backend parse_backend(const std::string& name);
const char* to_string(Backend backend);

/// How host points travel to the device and host results come back (CUDA backend). Outputs or
/// inputs that are already page-locked are copied asynchronously whatever the mode.
enum class Staging {
  automatic,   ///< mapped on integrated GPUs (Jetson: host and device share memory); else per
               ///< transfer: pinned below 8 MB, registered from 8 MB
  pageable,    ///< plain copies from and to ordinary memory (the driver stages them)
  pinned,      ///< through page-locked staging buffers the index keeps (cudaHostAlloc);
               ///< uploads of more than 64 MB through two 32 MB chunks of it
  registered,  ///< the caller's own buffers page-locked for each call's transfers
               ///< (cudaHostRegister, released when the call returns)
  mapped,      ///< zero-copy: kernels read and write host memory through its device address
};
/// Parses "auto", "pageable", "pinned", "registered" or "mapped".
Staging parse_staging(const std::string& name);
const char* to_string(Staging staging);

struct IndexOptions {
  Backend backend = Backend::automatic;
  int device = 0;  ///< CUDA device ordinal
  /// Device memory for the index and its searches; null: a pool the index creates and owns
  /// (destroying the index then waits for all work on its device: see PoolResource). Share one
  /// resource between indexes to give them one budget (see LimitedResource).
  std::shared_ptr<DeviceMemoryResource> memory;
  Staging staging = Staging::automatic;
  /// Queries per chunk when results go to host memory in chunks over two streams (download of
  /// one chunk overlapping the search of the next); 0: automatic. A kNN search whose kernels
  /// write its rows to host memory themselves (README, "Timing") takes one pass, no chunks;
  /// above 512 MiB of rows (640 below k = 16) it writes them as they are done only where a chunk
  /// of its rows (by original index) is done before the last pass would begin, else by sweeps
  /// (k >= 16) or the first 512 MiB of them.
  std::int64_t chunk_rows = 0;
  int threads = 0;  ///< CPU backend: worker threads; 0: every hardware thread
};

/// Where the time of the last synchronizing call went (milliseconds).
struct SearchTimings {
  Backend backend = Backend::automatic;  ///< the backend that ran
  Staging staging = Staging::automatic;  ///< CUDA: the resolved transfer mode
  double total_ms = 0;                   ///< wall clock of the whole call
  float upload_ms = 0;                   ///< CUDA: device time of host-to-device copies (events)
  float build_ms = 0;   ///< building the index (build) or ordering the queries (searches)
  float search_ms = 0;  ///< the search itself (CUDA: device time; CPU: wall clock)
  /// CUDA: device time of device-to-host copies; 0 where the search's kernels wrote the rows to
  /// host memory themselves (mapped staging; most kNN searches of k <= 32 into page-locked rows
  /// pcnn made: allocate_page_locked, PageLock, the index's staging buffers; see the README's
  /// timing notes), their transfer then within search_ms; where they wrote only the first part
  /// (large rows of queries in no spatial order), the copy of the rest after the search
  float download_ms = 0;
  std::int64_t upload_bytes = 0;
  /// CUDA: bytes of rows the download moved; where download_ms is 0 (the kernels wrote every
  /// row), the bytes of all the rows
  std::int64_t download_bytes = 0;
  std::int64_t distance_evaluations = 0;  ///< query-point distances computed (CUDA)
  /// CUDA kNN and hybrid: rows the exact refinement could not settle from the float search's
  /// k and gathered again (near-ties at the k-th neighbor; see gpu/detail/refine.cuh)
  std::int64_t refined_rows = 0;
  int passes = 1;  ///< passes or chunks the rows were produced in
};

/// Counters of an index's memory: device memory from its resource, page-locked host buffers it
/// allocated and caller buffers it page-locked. A frame loop of equal sizes adds nothing to the
/// `*allocations` after its first frame (registered staging registers the caller's buffers anew
/// for each call; page-locked caller buffers are used as they are in every mode).
struct IndexMemoryStats {
  MemoryStats device;
  std::int64_t device_allocations = 0;  ///< blocks the index's workspace obtained, ever
  std::int64_t pinned_allocations = 0;  ///< cudaHostAlloc calls, ever
  std::int64_t registrations = 0;       ///< cudaHostRegister calls, ever
  std::int64_t registered_now = 0;      ///< page-locked ranges of caller buffers at this moment
};

/// The one owning index over a cloud. Move-only. Built on the caller's stream; rebuilt in place
/// across frames (build() again), reusing its memory when the size does not grow. An index is
/// used by one thread at a time; different indexes may be used from different threads at once,
/// except that CUDA indexes staging the same pageable host memory at once (one cloud built into
/// indexes on two devices from two threads) race on its page-locking (each locks it for its
/// copy and unlocks it after): page-lock shared host memory first (pcnn::PageLock), as
/// pcnn::PartitionedIndex does for its replicas.
class Index {
 public:
  /// An empty index (size 0) with these options; build() fills it.
  explicit Index(IndexOptions options = {});
  /// Builds over `points` (host or device memory). Synchronizes with `stream`.
  /// @throws pcnn::invalid_argument_error (bad view, or a device view with the CPU backend),
  ///         pcnn::no_device_error (Backend::cuda without a usable device),
  ///         pcnn::out_of_memory_error, pcnn::cuda_error.
  explicit Index(PointsView points, IndexOptions options = {}, cudaStream_t stream = nullptr);
  ~Index();
  Index(Index&&) noexcept;
  Index& operator=(Index&&) noexcept;
  Index(const Index&) = delete;
  Index& operator=(const Index&) = delete;

  /// (Re)builds over `points`; the previous points are forgotten. The index keeps its own copy
  /// of the coordinates, so `points` may change or go away once this returns, but not during
  /// the call (the CPU backend, which reads them twice, throws pcnn::invalid_argument_error where
  /// it sees them change). A build that throws leaves the index empty. Synchronizes.
  void build(PointsView points, cudaStream_t stream = nullptr);

  Backend backend() const;           ///< the resolved backend (never automatic)
  std::int64_t size() const;         ///< points indexed (result indices refer to them)
  std::int64_t finite_size() const;  ///< of which finite
  const IndexOptions& options() const;
  /// Timings of the last call that synchronized (build or search).
  const SearchTimings& last_timings() const;
  IndexMemoryStats memory_stats() const;

  // ---- kNN of separate queries (`queries` host or device memory) ----
  /// Writes rows × k into `indices` and `sqdist` (each queries.count × params.k).
  /// `params.exclude_self` must be false (see self_knn). Synchronizes.
  void knn(PointsView queries, const KnnParams& params, MatrixView<std::int32_t> indices,
           MatrixView<float> sqdist, cudaStream_t stream = nullptr);
  /// The same without synchronizing.
  void knn_async(PointsView queries, const KnnParams& params, MatrixView<std::int32_t> indices,
                 MatrixView<float> sqdist, cudaStream_t stream = nullptr);
  /// The same into an owning result. Synchronizes.
  KnnResult knn(PointsView queries, const KnnParams& params, cudaStream_t stream = nullptr);

  // ---- kNN of the indexed points themselves (params.exclude_self allowed) ----
  void self_knn(const KnnParams& params, MatrixView<std::int32_t> indices, MatrixView<float> sqdist,
                cudaStream_t stream = nullptr);
  void self_knn_async(const KnnParams& params, MatrixView<std::int32_t> indices,
                      MatrixView<float> sqdist, cudaStream_t stream = nullptr);
  KnnResult self_knn(const KnnParams& params, cudaStream_t stream = nullptr);
  /// Rows [first_row, first_row + indices.rows) of the self-search only: to stream results
  /// larger than memory chunk by chunk, or to share the rows of one cloud between processes.
  /// Synchronizes.
  void self_knn_rows(std::int64_t first_row, const KnnParams& params,
                     MatrixView<std::int32_t> indices, MatrixView<float> sqdist,
                     cudaStream_t stream = nullptr);

  // ---- radius: every indexed point within params.radius, CSR ----
  /// Owning result. Synchronizes.
  RadiusResult radius(PointsView queries, const RadiusParams& params,
                      cudaStream_t stream = nullptr);
  RadiusResult self_radius(const RadiusParams& params, cudaStream_t stream = nullptr);
  /// Count-then-fill, for results of unknown size in the caller's memory: radius_count writes
  /// the CSR offsets (rows + 1 entries, offsets[0] = 0) and returns the total, counting only
  /// (cheap: no pair is stored); radius_fill, with the same queries and parameters and those
  /// offsets, writes offsets[rows] entries into `indices` and `sqdist`. Both synchronize.
  ///
  /// To fill results larger than memory range by range, give radius_fill a range of the queries
  /// (a sub-view) with its slice of the offsets (rows + 1 entries from the count's offsets,
  /// offsets[0] need not be 0): it writes offsets[rows] - offsets[0] entries, row q's at
  /// offsets[q] - offsets[0]. The offsets must be those the count gave for these queries:
  /// offsets whose size, order or total are wrong are refused before anything is written, but a
  /// row whose count differs from its offsets is found only as the rows are filled, so that
  /// pcnn::invalid_argument_error leaves `indices` and `sqdist` partly written (and nothing else
  /// changed).
  std::int64_t radius_count(PointsView queries, const RadiusParams& params,
                            ArrayView<std::int64_t> offsets, cudaStream_t stream = nullptr);
  void radius_fill(PointsView queries, const RadiusParams& params,
                   ArrayView<const std::int64_t> offsets, ArrayView<std::int32_t> indices,
                   ArrayView<float> sqdist, cudaStream_t stream = nullptr);
  std::int64_t self_radius_count(const RadiusParams& params, ArrayView<std::int64_t> offsets,
                                 cudaStream_t stream = nullptr);
  void self_radius_fill(const RadiusParams& params, ArrayView<const std::int64_t> offsets,
                        ArrayView<std::int32_t> indices, ArrayView<float> sqdist,
                        cudaStream_t stream = nullptr);
  /// Rows [first_row, first_row + offsets.size - 1) of the self radius search, as radius_fill
  /// fills a range: `offsets` is that range's slice of self_radius_count's offsets. Synchronizes.
  void self_radius_fill_rows(std::int64_t first_row, const RadiusParams& params,
                             ArrayView<const std::int64_t> offsets, ArrayView<std::int32_t> indices,
                             ArrayView<float> sqdist, cudaStream_t stream = nullptr);

  // ---- hybrid: the max_nn nearest within params.radius, dense rows as kNN ----
  void hybrid(PointsView queries, const HybridParams& params, MatrixView<std::int32_t> indices,
              MatrixView<float> sqdist, cudaStream_t stream = nullptr);
  HybridResult hybrid(PointsView queries, const HybridParams& params,
                      cudaStream_t stream = nullptr);
  void self_hybrid(const HybridParams& params, MatrixView<std::int32_t> indices,
                   MatrixView<float> sqdist, cudaStream_t stream = nullptr);
  HybridResult self_hybrid(const HybridParams& params, cudaStream_t stream = nullptr);
  /// Rows [first_row, first_row + indices.rows) of the self hybrid search only (as
  /// self_knn_rows). Synchronizes.
  void self_hybrid_rows(std::int64_t first_row, const HybridParams& params,
                        MatrixView<std::int32_t> indices, MatrixView<float> sqdist,
                        cudaStream_t stream = nullptr);

  /// The backends implement this (internal).
  struct Backend_;

 private:
  friend struct detail::IndexAccess;
  void check_call(const PointsView* queries, bool exclude_self) const;
  template <class T>
  void check_output(Memory memory) const;
  void check_radius_call(const PointsView* queries, const RadiusParams& params) const;
  void dense(const PointsView* queries, std::int64_t first_row, const KnnParams& params,
             MatrixView<std::int32_t> indices, MatrixView<float> sqdist, cudaStream_t stream,
             bool sync);
  KnnResult owning_knn(const PointsView* queries, const KnnParams& params, cudaStream_t stream);
  std::int64_t count_rows(const PointsView* queries, const RadiusParams& params,
                          ArrayView<std::int64_t> offsets, cudaStream_t stream);
  void fill_rows(const PointsView* queries, std::int64_t first_row, const RadiusParams& params,
                 ArrayView<const std::int64_t> offsets, ArrayView<std::int32_t> indices,
                 ArrayView<float> sqdist, cudaStream_t stream);
  void hybrid_rows(const PointsView* queries, std::int64_t first_row, const HybridParams& params,
                   MatrixView<std::int32_t> indices, MatrixView<float> sqdist, cudaStream_t stream);
  HybridResult owning_hybrid(const PointsView* queries, const HybridParams& params,
                             cudaStream_t stream);

  std::unique_ptr<Backend_> impl_;  // first: what the timings and options describe
  IndexOptions options_;
  SearchTimings timings_;
};

}  // namespace pcnn
