// pcnn testing — double-precision references of the cloud statistics.
#pragma once

#include <cstdint>

#include "pcnn/points.hpp"
#include "pcnn/stats.hpp"

namespace pcnn {

/// The double-precision references the tests compare with (sequential sums in long double).
CloudStats reference_cloud_stats(PointsView pts);
ValueStats reference_value_stats(const float* values, std::int64_t n);
ValueStats reference_value_stats(const double* values, std::int64_t n);

}  // namespace pcnn
