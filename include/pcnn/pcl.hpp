// pcnn — PCL convenience: a pcnn::PointsView of a pcl::PointCloud, without copying.
// The one pcnn header that includes PCL; link pcnn::pcnn only (PCL's headers are yours).
#pragma once

#include <pcl/point_cloud.h>

#include <cstddef>
#include <type_traits>

#include "pcnn/points.hpp"

namespace pcnn {

/// A view of the x, y, z of every point of `cloud` (any PCL point type with x, y, z as three
/// consecutive floats: PointXYZ, PointXYZI, PointXYZRGB, PointNormal, ...). The view is valid
/// while the cloud is neither resized nor destroyed; indices in results refer to `cloud`.
template <class PointT>
PointsView view(const pcl::PointCloud<PointT>& cloud) {
  static_assert(offsetof(PointT, y) == offsetof(PointT, x) + sizeof(float) &&
                    offsetof(PointT, z) == offsetof(PointT, x) + 2 * sizeof(float),
                "x, y, z must be consecutive floats");
  static_assert(sizeof(PointT) % sizeof(float) == 0, "point size must be a multiple of 4 bytes");
  return PointsView{cloud.empty() ? nullptr : &cloud.points[0].x,
                    static_cast<std::int64_t>(cloud.size()),
                    static_cast<std::int64_t>(sizeof(PointT) / sizeof(float))};
}

}  // namespace pcnn
