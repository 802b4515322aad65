// CPU tests of the core library: the exact reference, the tie-aware comparison (it must catch
// wrong results), synthetic clouds and re-centering.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "core/fresh_pages.hpp"
#include "core/parallel_blocks.hpp"
#include "core/parallel_copy.hpp"
#include "pcnn/error.hpp"
#include "pcnn/radius.hpp"
#include "pcnn/recenter.hpp"
#include "pcnn/testing/reference.hpp"
#include "pcnn/testing/synthetic.hpp"
#include "test_clouds.hpp"

namespace pcnn {
namespace {

PointsView view(const std::vector<float>& xyz) {
  return {xyz.data(), static_cast<std::int64_t>(xyz.size() / 3), 3};
}

TEST(Reference, HandComputedNeighbors) {
  // Points on the x axis at 0, 1, 3, 7 and one NaN point.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> xyz = {0, 0, 0, 1, 0, 0, 3, 0, 0, nan, 0, 0, 7, 0, 0};
  const KnnResult r = reference_knn(view(xyz), nullptr, {2, true});
  const std::vector<std::int32_t> idx = {1, 2, 0, 2, 1, 0, -1, -1, 2, 1};
  const std::vector<float> d = {1, 9, 1, 4, 4, 9, INFINITY, INFINITY, 16, 36};
  EXPECT_EQ(r.indices, idx);
  EXPECT_EQ(r.sqdist, d);
}

TEST(Reference, TiesGoToTheSmallerIndex) {
  // Query at the origin; points 1..4 all at distance 1, listed in scrambled positions.
  const std::vector<float> refs = {0, 0, 5, 0, 1, 0, 1, 0, 0, 0, 0, -1, -1, 0, 0, 0, 0, 1};
  const std::vector<float> q = {0, 0, 0};
  const PointsView qv = view(q);
  const KnnResult r = reference_knn(view(refs), &qv, {3, false});
  EXPECT_EQ(r.indices, (std::vector<std::int32_t>{1, 2, 3}));
}

TEST(Reference, KLargerThanThePointCountPads) {
  const std::vector<float> xyz = {0, 0, 0, 2, 0, 0};
  const KnnResult r = reference_knn(view(xyz), nullptr, {3, false});
  EXPECT_EQ(r.indices, (std::vector<std::int32_t>{0, 1, -1, 1, 0, -1}));
  EXPECT_TRUE(std::isinf(r.sqdist[2]));
}

class Compare : public ::testing::Test {
 protected:
  void SetUp() override {
    pts = make_synthetic_cloud(SyntheticKind::uniform, 400, 5);
    good = reference_knn(view(pts), nullptr, {6, true});
  }
  KnnAgreement check(const KnnResult& other) {
    return compare_knn(view(pts), nullptr, other, good, true);
  }
  std::vector<float> pts;
  KnnResult good;
};

TEST_F(Compare, IdenticalResultsAgree) {
  const KnnAgreement ag = check(good);
  EXPECT_TRUE(ag.all_agree());
  EXPECT_EQ(ag.identical_rows, 400);
}

TEST_F(Compare, AWrongNeighborIsCaught) {
  KnnResult bad = good;
  bad.indices[7 * 6 + 5] = bad.indices[300 * 6 + 2];  // some far point
  const float* q = &pts[3 * 7];
  const float* p = &pts[3 * bad.indices[7 * 6 + 5]];
  bad.sqdist[7 * 6 + 5] =
      (q[0] - p[0]) * (q[0] - p[0]) + (q[1] - p[1]) * (q[1] - p[1]) + (q[2] - p[2]) * (q[2] - p[2]);
  const KnnAgreement ag = check(bad);
  EXPECT_FALSE(ag.all_agree());
  EXPECT_EQ(ag.first_bad_row, 7);
}

TEST_F(Compare, AMisreportedDistanceIsCaught) {
  KnnResult bad = good;
  bad.sqdist[11 * 6] *= 1.01f;
  EXPECT_EQ(check(bad).first_bad_row, 11);
}

TEST_F(Compare, SelfWhenExcludedIsCaught) {
  KnnResult bad = good;
  bad.indices[20 * 6] = 20;
  bad.sqdist[20 * 6] = 0;
  EXPECT_EQ(check(bad).first_bad_row, 20);
}

TEST_F(Compare, AMissingNeighborIsCaught) {
  KnnResult bad = good;
  bad.indices[30 * 6 + 5] = -1;
  bad.sqdist[30 * 6 + 5] = INFINITY;
  EXPECT_EQ(check(bad).first_bad_row, 30);
}

TEST_F(Compare, ADuplicatedNeighborIsCaught) {
  KnnResult bad = good;
  bad.indices[40 * 6 + 1] = bad.indices[40 * 6];
  bad.sqdist[40 * 6 + 1] = bad.sqdist[40 * 6];
  EXPECT_EQ(check(bad).first_bad_row, 40);
}

TEST(CompareTies, SwappedTiedNeighborsAgreeButAreNotIdentical) {
  const std::vector<float> xyz = test::lattice(4);
  const KnnResult a = reference_knn(view(xyz), nullptr, {6, true});
  KnnResult b = a;
  std::swap(b.indices[0], b.indices[1]);  // the corner's 3 neighbors at distance 1 tie
  const KnnAgreement ag = compare_knn(view(xyz), nullptr, b, a, true);
  EXPECT_TRUE(ag.all_agree());
  EXPECT_EQ(ag.identical_rows, ag.rows - 1);
}

TEST(Synthetic, DeterministicFiniteAndSized) {
  for (auto kind : {SyntheticKind::uniform, SyntheticKind::clustered, SyntheticKind::lidar,
                    SyntheticKind::hotspot, SyntheticKind::noreturns, SyntheticKind::repeated,
                    SyntheticKind::line, SyntheticKind::plane}) {
    const auto a = make_synthetic_cloud(kind, 5000, 3);
    const auto b = make_synthetic_cloud(kind, 5000, 3);
    const auto c = make_synthetic_cloud(kind, 5000, 4);
    ASSERT_EQ(a.size(), 15000u) << to_string(kind);
    EXPECT_EQ(a, b) << to_string(kind);
    EXPECT_NE(a, c) << to_string(kind);
    for (float v : a) ASSERT_TRUE(std::isfinite(v) && std::fabs(v) < 200) << to_string(kind);
  }
  EXPECT_EQ(parse_synthetic_kind("lidar"), SyntheticKind::lidar);
  EXPECT_THROW(parse_synthetic_kind("torus"), error);
  for (const std::string& name : {"uniform", "noreturns", "repeated", "identical", "line", "plane"})
    EXPECT_EQ(to_string(parse_synthetic_kind(name)), name);
}

TEST(Synthetic, DegenerateKindsAreWhatTheySay) {
  const auto zeros = [](const std::vector<float>& xyz) {
    std::int64_t z = 0;
    for (std::size_t i = 0; i < xyz.size(); i += 3)
      z += xyz[i] == 0 && xyz[i + 1] == 0 && xyz[i + 2] == 0;
    return z;
  };
  EXPECT_EQ(zeros(make_synthetic_cloud(SyntheticKind::lidar, 20000, 5)), 0);
  const std::int64_t z = zeros(make_synthetic_cloud(SyntheticKind::noreturns, 20000, 5));
  EXPECT_GT(z, 20000 / 20);  // the rays above the horizon miss: 7 % here
  EXPECT_LT(z, 20000 / 4);
  const auto rep = make_synthetic_cloud(SyntheticKind::repeated, 5000, 5);
  std::set<std::array<float, 3>> distinct;
  for (std::size_t i = 0; i < rep.size(); i += 3) distinct.insert({rep[i], rep[i + 1], rep[i + 2]});
  EXPECT_EQ(distinct.size(), 100u);
  const auto same = make_synthetic_cloud(SyntheticKind::identical, 1000, 5);
  ASSERT_EQ(same.size(), 3000u);
  for (std::size_t i = 3; i < same.size(); ++i) ASSERT_EQ(same[i], same[i % 3]);
  const auto line = make_synthetic_cloud(SyntheticKind::line, 1000, 5);
  for (std::size_t i = 0; i < line.size(); i += 3) {  // (0.8, 0.6, 0.3) s
    EXPECT_NEAR(line[i + 1], 0.75f * line[i], 1e-4f);
    EXPECT_NEAR(line[i + 2], 0.375f * line[i], 1e-4f);
  }
}

TEST(Synthetic, LidarIsDenseNearTheSensor) {
  const auto xyz = make_synthetic_cloud(SyntheticKind::lidar, 20000, 8);
  int near = 0, far = 0;
  for (std::size_t i = 0; i < xyz.size(); i += 3) {
    const double r = std::hypot(xyz[i], xyz[i + 1]);
    near += r < 10;
    far += r >= 30 && r < 40;
  }
  // The ring at 30-40 m covers 7x the area of the disc within 10 m but gets far fewer points.
  EXPECT_GT(near, 5 * far);
}

TEST(Recenter, KeepsResolutionOfGeoreferencedCoordinates) {
  const std::vector<double> xyz = {4.5e6 + 0.001, 5.2e5, 102.25, 4.5e6 + 20.002, 5.2e5 - 10, 99.0,
                                   NAN,           0,     0};
  const auto origin = bounding_box_center(xyz.data(), 3);
  EXPECT_DOUBLE_EQ(origin[0], 4.5e6 + 10.0015);
  const std::vector<float> f = recenter(xyz.data(), 3, origin);
  EXPECT_NEAR(f[3] - f[0], 20.001, 1e-5);  // a millimeter survives the float conversion
  EXPECT_TRUE(std::isnan(f[6]) && std::isnan(f[7]) && std::isnan(f[8]));
  const std::vector<double> huge = {0, 0, 0, 3e18, 0, 0};
  EXPECT_THROW(recenter(huge.data(), 2, {0, 0, 0}), error);
}

// The origin the loader uses keeps the stored coordinates exactly whenever an origin can.
TEST(ExactOrigin, FloatCoordinatesAreKeptExactly) {
  // float32 values as a scan stores them: georeferenced, around zero, tiny.
  for (const double base : {5.2e5, 0.0, 1e-30}) {
    std::vector<double> xyz;
    for (int i = 0; i < 300; ++i)
      for (int a = 0; a < 3; ++a)
        xyz.push_back(
            double(float(base + (base == 0 ? 1 : base) * 1e-3 * ((i * 37 + a * 11) % 97 - 48))));
    bool exact = false;
    const auto origin = exact_origin(xyz.data(), 300, exact);
    EXPECT_TRUE(exact) << "base " << base;
    const std::vector<float> f = recenter(xyz.data(), 300, origin);
    for (std::size_t i = 0; i < xyz.size(); ++i)
      ASSERT_EQ(double(f[i]) + origin[i % 3], xyz[i]) << "base " << base << " value " << i;
  }
}

TEST(ExactOrigin, IntegerCoordinatesAreKeptExactly) {
  std::vector<double> xyz;
  for (int i = 0; i < 100; ++i) xyz.insert(xyz.end(), {4e8 + 3.0 * i, -7.0 * i, 1e6 + i});
  bool exact = false;
  const auto origin = exact_origin(xyz.data(), 100, exact);
  EXPECT_TRUE(exact);
  EXPECT_TRUE(recenters_exactly(xyz.data(), 100, origin));
}

TEST(ExactOrigin, DoublesNoFloatOffsetHoldsAreReportedRounded) {
  // Millimeters on UTM coordinates stored as float64: no float offset from any origin.
  std::vector<double> xyz;
  for (int i = 0; i < 100; ++i) xyz.insert(xyz.end(), {512345.678 + 1.001 * i, 0.5, 0.25});
  bool exact = true;
  const auto origin = exact_origin(xyz.data(), 100, exact);
  EXPECT_FALSE(exact);
  EXPECT_FALSE(recenters_exactly(xyz.data(), 100, origin));
  EXPECT_TRUE(recenters_exactly(xyz.data() + 1, 0, origin));  // no points: trivially exact
}

// The float overloads (the loader's, for float32 files) give what the double ones give for the
// same points converted to double: the origin's bits, exactness, every offset's bits, the error.
TEST(ExactOrigin, FloatOverloadsEqualTheDoubleOnesBitForBit) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = INFINITY;
  struct Case {
    const char* name;
    double base, spread;
    int nan_every;
  };
  // Around 0 (the origin 0, decided from the box), near 0.6 (the float and integer centers fail
  // on the small values, 0 wins), georeferenced (the float center wins), beyond 1e18 apart (no
  // origin: not exact, and re-centering fails), with NaN and infinite rows, a single point.
  const Case cases[] = {{"around zero", 0, 100, 0},
                        {"around -0.2 (origin -0.0)", -0.2, 50, 0},
                        {"up to 9e17 around 0.3", 0.3, 9e17, 0},
                        {"near 0.6", 0.6, 1, 0},
                        {"near 0.6 with NaN rows", 0.6, 1, 7},
                        {"georeferenced", 5e5, 40, 0},
                        {"georeferenced with NaN rows", 5e5, 40, 5},
                        {"far apart", 0, 4e19, 0},
                        {"huge offset", 3e18, 1, 0},
                        {"tiny", 1e-30, 1e-32, 3}};
  for (const Case& c : cases)
    for (const std::int64_t n : {std::int64_t(1), std::int64_t(5000)}) {
      SCOPED_TRACE(std::string(c.name) + ", " + std::to_string(n) + " points");
      std::mt19937_64 rng(n);
      std::uniform_real_distribution<double> u(-1, 1);
      std::vector<float> f;
      for (std::int64_t i = 0; i < n; ++i)
        for (int a = 0; a < 3; ++a) {
          float v = static_cast<float>(c.base + c.spread * u(rng));
          if (c.nan_every && i % c.nan_every == 1 && a == i % 3) v = i % 2 ? nan : -inf;
          if (i == 2 && a == 1) v = -0.0f;
          f.push_back(v);
        }
      const std::vector<double> d(f.begin(), f.end());
      bool exact_f = false, exact_d = true;
      const auto of = exact_origin(f.data(), n, exact_f);
      const auto od = exact_origin(d.data(), n, exact_d);
      EXPECT_EQ(exact_f, exact_d);
      EXPECT_EQ(std::memcmp(of.data(), od.data(), sizeof of), 0);
      for (const auto& o : {od, std::array<double, 3>{0.25, -1e5, 0.0}})
        EXPECT_EQ(recenters_exactly(f.data(), n, o), recenters_exactly(d.data(), n, o));
      std::vector<float> in_place = f, copy;
      std::string error_f, error_d;
      try {
        recenter_in_place(in_place.data(), n, od);
      } catch (const error& e) {
        error_f = e.what();
      }
      try {
        copy = recenter(d.data(), n, od);
      } catch (const error& e) {
        error_d = e.what();
      }
      EXPECT_EQ(error_f, error_d);
      if (error_d.empty()) {
        ASSERT_EQ(copy.size(), in_place.size());
        EXPECT_EQ(std::memcmp(copy.data(), in_place.data(), copy.size() * sizeof(float)), 0);
      }
    }
}

}  // namespace
}  // namespace pcnn

