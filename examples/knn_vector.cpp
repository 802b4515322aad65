// The 3 nearest neighbors of every point of a cloud held in a std::vector<float>.
// The index searches on the GPU when one is usable and on the CPU otherwise (Backend::automatic,
// the default); both give the same, exact answer.
#include <pcnn/error.hpp>
#include <pcnn/index.hpp>

#include <cstdint>
#include <cstdio>
#include <vector>

int main() {
  // Six points, packed x, y, z.
  const std::vector<float> xyz = {0, 0, 0, 1, 0, 0, 0, 2, 0, 5, 5, 5, 1, 1, 0, 0.5f, 0, 0.2f};
  const auto n = static_cast<std::int64_t>(xyz.size() / 3);
  try {
    // A view of the vector (pointer and count) goes in; the index keeps its own copy of what it
    // needs, so `xyz` may change or go away once the constructor returns.
    pcnn::Index index(pcnn::host_points(xyz.data(), n));

    pcnn::KnnParams params;
    params.k = 3;
    params.exclude_self = true;  // a point is not its own neighbor
    const pcnn::KnnResult r = index.self_knn(params);

    // Row i: the k nearest points sorted by (squared distance, index); -1 where fewer exist.
    std::printf("searched on: %s\n", pcnn::to_string(index.backend()));
    for (std::int64_t i = 0; i < r.rows; ++i) {
      std::printf("point %lld:", static_cast<long long>(i));
      for (int j = 0; j < r.k; ++j)
        std::printf("  %d (d^2 %.3f)", r.indices[i * r.k + j], r.sqdist[i * r.k + j]);
      std::printf("\n");
    }
  } catch (const pcnn::error& e) {  // every failure pcnn reports is a pcnn::error
    std::fprintf(stderr, "pcnn: %s\n", e.what());
    return 1;
  }
}
