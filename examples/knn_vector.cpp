// The 8 nearest neighbors of every point of a cloud held in a std::vector<float>.
#include <pcnn/error.hpp>
#include <pcnn/knn.hpp>

#include <cstdio>
#include <vector>

int main() {
  std::vector<float> xyz = {0, 0, 0, 1, 0, 0, 0, 2, 0, 5, 5, 5, 1, 1, 0, 0.5f, 0, 0.2f};
  const pcnn::PointsView cloud{xyz.data(), static_cast<std::int64_t>(xyz.size() / 3), 3};
  try {
    const pcnn::KnnResult r = pcnn::gpu_knn(cloud, nullptr, {/*k=*/3, /*exclude_self=*/true});
    for (std::int64_t i = 0; i < r.rows; ++i) {
      std::printf("point %lld:", static_cast<long long>(i));
      for (int j = 0; j < r.k; ++j)
        std::printf("  %d (d^2 %.3f)", r.indices[i * r.k + j], r.sqdist[i * r.k + j]);
      std::printf("\n");
    }
  } catch (const pcnn::no_device_error& e) {
    std::printf("no GPU here: %s\n", e.what());
  }
}
