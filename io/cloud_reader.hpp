// The cloud loader's choice of reader, for the tests that compare pcnn's own reader with PCL's.
#pragma once

#include <array>
#include <string>

#include "pcnn/io.hpp"

namespace pcnn::io_detail {

/// `fastest`: x, y and z gathered by the input gate itself where it reads the layout (see
/// check_input), PCL otherwise and whenever every field is kept. `pcl`: PCL always.
enum class CloudReader { fastest, pcl };

/// pcnn::load_cloud with the reader named; both give the same Cloud, byte for byte.
Cloud load_cloud(const std::string& path, const std::array<double, 3>* origin, bool keep_fields,
                 CloudFormat format, CloudReader reader);

}  // namespace pcnn::io_detail
