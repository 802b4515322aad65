// Test inputs: small clouds with known structure (ties, duplicates, NaNs), from fixed seeds.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "pcnn/testing/synthetic.hpp"

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

/// Uniform points in a 100 m cube plus 0.2% of points scattered kilometers away.
inline std::vector<float> with_outliers(int n, std::uint64_t seed) {
  std::vector<float> xyz = make_synthetic_cloud(SyntheticKind::uniform, n, seed);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> far(-5000.f, 5000.f);
  for (int i = 0; i < n; i += 500)
    for (int a = 0; a < 3; ++a) xyz[3 * i + a] = far(rng) + (a == 0 ? 3000.f : 0.f);
  return xyz;
}

/// Points on the plane z = 0.3 x - 0.2 y + 1.
inline std::vector<float> plane(int n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-20.f, 20.f);
  std::vector<float> xyz;
  for (int i = 0; i < n; ++i) {
    const float x = u(rng), y = u(rng);
    xyz.insert(xyz.end(), {x, y, 0.3f * x - 0.2f * y + 1.f});
  }
  return xyz;
}

/// Points on a line through the origin along (1, 2, 3).
inline std::vector<float> line(int n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-10.f, 10.f);
  std::vector<float> xyz;
  for (int i = 0; i < n; ++i) {
    const float t = u(rng);
    xyz.insert(xyz.end(), {t, 2 * t, 3 * t});
  }
  return xyz;
}

/// Sets a fraction of the points (float or double xyz) to NaN or infinity in one coordinate.
template <class T>
void poison(std::vector<T>& xyz, double fraction, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0, 1);
  const T bad[3] = {std::numeric_limits<T>::quiet_NaN(), std::numeric_limits<T>::infinity(),
                    -std::numeric_limits<T>::infinity()};
  for (std::size_t i = 0; i < xyz.size() / 3; ++i)
    if (u(rng) < fraction) xyz[3 * i + (i % 3)] = bad[i % 3];
}

}  // namespace pcnn::test
