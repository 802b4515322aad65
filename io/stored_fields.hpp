// Every field of every point of a loaded cloud, as PCL read it (shared by the reader and writer).
#pragma once

#include <pcl/PCLPointCloud2.h>

#include "pcnn/io.hpp"

namespace pcnn {

struct StoredFields {
  pcl::PCLPointCloud2 cloud;
};

}  // namespace pcnn
