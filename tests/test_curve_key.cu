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

// Skilling's transform, which the index computed its keys with until the table of
// kHilbertMachine was read off its keys (curve_key.cuh): the reference it is compared with.
// All ones where `v` has bit `q`, else 0.
std::uint32_t bit_mask(std::uint32_t v, std::uint32_t q) {
  return 0u - static_cast<std::uint32_t>((v & q) != 0);
}

// One level's turn of the Hilbert transform for axis v (1 or 2), on the bits below `q`: axis 0's
// low bits are inverted where v has the level's bit, else exchanged with v's. Without branches:
// neighbouring lanes take different ones.
void hilbert_turn(std::uint32_t& x, std::uint32_t& v, std::uint32_t q) {
  const std::uint32_t p = q - 1, invert = bit_mask(v, q);
  const std::uint32_t t = (x ^ v) & p & ~invert;
  x ^= (p & invert) | t;
  v ^= t;
}

// The Hilbert index of the grid point (x, y, z), each of `levels` bits (1 to kCurveBits): 3 ×
// `levels` bits, the coarsest level's 3 bits on top. Skilling's transform ("Programming the
// Hilbert curve", AIP Conf. Proc. 707, 2004): the rotations and reflections of each level are
// applied to the bits below it, then the Gray code is undone and the bits interleaved. The top
// 3L bits depend on the top L bits of each coordinate alone, so the key of the coordinates'
// top L bits is the full key's top 3L bits: a key truncated to fewer levels orders the points
// as the full key's prefix does.
std::uint64_t skilling_index(std::uint32_t x, std::uint32_t y, std::uint32_t z, int levels) {
  const std::uint32_t top = std::uint32_t(1) << (levels - 1);
  for (std::uint32_t q = top; q > 1; q >>= 1) {
    x ^= (q - 1) & bit_mask(x, q);  // axis 0 is only ever inverted
    hilbert_turn(x, y, q);
    hilbert_turn(x, z, q);
  }
  y ^= x;
  z ^= y;
  // t ^= q - 1 for every bit q > 1 of z: bit i of t is the parity of z's bits above i.
  std::uint32_t t = z;
  t ^= t >> 1;
  t ^= t >> 2;
  t ^= t >> 4;
  t ^= t >> 8;
  t ^= t >> 16;
  t >>= 1;
  x ^= t;
  y ^= t;
  z ^= t;
  return expand_bits21(x) << 2 | expand_bits21(y) << 1 | expand_bits21(z);
}

// The table-driven index equals Skilling's transform bit for bit: every grid point of cubes of 1
// to 4 levels, and random points at every level up to the full 21.
TEST(CurveKey, TheMachineGivesSkillingsKeys) {
  for (int levels = 1; levels <= 4; ++levels) {
    const std::uint32_t side = 1u << levels;
    for (std::uint32_t x = 0; x < side; ++x)
      for (std::uint32_t y = 0; y < side; ++y)
        for (std::uint32_t z = 0; z < side; ++z)
          ASSERT_EQ(hilbert_index(x, y, z, levels), skilling_index(x, y, z, levels))
              << x << " " << y << " " << z << ", levels " << levels;
  }
  std::mt19937 rng(5);
  for (int i = 0; i < 200000; ++i) {
    const int levels = 1 + i % kCurveBits;
    const std::uint32_t mask = (1u << levels) - 1;
    const std::uint32_t x = rng() & mask, y = rng() & mask, z = rng() & mask;
    ASSERT_EQ(hilbert_index(x, y, z, levels), skilling_index(x, y, z, levels))
        << x << " " << y << " " << z << ", levels " << levels;
  }
}

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
