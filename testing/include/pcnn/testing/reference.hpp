// pcnn testing — exact CPU references (brute force in double precision) and the comparison of
// results: the oracles of the tests, benchmarks and --compare-cpu. Not installed.
#pragma once

#include <cstdint>
#include <string>

#include "pcnn/knn.hpp"
#include "pcnn/points.hpp"
#include "pcnn/radius.hpp"

namespace pcnn {

/// Checks the arguments of a kNN (k in 1..kMaxK, valid views, exclude_self only without
/// queries); throws pcnn::invalid_argument_error naming what is wrong.
void validate_knn_args(PointsView refs, const PointsView* queries, KnnParams params);
/// Checks a radius (finite, >= 0).
void validate_radius(double radius);

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

/// How another tool's kNN rows (e.g. PCL's) differ from the exact rows (pcnn's contract): the
/// same indices; other indices at exactly the same distances (ties broken another way); other
/// indices at distances within `rel_tol` (near-ties ordered by rounded distances); or farther.
struct ExactnessReport {
  std::int64_t rows = 0, identical = 0, tie_order = 0, rounding = 0, wrong = 0;
  std::int64_t first_wrong = -1;
};
ExactnessReport classify_against_exact(PointsView refs, const PointsView* queries,
                                       const KnnResult& exact, const KnnResult& other,
                                       double rel_tol = 1e-5);

/// Exact radius and hybrid references in double precision on all CPU cores (costs queries ×
/// references distance evaluations).
RadiusResult reference_radius(PointsView refs, const PointsView* queries, RadiusParams params);
HybridResult reference_hybrid(PointsView refs, const PointsView* queries, HybridParams params);

/// How two radius results for the same inputs agree (e.g. pcnn and PCL, whose float distances
/// can put a point within rounding of r on either side).
struct RadiusAgreement {
  std::int64_t rows = 0;
  std::int64_t identical_rows = 0;   ///< the same neighbors in the same order
  std::int64_t agreeing_rows = 0;    ///< the same neighbors up to points within rounding of r
  std::int64_t boundary_points = 0;  ///< neighbors listed by one side only, within rounding of r
  std::int64_t first_bad_row = -1;
  std::string first_problem;
  bool all_agree() const { return agreeing_rows == rows; }
};

/// Compares row by row: every listed neighbor must be a valid, finite reference (not the query
/// when `exclude_self`) whose exact squared distance is <= r² (1 + rel_tol); a neighbor listed
/// on one side only is accepted when its exact squared distance is within rel_tol of r².
RadiusAgreement compare_radius(PointsView refs, const PointsView* queries, const RadiusResult& a,
                               const RadiusResult& b, double radius, bool exclude_self,
                               double rel_tol = 1e-5);

/// The same for hybrid results: position by position the neighbors' exact distances must agree
/// within rel_tol (ties may swap indices, as in compare_knn), and where one row is longer its
/// extra neighbors must lie within rounding of r.
RadiusAgreement compare_hybrid(PointsView refs, const PointsView* queries, const HybridResult& a,
                               const HybridResult& b, double radius, bool exclude_self,
                               double rel_tol = 1e-5);

/// The first row where two radius results differ (neighbors, distances or order), or -1.
std::int64_t first_radius_difference(const RadiusResult& a, const RadiusResult& b);

}  // namespace pcnn
