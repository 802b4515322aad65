// pcnn — what radius search (every neighbor within r) and hybrid search (at most max_nn nearest
// within r) take and return.
#pragma once

#include <cstdint>
#include <vector>

#include "pcnn/knn.hpp"

namespace pcnn {

/// Every indexed point p with |p - q|² <= radius² (inclusive), the squared distance computed in
/// double precision from the coordinates.
struct RadiusParams {
  double radius = 0;                   ///< finite, >= 0 (0 finds exact duplicates)
  bool exclude_self = false;           ///< self-searches only: a point is not its own neighbor
  std::int64_t max_rows_per_pass = 0;  ///< as in KnnParams
};

/// Radius results in CSR form: the neighbors of query q are entries offsets[q] .. offsets[q+1]-1
/// of `indices` and `sqdist`, sorted by (squared distance, index). Queries with non-finite
/// coordinates have no neighbors. Sizes are exact: nothing is truncated.
struct RadiusResult {
  std::int64_t rows = 0;
  std::vector<std::int64_t> offsets;  ///< rows + 1 entries, offsets[0] == 0
  std::vector<std::int32_t> indices;  ///< offsets[rows] entries
  std::vector<float> sqdist;          ///< offsets[rows] entries
  std::int64_t count(std::int64_t q) const { return offsets[q + 1] - offsets[q]; }
};

/// The `max_nn` nearest neighbors among those within `radius`.
struct HybridParams {
  double radius = 0;
  int max_nn = 8;  ///< 1..kMaxK
  bool exclude_self = false;
  std::int64_t max_rows_per_pass = 0;  ///< as in KnnParams
};

/// Hybrid results: dense rows of `max_nn` (a KnnResult with k = max_nn, -1 / +inf padded), and
/// how many entries of each row are filled.
struct HybridResult {
  KnnResult knn;
  std::vector<std::int32_t> counts;  ///< per query, 0..max_nn
};

/// The count of filled entries of each row of a dense result (entries before the first -1).
std::vector<std::int32_t> row_counts(const KnnResult& r);

}  // namespace pcnn
