// pcnn testing — the CPU baseline: PCL's k-d tree (FLANN), the tool users run today, on all cores.
#pragma once

#include "pcnn/filters.hpp"
#include "pcnn/knn.hpp"
#include "pcnn/normals.hpp"
#include "pcnn/points.hpp"
#include "pcnn/radius.hpp"
#include "pcnn/testing/reference.hpp"

namespace pcnn {

/// Wall-clock time of the CPU baseline's parts, in milliseconds.
struct CpuKnnTimings {
  double build_ms = 0;  ///< building the k-d tree over the finite references
  double query_ms = 0;  ///< all queries, spread over `threads` threads
  int threads = 0;
};

/// kNN with pcl::KdTreeFLANN (exact search), queries spread over all cores with OpenMP.
/// Same conventions as the GPU search: rows sorted by (squared distance, index), -1 / +inf
/// padding, non-finite points skipped; FLANN's distances are computed in float.
/// @throws pcnn::error on invalid arguments (as validate_knn_args).
KnnResult pcl_knn(PointsView refs, const PointsView* queries, KnnParams params,
                  CpuKnnTimings* timings = nullptr);

/// Radius search with pcl::KdTreeFLANN::radiusSearch on all cores (FLANN's float distances, so
/// points within rounding of r can fall on either side; see compare_radius). Rows sorted by
/// (squared distance, index). `max_nn` > 0 keeps only the nearest max_nn within r (the hybrid
/// search; the dense form of HybridResult is returned by pcl_hybrid).
RadiusResult pcl_radius(PointsView refs, const PointsView* queries, RadiusParams params,
                        CpuKnnTimings* timings = nullptr, int max_nn = 0);
HybridResult pcl_hybrid(PointsView refs, const PointsView* queries, HybridParams params,
                        CpuKnnTimings* timings = nullptr);

/// pcl::StatisticalOutlierRemoval / pcl::RadiusOutlierRemoval on the same points (as an
/// unorganized pcl::PointCloud<pcl::PointXYZ>, is_dense when every point is finite), for
/// comparison: `kept`, and for SOR the statistics it decides with (`mean`, `stddev`,
/// `threshold`: PCL does not expose its own, so they are computed as the GPU filter computes
/// them, outside the time measured). `ms` receives the wall time of PCL's filter.
FilterResult pcl_statistical_outlier_removal(PointsView pts, SorParams params,
                                             double* ms = nullptr);
FilterResult pcl_radius_outlier_removal(PointsView pts, RorParams params, double* ms = nullptr);

/// pcl::NormalEstimationOMP<PointXYZ, Normal> (a pcl::search::KdTree, all cores) over the same
/// points (NaN where a coordinate is not finite; is_dense when none is): k (setKSearch) or radius
/// (setRadiusSearch; PCL has no max_nn, which is refused), the viewpoint given as floats.
/// `ms` receives the wall time of building the tree and computing. Rows as NormalsResult.
NormalsResult pcl_normals(PointsView pts, const NormalParams& params, double* ms = nullptr);

}  // namespace pcnn
