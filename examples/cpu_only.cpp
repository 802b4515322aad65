// pcnn on the CPU only: Backend::cpu needs no GPU and no CUDA driver at run time, and reads and
// writes host memory only. Every result here goes into std::vectors the caller owns (pcnn checks
// their sizes): a kNN, then a radius search in two steps, count and fill.
#include <pcnn/error.hpp>
#include <pcnn/index.hpp>

#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

int main() {
  // 2000 points scattered in a 1 m x 1 m x 0.2 m slab; a fixed seed gives the same cloud each run.
  const std::int64_t n = 2000;
  std::vector<float> xyz(3 * n);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(0.f, 1.f);
  for (std::int64_t i = 0; i < n; ++i) {
    xyz[3 * i + 0] = u(rng);
    xyz[3 * i + 1] = u(rng);
    xyz[3 * i + 2] = 0.2f * u(rng);
  }

  try {
    pcnn::IndexOptions options;
    options.backend = pcnn::Backend::cpu;  // explicitly the CPU, even where a GPU is present
    options.threads = 0;                   // every hardware thread
    pcnn::Index index(pcnn::host_points(xyz.data(), n), options);
    std::printf("indexed %lld points on the CPU in %.2f ms\n", static_cast<long long>(index.size()),
                index.last_timings().total_ms);

    // kNN: n rows of k neighbors, row-major, into the caller's vectors.
    const int k = 4;
    std::vector<std::int32_t> knn_idx(static_cast<std::size_t>(n) * k);
    std::vector<float> knn_d2(knn_idx.size());
    pcnn::KnnParams knn;
    knn.k = k;
    knn.exclude_self = true;  // a point is not its own neighbor
    index.self_knn(knn, {knn_idx.data(), n, k}, {knn_d2.data(), n, k});
    std::printf("the %d nearest neighbors of point 0:", k);
    for (int j = 0; j < k; ++j) std::printf("  %d (d^2 %.5f)", knn_idx[j], knn_d2[j]);
    std::printf("\n");

    // Radius: how many neighbors each point has is not known beforehand. The count writes the
    // CSR offsets (n + 1 entries) and returns the total; the caller sizes its outputs to that
    // total and the fill writes the neighbors. Point q's neighbors are entries
    // offsets[q] .. offsets[q + 1] - 1, sorted by (squared distance, index).
    pcnn::RadiusParams radius;
    radius.radius = 0.05;  // meters; membership is d^2 <= r^2, decided exactly
    radius.exclude_self = true;
    std::vector<std::int64_t> offsets(static_cast<std::size_t>(n) + 1);
    const std::int64_t total = index.self_radius_count(radius, {offsets.data(), n + 1});
    std::vector<std::int32_t> nb_idx(static_cast<std::size_t>(total));
    std::vector<float> nb_d2(nb_idx.size());
    index.self_radius_fill(radius, {offsets.data(), n + 1}, {nb_idx.data(), total},
                           {nb_d2.data(), total});
    std::printf("%lld neighbor pairs within %.2f m, %.2f per point; point 0 has %lld:",
                static_cast<long long>(total), radius.radius, double(total) / double(n),
                static_cast<long long>(offsets[1] - offsets[0]));
    for (std::int64_t e = offsets[0]; e < offsets[1]; ++e) std::printf(" %d", nb_idx[e]);
    std::printf("\n");
  } catch (const pcnn::error& e) {
    std::fprintf(stderr, "pcnn: %s\n", e.what());
    return 1;
  }
}
