// The searches of the spatial index behind the CUDA backend: kNN (and hybrid, a kNN bounded by a
// radius) and radius, over queries already on the device.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/row_shares.hpp"
#include "device_buffer.cuh"
#include "exact.cuh"
#include "pcnn/index.hpp"
#include "pcnn/knn.hpp"
#include "pcnn/radius.hpp"
#include "radius_bound.cuh"
#include "row_forward.cuh"
#include "spatial_index.cuh"

namespace pcnn::detail {

struct TreeSearchStats {
  std::int64_t evaluations = 0;   // query-point distance computations
  std::int64_t refined_rows = 0;  // rows whose exact refinement gathered candidates again
  // Set when the rows went to the host in several passes (KnnOutput::rows_per_pass > 0):
  int passes = 1;
  float search_ms = 0, download_ms = 0;
};

/// Where a tree search writes its rows (k entries each). One pass: `d_idx`/`d_dist` hold every
/// row, indexed by original query. Chunked (`rows_per_pass` > 0, a multiple of kTreeQueryBlock):
/// the queries go in passes of that many (in curve order) through `d_idx`/`d_dist` (sized for
/// one pass), and each pass is downloaded and its rows put in place in `h_idx`/`h_dist` (rows × k,
/// host) — for results larger than the device memory left.
struct KnnOutput {
  std::int32_t* d_idx = nullptr;
  float* d_dist = nullptr;
  std::int64_t rows_per_pass = 0;
  std::int32_t* h_idx = nullptr;
  float* h_dist = nullptr;
  /// The original index of the first query: with exclude_self, query i is reference
  /// i + query_offset (a chunk of the references searched as a separate query set).
  int query_offset = 0;
};

/// Queries a launch of the tree search covers per block; passes are multiples of it.
inline constexpr int kTreeQueryBlock = 128;

/// A search of an existing index: `queries` (device pointers) or, when null, the index's own
/// points. `built` is recorded after the queries are ordered, before the search kernels.
/// `bound` limits neighbors to a radius (hybrid search); the default is no limit. Every row is
/// refined to the exact k nearest from `ex` (detail/refine.cuh). `read_stats` false: no
/// synchronization, unless the rows go to the host in passes.
TreeSearchStats tree_query(const SpatialIndex& index, const PointsView* queries, KnnParams params,
                           const RadiusBound& bound, const KnnOutput& out, const ExactSearch& ex,
                           cudaStream_t stream, cuda_event& built, DeviceMemoryResource& mr,
                           bool read_stats = true);

/// A search's two counters on the device (distance evaluations, refined rows) read into a
/// TreeSearchStats once `stream` is done. Synchronizes.
TreeSearchStats read_search_counts(const unsigned long long* counters, cudaStream_t stream);

/// The ints of a tree search's outlier buffer for launches of up to `slots` queries: its
/// counters, a list, and the listed queries' limits (TreeKnnArgs::outliers).
inline constexpr int kOutlierCounters = 6;
inline std::int64_t tree_outlier_ints(std::int64_t slots) { return kOutlierCounters + 2 * slots; }

/// One launch of the tree kNN over the sorted queries [slot_begin, slot_end) (the index's own
/// points when `self_search`), rows written by original query index; `outliers` holds
/// tree_outlier_ints(slot_end - slot_begin) ints; with exclude_self, query i is indexed point
/// i + query_offset; `shares` given, rows go to those shares instead of d_idx / d_dist. With
/// `forward` (rows for every query, slot_begin 0, forwardable_rows; not with `shares`), a launch of
/// the shared walk (knn_tree.cu; not its few-queries, first-copies or hybrid paths) also copies
/// every row to the host rows there (row_forward.cuh), and then returns true: no download is
/// needed. Does not synchronize.
bool tree_search_range(const SpatialIndex& index, const float4* queries, bool self_search,
                       int slot_begin, int slot_end, KnnParams params, const RadiusBound& bound,
                       std::int32_t* d_idx, float* d_dist, int* outliers,
                       unsigned long long* evaluations, int query_offset, const ExactSearch& ex,
                       cudaStream_t stream, DeviceMemoryResource& mr,
                       const RowShares* shares = nullptr, const RowForward* forward = nullptr);

/// Loads the kernels a search takes only for rows it cannot forward in one pass (where each
/// chunk's last query lies, the non-finite queries' empty rows) on `device` (the current device),
/// once a process: a command's warm-up searches forward their small rows and never launch them,
/// and a 10M-point search at k = 16 then loaded them in its timed path (0.4-0.55 ms of host time
/// with the device idle, H200, bench/results/2026-11-30-round38.md).
void load_search_kernels(int device);
/// After the device's context is reset: the next load_search_kernels loads again.
void forget_search_kernels(int device);

/// Throws pcnn::out_of_memory_error when `working` bytes plus the per-query memory of a radius
/// search of `rows` queries exceed `available`.
void check_radius_fits(std::int64_t working, std::int64_t rows, std::int64_t available);

/// Radius search of an existing index (see pcnn::Index::radius): `queries` are device
/// pointers, or null for the index's own points. `start` and `uploaded` were recorded by the
/// caller around its uploads; fills `timings` when given.
RadiusResult radius_query(const SpatialIndex& index, const PointsView* queries,
                          const RadiusParams& params, SearchTimings* timings, cudaStream_t stream,
                          cuda_event& start, cuda_event& uploaded, const ExactSearch& ex,
                          DeviceMemoryResource& mr);

/// The count of a radius search only: writes the CSR offsets (rows + 1) to host `h_offsets` and
/// returns the total. Nothing is filled. Synchronizes.
std::int64_t radius_count_query(const SpatialIndex& index, const PointsView* queries,
                                const RadiusParams& params, std::int64_t* h_offsets,
                                SearchTimings* timings, cudaStream_t stream, cuda_event& start,
                                cuda_event& uploaded, const ExactSearch& ex,
                                DeviceMemoryResource& mr);

/// The fill of a radius search of `queries` (device pointers, or null for the index's own
/// points; with exclude_self, query i is indexed point i + query_offset): counts again, checks
/// that each row's count is the one `given` (rows + 1 offsets, any base) says, and writes row q
/// at given[q] - given[0] of host `out_idx` / `out_dist`, in passes when the device cannot hold
/// every entry at once. Synchronizes.
/// @throws pcnn::invalid_argument_error when `given` are not this search's offsets.
void radius_fill_query(const SpatialIndex& index, const PointsView* queries,
                       const RadiusParams& params, int query_offset, const std::int64_t* given,
                       std::int32_t* out_idx, float* out_dist, SearchTimings* timings,
                       cudaStream_t stream, cuda_event& start, cuda_event& uploaded,
                       const ExactSearch& ex, DeviceMemoryResource& mr);

}  // namespace pcnn::detail