namespace pcnn {
namespace {

// A 3x3x3 lattice: point 13 is the center (1,1,1); its neighbors within r = 1 are itself
// (d² = 0) and six points at exactly d² = 1 (on the boundary, included: d² <= r²).
class RadiusReference : public ::testing::Test {
 protected:
  std::vector<float> pts = test::lattice(3);
  PointsView v{pts.data(), 27, 3};
};

TEST_F(RadiusReference, BoundaryPointsAreInsideAndRowsAreSorted) {
  const RadiusResult r = reference_radius(v, nullptr, {1.0});
  ASSERT_EQ(r.count(13), 7);
  EXPECT_EQ(r.indices[r.offsets[13]], 13);
  EXPECT_EQ(r.sqdist[r.offsets[13]], 0.f);
  const std::vector<std::int32_t> ring(r.indices.begin() + r.offsets[13] + 1,
                                       r.indices.begin() + r.offsets[14]);
  EXPECT_EQ(ring, (std::vector<std::int32_t>{4, 10, 12, 14, 16, 22}));  // ties by index
  EXPECT_EQ(reference_radius(v, nullptr, {1.0, true}).count(13), 6);
  EXPECT_EQ(reference_radius(v, nullptr, {0.999}).count(13), 1);
  EXPECT_EQ(reference_radius(v, nullptr, {0.0}).offsets.back(), 27);
}

TEST_F(RadiusReference, ComparisonAcceptsOnlyBoundaryDifferences) {
  const RadiusResult a = reference_radius(v, nullptr, {1.0});
  EXPECT_TRUE(compare_radius(v, nullptr, a, a, 1.0, false).all_agree());
  // Drop one row entry and rebuild the CSR arrays.
  auto drop = [&](std::int64_t row, std::int32_t index) {
    RadiusResult b;
    b.rows = a.rows;
    b.offsets = {0};
    for (std::int64_t q = 0; q < a.rows; ++q) {
      for (std::int64_t i = a.offsets[q]; i < a.offsets[q + 1]; ++i)
        if (!(q == row && a.indices[i] == index)) {
          b.indices.push_back(a.indices[i]);
          b.sqdist.push_back(a.sqdist[i]);
        }
      b.offsets.push_back(static_cast<std::int64_t>(b.indices.size()));
    }
    return b;
  };
  const RadiusAgreement boundary = compare_radius(v, nullptr, a, drop(13, 4), 1.0, false);
  EXPECT_TRUE(boundary.all_agree());
  EXPECT_EQ(boundary.boundary_points, 1);
  EXPECT_EQ(boundary.identical_rows, 26);
  const RadiusAgreement inner = compare_radius(v, nullptr, a, drop(13, 13), 1.0, false);
  EXPECT_FALSE(inner.all_agree());
  EXPECT_EQ(inner.first_bad_row, 13);
  EXPECT_FALSE(compare_radius(v, nullptr, a, a, 1.0, true).all_agree());   // lists itself
  EXPECT_FALSE(compare_radius(v, nullptr, a, a, 0.5, false).all_agree());  // beyond r
}

TEST_F(RadiusReference, HybridIsTheNearestWithinTheRadius) {
  const HybridResult h = reference_hybrid(v, nullptr, {1.0, 4, true});
  EXPECT_EQ(h.counts[13], 4);
  EXPECT_EQ(h.counts[0], 3);  // a corner has three neighbors at 1
  EXPECT_EQ(row_counts(h.knn), h.counts);
  EXPECT_TRUE(compare_hybrid(v, nullptr, h, h, 1.0, true).all_agree());
  HybridResult shorter = h;  // the last neighbor of a corner (on the boundary) left out
  shorter.knn.indices[0 * 4 + 2] = -1;
  shorter.knn.sqdist[0 * 4 + 2] = INFINITY;
  shorter.counts[0] = 2;
  EXPECT_TRUE(compare_hybrid(v, nullptr, h, shorter, 1.0, true).all_agree());
  EXPECT_FALSE(compare_hybrid(v, nullptr, h, shorter, 1.5, true).all_agree());
}

// The copy of results out of page-locked buffers: every byte of every array in place, whatever
// the sizes and however the threads' shares fall across the arrays' boundaries.
TEST(ParallelCopy, EveryByteOfEveryArrayLandsInPlace) {
  std::mt19937 rng(5);
  for (const std::size_t a_bytes :
       {std::size_t(0), std::size_t(7), std::size_t(3) << 20, (std::size_t(5) << 20) + 3}) {
    for (const std::size_t b_bytes :
         {std::size_t(1), (std::size_t(1) << 20) + 1, std::size_t(9) << 20}) {
      std::vector<unsigned char> a(a_bytes), b(b_bytes), a_out(a_bytes, 0), b_out(b_bytes, 0);
      for (auto& v : a) v = static_cast<unsigned char>(rng());
      for (auto& v : b) v = static_cast<unsigned char>(rng());
      detail::parallel_copy({{a_out.data(), a.data(), a_bytes}, {b_out.data(), b.data(), b_bytes}});
      EXPECT_EQ(a_out, a) << a_bytes << " + " << b_bytes;
      EXPECT_EQ(b_out, b) << a_bytes << " + " << b_bytes;
    }
  }
}

// Blocks handed to threads: every index once, and of several failing blocks the lowest one's
// exception, as a loop in order would meet it (repeated: which thread fails first varies).
TEST(ParallelBlocks, EveryIndexOnceAndTheFirstFailingBlocksError) {
  for (const int threads : {1, 3, 8}) {
    std::vector<std::atomic<int>> seen(1000);
    detail::parallel_blocks(threads, 1000, 7, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t i = b; i < e; ++i) ++seen[static_cast<std::size_t>(i)];
    });
    for (std::size_t i = 0; i < seen.size(); ++i) ASSERT_EQ(seen[i].load(), 1) << i;
    for (int round = 0; round < 50; ++round) {
      std::string caught;
      try {
        detail::parallel_blocks(threads, 40, 2, [&](std::int64_t b, std::int64_t) {
          if (b == 34) throw std::runtime_error("block 17");
          if (b == 10) {  // later than block 17's failure, most often
            std::this_thread::sleep_for(std::chrono::microseconds(200));
            throw std::runtime_error("block 5");
          }
          if (b == 12) throw std::runtime_error("block 6");
        });
      } catch (const std::runtime_error& e) {
        caught = e.what();
      }
      ASSERT_EQ(caught, "block 5") << threads << " threads, round " << round;
    }
  }
}

