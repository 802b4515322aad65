// The index's curve keys (gpu/detail/curve_key.cuh), on the host: no GPU needed.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <random>
#include <vector>

#include "gpu/detail/curve_key.cuh"

namespace pcnn::detail {
namespace {

// Every grid point of a 2^L cube gets its own key in [0, 8^L), and consecutive keys are face
// neighbors: the curve never jumps, which is what keeps a run of 32 points compact.
TEST(CurveKey, VisitsEveryGridPointOnceThroughFaceNeighbors) {
  for (int levels : {1, 2, 3, 5}) {
    const std::uint32_t side = 1u << levels;
    const std::uint64_t count = std::uint64_t(side) * side * side;
    std::vector<std::int64_t> at(count, -1);  // key -> x, y, z packed
    for (std::uint32_t x = 0; x < side; ++x)
      for (std::uint32_t y = 0; y < side; ++y)
        for (std::uint32_t z = 0; z < side; ++z) {
          const std::uint64_t key = hilbert_index(x, y, z, levels);
          ASSERT_LT(key, count) << "levels " << levels;
          ASSERT_EQ(at[key], -1) << "two grid points share key " << key;
          at[key] = (std::int64_t(x) * side + y) * side + z;
        }
    for (std::uint64_t key = 0; key + 1 < count; ++key) {
      const std::int64_t a = at[key], b = at[key + 1];
      const std::int64_t s = side;
      const std::int64_t steps = std::llabs(a / (s * s) - b / (s * s)) +
                                 std::llabs(a / s % s - b / s % s) + std::llabs(a % s - b % s);
      ASSERT_EQ(steps, 1) << "levels " << levels << ", keys " << key << " and " << key + 1;
    }
  }
}

// A key computed to fewer levels is the full key's prefix (the index sorts on the levels its
// size needs, and a query's home search computes its key the same way).
TEST(CurveKey, FewerLevelsGiveTheFullKeysPrefix) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<std::uint32_t> coordinate(0, (1u << kCurveBits) - 1);
  for (int i = 0; i < 20000; ++i) {
    const std::uint32_t x = coordinate(rng), y = coordinate(rng), z = coordinate(rng);
    const std::uint64_t full = hilbert_index(x, y, z, kCurveBits);
    for (int levels = 1; levels <= kCurveBits; ++levels) {
      const int drop = kCurveBits - levels;
      ASSERT_EQ(hilbert_index(x >> drop, y >> drop, z >> drop, levels), full >> (3 * drop))
          << "levels " << levels;
    }
  }
  const float b[6] = {-3.f, -1.f, 2.f, 5.f, 4.f, 2.5f};
  std::uniform_real_distribution<float> u(-4.f, 6.f);  // some outside the box: clamped
  for (int i = 0; i < 2000; ++i) {
    const float x = u(rng), y = u(rng), z = u(rng);
    for (int low_bit : {1, 3, 20, 21, 39, 60, 62}) {  // whole levels and partial ones
      const std::uint64_t kept = ~((std::uint64_t(1) << low_bit) - 1);
      EXPECT_EQ(curve_key(x, y, z, b, low_bit), curve_key(x, y, z, b) & kept)
          << "low bit " << low_bit;
    }
  }
}

// Non-finite points sort after every finite one, the curve's last grid point included.
TEST(CurveKey, NonFinitePointsSortLast) {
  const float b[6] = {0.f, 0.f, 0.f, 1.f, 1.f, 1.f};
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(curve_key(nan, 0.f, 0.f, b), kInvalidKey);
  EXPECT_EQ(curve_key(0.f, -inf, 0.f, b), kInvalidKey);
  EXPECT_EQ(curve_key(0.f, 0.f, inf, b), kInvalidKey);
  EXPECT_EQ(curve_key(0.f, 0.f, 0.f, b), 0u);
  EXPECT_EQ(curve_key(1.f, 0.f, 0.f, b), kInvalidKey - 1);  // the curve's end: the largest key
  EXPECT_EQ(curve_key(1.f, 0.f, 0.f, b, 42), (kInvalidKey - 1) & ~((std::uint64_t(1) << 42) - 1));
  EXPECT_EQ(curve_key(nan, 0.f, 0.f, b, 42), kInvalidKey);  // truncation keeps it last
}

}  // namespace
}  // namespace pcnn::detail
