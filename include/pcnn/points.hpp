// pcnn — non-owning views of point coordinates.
#pragma once

#include <cstdint>

namespace pcnn {

/// A non-owning view of `count` points of three floats (x, y, z) each, `stride` floats apart
/// (3 for packed xyz, 4 for pcl::PointXYZ, 8 for pcl::PointNormal...). Points whose coordinates
/// are not finite are skipped as neighbors and get empty (-1) result rows as queries.
struct PointsView {
  const float* data = nullptr;
  std::int64_t count = 0;
  std::int64_t stride = 3;
};

}  // namespace pcnn
