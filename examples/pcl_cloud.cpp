// A pcl::PointCloud in, neighbors out: pcnn reads the points where PCL keeps them (a strided view,
// no copy into another layout), and the indices in the results refer to the PCL cloud. Only
// pcnn/pcl.hpp includes PCL; link pcnn::pcnn and PCL's common headers, nothing more.
#include <pcl/point_cloud.h>
#include <pcl/point_types.h>
#include <pcnn/error.hpp>
#include <pcnn/index.hpp>
#include <pcnn/pcl.hpp>

#include <cstdio>

int main() {
  // A 10 x 10 x 10 lattice with 1 m spacing; intensity rides along and is ignored by pcnn.
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
    // pcnn::view(cloud): x, y, z of each point, 8 floats apart (sizeof(PointXYZI) / 4).
    pcnn::Index index(pcnn::view(cloud));
    pcnn::KnnParams params;
    params.k = 6;
    params.exclude_self = true;
    const pcnn::KnnResult r = index.self_knn(params);
    // The six lattice neighbors at 1 m, ties broken by the smaller index.
    std::printf("neighbors of point 555 (%g, %g, %g):", cloud[555].x, cloud[555].y, cloud[555].z);
    for (int j = 0; j < r.k; ++j) std::printf(" %d", r.indices[555 * r.k + j]);
    std::printf("  (searched on: %s)\n", pcnn::to_string(index.backend()));
  } catch (const pcnn::error& e) {
    std::fprintf(stderr, "pcnn: %s\n", e.what());
    return 1;
  }
}
