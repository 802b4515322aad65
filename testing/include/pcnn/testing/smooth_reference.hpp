// pcnn testing — CPU references of the smoothing.
#pragma once

#include <vector>

#include "pcnn/knn.hpp"
#include "pcnn/points.hpp"
#include "pcnn/smooth.hpp"

namespace pcnn {

/// CPU references (single-threaded loops, same formulas and summation order). The unorganized
/// one takes the neighbors (a self-search, exclude_self, k = params.k) so that both sides smooth
/// over the same lists.
std::vector<float> reference_smooth_organized(PointsView pts, int width, int height,
                                              const OrganizedSmoothParams& params);
std::vector<float> reference_smooth_unorganized(PointsView pts, const KnnResult& neighbors,
                                                const UnorganizedSmoothParams& params);

}  // namespace pcnn
