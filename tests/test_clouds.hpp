// Test inputs: small clouds with known structure (ties, duplicates, NaNs), from fixed seeds.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "pcnn/synthetic.hpp"

namespace pcnn::test {

/// Integer lattice of side `m`: every distance is exact in float, and ties are everywhere.
inline std::vector<float> lattice(int m) {
  std::vector<float> xyz;
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < m; ++j)
      for (int l = 0; l < m; ++l) {
        xyz.push_back(float(l));
        xyz.push_back(float(j));
        xyz.push_back(float(i));
      }
  return xyz;
}

/// `n` distinct random points, each repeated `copies` times (shuffled): exact ties at zero.
inline std::vector<float> duplicates(int n, int copies, std::uint64_t seed) {
  std::vector<float> base = make_synthetic_cloud(SyntheticKind::uniform, n, seed);
  std::vector<int> order(static_cast<std::size_t>(n) * copies);
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i % n);
  std::mt19937_64 rng(seed);
  std::shuffle(order.begin(), order.end(), rng);
  std::vector<float> xyz;
  for (int o : order)
    for (int a = 0; a < 3; ++a) xyz.push_back(base[3 * o + a]);
  return xyz;
}

/// Sets a fraction of the points to NaN or infinity in one coordinate.
inline void poison(std::vector<float>& xyz, double fraction, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0, 1);
  const float bad[3] = {std::numeric_limits<float>::quiet_NaN(),
                        std::numeric_limits<float>::infinity(),
                        -std::numeric_limits<float>::infinity()};
  for (std::size_t i = 0; i < xyz.size() / 3; ++i)
    if (u(rng) < fraction) xyz[3 * i + (i % 3)] = bad[i % 3];
}

}  // namespace pcnn::test
