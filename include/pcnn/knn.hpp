// pcnn — what a k-nearest-neighbor search takes and returns.
#pragma once

#include <cstdint>
#include <vector>

namespace pcnn {

/// The largest k any search supports.
inline constexpr int kMaxK = 128;

/// What to search for.
struct KnnParams {
  int k = 8;                  ///< neighbors per query, 1..kMaxK
  bool exclude_self = false;  ///< self-searches only: a point is not its own neighbor
  /// CUDA backend: results are produced in one pass when they fit in the device memory available
  /// (see DeviceMemoryResource::available), else in passes over the queries. A value > 0 caps the
  /// queries per pass (rounded up to a multiple of 128), e.g. to bound the memory a call takes.
  std::int64_t max_rows_per_pass = 0;
  /// CUDA backend: a search (or pass) of at most this many queries per multiprocessor gives each
  /// query a warp of its own. Searched 32 to a warp, a few thousand queries leave most of the
  /// GPU idle, and scattered ones make each warp walk the cells of all its queries; a larger
  /// search that still leaves most of the GPU idle gives each warp 16 or 8 queries (k <= 32), and
  /// in a search of a query set whose warps all run at once (k <= 32), warps still walking when
  /// nine in ten are done hand their queries to the idle ones, a warp each. < 0: automatic (64); 0:
  /// none of these (32 queries a warp). (PartitionedIndex and DistributedIndex search their parts
  /// with the automatic value.)
  int few_queries_per_sm = -1;
};

/// Dense kNN results for `rows` queries: row q holds `k` neighbor indices into the indexed
/// points and their squared distances, sorted by (squared distance, index). Where fewer than k
/// neighbors exist (or the query is not finite) the row is padded with -1 and +infinity.
struct KnnResult {
  std::int64_t rows = 0;
  int k = 0;
  std::vector<std::int32_t> indices;  ///< rows × k, row-major
  std::vector<float> sqdist;          ///< rows × k, row-major, squared distances
};

}  // namespace pcnn
