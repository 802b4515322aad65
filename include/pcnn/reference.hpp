// pcnn — exact CPU references and the tie-aware comparison of kNN results.
#pragma once

#include <cstdint>
#include <string>

#include "pcnn/knn.hpp"
#include "pcnn/points.hpp"

namespace pcnn {

/// Exact kNN by brute force in double precision on all CPU cores: the reference every search
/// mode is tested against. Same conventions as the GPU search (rows sorted by (squared
/// distance, index), -1 / +inf padding, non-finite points skipped). Costs queries × references
/// distance evaluations. Throws pcnn::error on invalid arguments.
KnnResult reference_knn(PointsView refs, const PointsView* queries, KnnParams params);

/// How two kNN results for the same inputs agree.
struct KnnAgreement {
  std::int64_t rows = 0;
  std::int64_t identical_rows = 0;  ///< same indices in the same order
  std::int64_t agreeing_rows = 0;   ///< same neighbors up to ties (see compare_knn)
  double max_abs_sqdist_diff = 0;   ///< largest |a - b| between reported squared distances
  std::int64_t first_bad_row = -1;  ///< first row that does not agree, or -1
  std::string first_problem;        ///< what is wrong with that row
  bool all_agree() const { return agreeing_rows == rows; }
};

/// Compares `a` and `b` row by row, tie-aware. Both must have the same shape. A row agrees when
/// each result lists valid, distinct, finite references (not the query itself when
/// `exclude_self`), both have the same number of neighbors, the reported distances match the
/// distances recomputed in double precision, and position by position the recomputed distances
/// of the two neighbors agree within `rel_tol` (relative). Different indices are accepted only
/// where their distances tie within that tolerance.
KnnAgreement compare_knn(PointsView refs, const PointsView* queries, const KnnResult& a,
                         const KnnResult& b, bool exclude_self, double rel_tol = 1e-5);

}  // namespace pcnn
