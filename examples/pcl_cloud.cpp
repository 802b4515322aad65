// A pcl::PointCloud in, neighbors out: pcnn reads the points where PCL keeps them (no copy into
// another layout), and the indices refer to the PCL cloud.
#include <pcl/point_cloud.h>
#include <pcl/point_types.h>
#include <pcnn/error.hpp>
#include <pcnn/knn.hpp>
#include <pcnn/pcl.hpp>

#include <cstdio>

int main() {
  pcl::PointCloud<pcl::PointXYZI> cloud;
  for (int i = 0; i < 1000; ++i) {
    pcl::PointXYZI p;
    p.x = static_cast<float>(i % 10);
    p.y = static_cast<float>((i / 10) % 10);
    p.z = static_cast<float>(i / 100);
    p.intensity = static_cast<float>(i);
    cloud.push_back(p);
  }
  try {
    const pcnn::KnnResult r = pcnn::gpu_knn(pcnn::view(cloud), nullptr, {6, true});
    std::printf("neighbors of point 555 (%g, %g, %g):", cloud[555].x, cloud[555].y, cloud[555].z);
    for (int j = 0; j < r.k; ++j) std::printf(" %d", r.indices[555 * r.k + j]);
    std::printf("\n");
  } catch (const pcnn::no_device_error& e) {
    std::printf("no GPU here: %s\n", e.what());
  }
}