// Re-centering a cloud of several blocks (each on some thread): the same origin, bit for bit, as
// one pass in order (the first of two equal zeros decides its sign), and an error naming the
// first far point.
TEST(Recenter, ManyBlocksGiveWhatOnePassInOrderGives) {
  const std::int64_t n = 600000;  // three blocks of the loader's passes
  for (const bool negative_first : {true, false}) {
    std::vector<float> f(static_cast<std::size_t>(3 * n), negative_first ? 0.0f : -0.0f);
    f[0] = negative_first ? -0.0f : 0.0f;
    for (std::int64_t i = 0; i < n; ++i) f[3 * i + 1] = float(i % 1000);
    bool exact = false;
    const auto origin = exact_origin(f.data(), n, exact);
    EXPECT_TRUE(exact);
    EXPECT_EQ(std::signbit(origin[0]), negative_first);
  }
  std::vector<double> d(static_cast<std::size_t>(3 * n), 1.0);
  d[3 * 550000 + 2] = 3e18;
  d[3 * 300001] = -3e18;
  std::vector<float> f(d.begin(), d.end());
  for (int round = 0; round < 5; ++round) {
    try {
      recenter(d.data(), n, {0, 0, 0});
      FAIL() << "no error";
    } catch (const error& e) {
      EXPECT_NE(std::string(e.what()).find("point 300001 "), std::string::npos) << e.what();
    }
    try {
      recenter_in_place(f.data(), n, {0, 0, 0});
      FAIL() << "no error";
    } catch (const error& e) {
      EXPECT_NE(std::string(e.what()).find("point 300001 "), std::string::npos) << e.what();
    }
  }
}

// Arrays placed on a 128-byte line within their vectors (the command's rows): the elements begin
// on a line, inside the vector, with room for all of them, and are value-initialized; small and
// large (mmap'd: 16 bytes past a page) sizes, 4- and 8-byte elements.
TEST(FreshPages, ArraysOnALineFitInTheirVectors) {
  for (const std::size_t n :
       {std::size_t(0), std::size_t(1), std::size_t(1000), std::size_t(3) << 20}) {
    std::vector<float> f;
    std::vector<std::int64_t> g;
    const std::size_t fa = detail::resize_fresh_on_line(f, n);
    const std::size_t ga = detail::resize_fresh_on_line(g, n);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(f.data() + fa) % 128, 0u) << n;
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(g.data() + ga) % 128, 0u) << n;
    EXPECT_LE(fa + n, f.size()) << n;
    EXPECT_LE(ga + n, g.size()) << n;
    EXPECT_LT(fa * sizeof(float), 128u);
    EXPECT_LT(ga * sizeof(std::int64_t), 128u);
    EXPECT_EQ(std::count(f.begin(), f.end(), 0.f), std::ptrdiff_t(f.size())) << n;
  }
}

}  // namespace
}  // namespace pcnn
