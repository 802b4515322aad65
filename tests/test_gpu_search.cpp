// Radius and hybrid search against the exact double reference, and searches under a device
// memory cap (passes, clear out-of-memory errors, the library usable afterwards).
// GPU tests skip (saying why) without a device.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "gpu_test.hpp"
#include "pcnn/device.hpp"
#include "pcnn/error.hpp"
#include "pcnn/knn.hpp"
#include "pcnn/knn_index.hpp"
#include "pcnn/radius.hpp"
#include "pcnn/reference.hpp"
#include "test_clouds.hpp"

namespace pcnn {
namespace {

struct Cloud {
  std::string name;
  std::vector<float> xyz;
  double radius;  // chosen for the cloud: from empty rows to long ones
  PointsView view() const { return {xyz.data(), static_cast<std::int64_t>(xyz.size() / 3), 3}; }
};

std::vector<Cloud> clouds() {
  std::vector<Cloud> c;
  c.push_back({"uniform", make_synthetic_cloud(SyntheticKind::uniform, 20000, 1), 7.3});
  c.push_back({"clustered", make_synthetic_cloud(SyntheticKind::clustered, 20000, 2), 1.5});
  c.push_back({"lidar", make_synthetic_cloud(SyntheticKind::lidar, 20000, 3), 0.8});
  c.push_back({"hotspot", make_synthetic_cloud(SyntheticKind::hotspot, 20000, 4), 7.3});
  c.push_back({"lattice_r1", test::lattice(16), 1.0});  // neighbors exactly at r
  c.push_back({"lattice_r2", test::lattice(16), 2.0});
  c.push_back({"lattice_sqrt3", test::lattice(16), std::sqrt(3.0)});
  c.push_back({"duplicates_r0", test::duplicates(3000, 3, 5), 0.0});
  c.push_back({"larger_than_cloud", make_synthetic_cloud(SyntheticKind::uniform, 1500, 6), 1e4});
  c.push_back({"empty_rows", make_synthetic_cloud(SyntheticKind::uniform, 5000, 7), 1e-3});
  std::vector<float> poisoned = make_synthetic_cloud(SyntheticKind::clustered, 8000, 8);
  test::poison(poisoned, 0.02, 8);
  c.push_back({"nan_points", poisoned, 2.0});
  return c;
}

void expect_same(const RadiusResult& gpu, const RadiusResult& ref, const std::string& what) {
  ASSERT_EQ(gpu.rows, ref.rows) << what;
  ASSERT_EQ(gpu.offsets.size(), static_cast<std::size_t>(gpu.rows + 1)) << what;
  const std::int64_t bad = first_radius_difference(gpu, ref);
  EXPECT_EQ(bad, -1) << what << ": first differing row " << bad << " (gpu "
                     << (bad >= 0 ? gpu.count(bad) : 0) << " neighbors, reference "
                     << (bad >= 0 ? ref.count(bad) : 0) << ")";
  EXPECT_EQ(gpu.offsets, ref.offsets) << what;
}

TEST(GpuRadius, SelfSearchMatchesTheReferenceExactly) {
  PCNN_REQUIRE_DEVICE();
  for (const Cloud& c : clouds()) {
    for (bool exclude : {false, true}) {
      const RadiusParams p{c.radius, exclude};
      GpuKnnTimings t;
      const RadiusResult gpu = gpu_radius_search(c.view(), nullptr, p, &t);
      const RadiusResult ref = reference_radius(c.view(), nullptr, p);
      expect_same(gpu, ref, c.name + (exclude ? " exclude_self" : ""));
      EXPECT_EQ(t.passes, 1) << c.name;
    }
  }
}

TEST(GpuRadius, SeparateQueriesMatchTheReference) {
  PCNN_REQUIRE_DEVICE();
  const std::vector<float> refs = make_synthetic_cloud(SyntheticKind::lidar, 30000, 11);
  std::vector<float> queries = make_synthetic_cloud(SyntheticKind::lidar, 4000, 12);
  test::poison(queries, 0.01, 13);
  const PointsView rv{refs.data(), 30000, 3}, qv{queries.data(), 4000, 3};
  for (double r : {0.0, 0.3, 1.0, 5.0}) {
    const RadiusResult gpu = gpu_radius_search(rv, &qv, {r});
    expect_same(gpu, reference_radius(rv, &qv, {r}), "r = " + std::to_string(r));
  }
  const RadiusResult empty = gpu_radius_search(rv, nullptr, {1.0}, nullptr);
  EXPECT_EQ(empty.rows, 30000);
}

TEST(GpuRadius, LongRowsAreSortedLikeShortOnes) {
  PCNN_REQUIRE_DEVICE();
  // Rows of every length class at once: <= 32 (one per lane), <= 256 (ranks), longer (segmented).
  const std::vector<float> pts = make_synthetic_cloud(SyntheticKind::clustered, 6000, 14);
  const PointsView v{pts.data(), 6000, 3};
  const RadiusResult gpu = gpu_radius_search(v, nullptr, {6.0});
  const RadiusResult ref = reference_radius(v, nullptr, {6.0});
  expect_same(gpu, ref, "clustered r = 6");
  std::int64_t longest = 0, shortest = 1 << 30;
  for (std::int64_t q = 0; q < gpu.rows; ++q) {
    longest = std::max(longest, gpu.count(q));
    shortest = std::min(shortest, gpu.count(q));
  }
  EXPECT_GT(longest, 256);
  EXPECT_LE(shortest, 32);
}

TEST(GpuRadius, PassesGiveTheSameResultAsOnePass) {
  PCNN_REQUIRE_DEVICE();
  const std::vector<float> pts = make_synthetic_cloud(SyntheticKind::hotspot, 30000, 15);
  const PointsView v{pts.data(), 30000, 3};
  GpuKnnTimings one, many;
  const RadiusResult a = gpu_radius_search(v, nullptr, {5.0, true}, &one);
  RadiusParams p{5.0, true};
  p.max_rows_per_pass = 1000;
  const RadiusResult b = gpu_radius_search(v, nullptr, p, &many);
  EXPECT_EQ(one.passes, 1);
  EXPECT_EQ(many.passes, 30);  // 1000 rounds up to 1024 queries per pass
  EXPECT_EQ(a.offsets, b.offsets);
  EXPECT_EQ(a.indices, b.indices);
  EXPECT_EQ(a.sqdist, b.sqdist);
}

TEST(GpuHybrid, MatchesTheReference) {
  PCNN_REQUIRE_DEVICE();
  for (const Cloud& c : clouds()) {
    for (int max_nn : {1, 8, 32}) {
      HybridParams p{c.radius, max_nn, true};
      const HybridResult gpu = gpu_hybrid_search(c.view(), nullptr, p);
      const HybridResult ref = reference_hybrid(c.view(), nullptr, p);
      const std::string what = c.name + " max_nn " + std::to_string(max_nn);
      EXPECT_EQ(gpu.counts, ref.counts) << what;
      const KnnAgreement ag = compare_knn(c.view(), nullptr, gpu.knn, ref.knn, true);
      EXPECT_TRUE(ag.all_agree()) << what << ": row " << ag.first_bad_row << ": "
                                  << ag.first_problem;
    }
  }
}

TEST(GpuHybrid, IsTheRadiusSearchCutAtMaxNn) {
  PCNN_REQUIRE_DEVICE();
  const std::vector<float> pts = make_synthetic_cloud(SyntheticKind::uniform, 20000, 16);
  const PointsView v{pts.data(), 20000, 3};
  const RadiusResult all = gpu_radius_search(v, nullptr, {6.0});
  const HybridResult cut = gpu_hybrid_search(v, &v, {6.0, 16});
  for (std::int64_t q = 0; q < all.rows; ++q)
    ASSERT_EQ(cut.counts[q], std::min<std::int64_t>(all.count(q), 16)) << "row " << q;
}

TEST(GpuKnnIndex, RadiusAndHybridQueriesMatchTheOneShotSearches) {
  PCNN_REQUIRE_DEVICE();
  const std::vector<float> map = make_synthetic_cloud(SyntheticKind::lidar, 40000, 23);
  std::vector<float> scan = make_synthetic_cloud(SyntheticKind::lidar, 6000, 24);
  test::poison(scan, 0.01, 25);
  const PointsView mv{map.data(), 40000, 3}, sv{scan.data(), 6000, 3};
  const KnnIndex index(mv);
  for (double r : {0.2, 1.0}) {
    GpuKnnTimings t;
    const RadiusResult a = index.radius(sv, {r}, &t);
    expect_same(a, reference_radius(mv, &sv, {r}), "index radius r = " + std::to_string(r));
    EXPECT_GT(t.search_ms, 0.f);
    const HybridResult h = index.hybrid(sv, {r, 10});
    const HybridResult g = gpu_hybrid_search(mv, &sv, {r, 10});
    EXPECT_EQ(h.knn.indices, g.knn.indices);
    EXPECT_EQ(h.counts, g.counts);
  }
  EXPECT_THROW(index.radius(sv, {1.0, true}), error);
  EXPECT_THROW(index.radius(sv, {-1.0}), error);
}

TEST(RadiusArguments, InvalidArgumentsThrow) {
  const std::vector<float> pts = make_synthetic_cloud(SyntheticKind::uniform, 10, 17);
  const PointsView v{pts.data(), 10, 3};
  EXPECT_THROW(gpu_radius_search(v, nullptr, {-1.0}), error);
  EXPECT_THROW(gpu_radius_search(v, nullptr, {NAN}), error);
  EXPECT_THROW(gpu_radius_search(v, nullptr, {INFINITY}), error);
  EXPECT_THROW(gpu_radius_search({nullptr, 10, 3}, nullptr, {1.0}), error);
  EXPECT_THROW(gpu_radius_search(v, &v, {1.0, true}), error);
  EXPECT_THROW(gpu_hybrid_search(v, nullptr, {1.0, 0}), error);
  EXPECT_THROW(gpu_hybrid_search(v, nullptr, {-0.5, 4}), error);
  EXPECT_THROW(reference_radius(v, nullptr, {-1.0}), error);
}

// Sets a device memory cap for the life of the object.
struct MemoryCap {
  explicit MemoryCap(std::int64_t bytes) { set_device_memory_limit(bytes); }
  ~MemoryCap() { set_device_memory_limit(0); }
};

TEST(GpuMemory, KnnPassesGiveTheSameResultAsOnePass) {
  PCNN_REQUIRE_DEVICE();
  const std::vector<float> pts = make_synthetic_cloud(SyntheticKind::lidar, 50000, 18);
  const std::vector<float> qs = make_synthetic_cloud(SyntheticKind::lidar, 7000, 19);
  const PointsView v{pts.data(), 50000, 3}, qv{qs.data(), 7000, 3};
  KnnParams forced{12, true, 1000};
  GpuKnnTimings t;
  const KnnResult a = gpu_knn(v, nullptr, {12, true}, Algorithm::grid);
  const KnnResult b = gpu_knn(v, nullptr, forced, Algorithm::automatic, &t);
  EXPECT_EQ(t.passes, 49);
  EXPECT_EQ(a.indices, b.indices);
  EXPECT_EQ(a.sqdist, b.sqdist);
  const KnnIndex index(v);
  const KnnResult c = index.query(qv, {5, false});
  const KnnResult d = index.query(qv, {5, false, 128}, &t);
  EXPECT_EQ(t.passes, 55);
  EXPECT_EQ(c.indices, d.indices);
  EXPECT_EQ(c.sqdist, d.sqdist);
}

TEST(GpuMemory, ACapTooSmallForTheResultsMakesPasses) {
  PCNN_REQUIRE_DEVICE();
  const std::vector<float> pts = make_synthetic_cloud(SyntheticKind::uniform, 200000, 20);
  const PointsView v{pts.data(), 200000, 3};
  const KnnResult free_run = gpu_knn(v, nullptr, {32, true}, Algorithm::grid);
  const RadiusResult radius_free = gpu_radius_search(v, nullptr, {3.0, true});
  release_cached_device_memory();
  // Room for the index and the work, not for 200k x 32 x 8 = 51 MB of results at once.
  const MemoryCap cap(device_memory_stats().current_bytes + (48 << 20));
  GpuKnnTimings t;
  const KnnResult capped = gpu_knn(v, nullptr, {32, true}, Algorithm::grid, &t);
  EXPECT_GT(t.passes, 1);
  EXPECT_EQ(free_run.indices, capped.indices);
  EXPECT_EQ(free_run.sqdist, capped.sqdist);
  const RadiusResult radius_capped = gpu_radius_search(v, nullptr, {3.0, true}, &t);
  EXPECT_EQ(radius_free.offsets, radius_capped.offsets);
  EXPECT_EQ(radius_free.indices, radius_capped.indices);
  EXPECT_EQ(radius_free.sqdist, radius_capped.sqdist);
  // 200k x ~23 neighbors x 16 bytes on the device (72 MB) does not fit in 48 MB at once.
  EXPECT_GT(radius_free.offsets.back() * 16, std::int64_t(48) << 20);
  EXPECT_GT(t.passes, 1);
}

TEST(GpuMemory, ACapTooSmallForTheSearchThrowsNeededAndAvailable) {
  PCNN_REQUIRE_DEVICE();
  const std::vector<float> pts = make_synthetic_cloud(SyntheticKind::uniform, 100000, 21);
  const PointsView v{pts.data(), 100000, 3};
  const KnnResult before = gpu_knn(v, nullptr, {8, false}, Algorithm::grid);
  {
    const MemoryCap cap(device_memory_stats().current_bytes + (1 << 20));
    for (int which = 0; which < 3; ++which) {
      try {
        if (which == 0) gpu_knn(v, nullptr, {8, false}, Algorithm::grid);
        if (which == 1) gpu_radius_search(v, nullptr, {2.0});
        if (which == 2) KnnIndex index(v);
        ADD_FAILURE() << "no out_of_memory_error from search " << which;
      } catch (const out_of_memory_error& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find("needs"), std::string::npos) << msg;
        EXPECT_NE(msg.find("available"), std::string::npos) << msg;
        EXPECT_NE(msg.find("limit"), std::string::npos) << msg;
        EXPECT_GT(e.needed_bytes(), e.available_bytes()) << msg;
      }
    }
  }
  // Nothing leaked, nothing left broken: the same search works again, with the same result.
  const KnnResult after = gpu_knn(v, nullptr, {8, false}, Algorithm::grid);
  EXPECT_EQ(before.indices, after.indices);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

}  // namespace
}  // namespace pcnn

namespace pcnn::detail {
void* device_allocate(std::size_t bytes, cudaStream_t stream);
}

namespace pcnn {
namespace {

TEST(GpuMemory, ARealDeviceAllocationFailureIsReportedAndTheLibraryStaysUsable) {
  PCNN_REQUIRE_DEVICE();
  const std::int64_t held = device_memory_stats().current_bytes;
  // Far more than any GPU has: the device itself refuses (no cap involved).
  EXPECT_THROW(detail::device_allocate(std::size_t(1) << 50, nullptr), out_of_memory_error);
  EXPECT_EQ(device_memory_stats().current_bytes, held);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  const std::vector<float> pts = make_synthetic_cloud(SyntheticKind::uniform, 5000, 22);
  const PointsView v{pts.data(), 5000, 3};
  const KnnResult r = gpu_knn(v, nullptr, {4, true});
  EXPECT_TRUE(compare_knn(v, nullptr, r, reference_knn(v, nullptr, {4, true}), true).all_agree());
}

TEST(DeviceMemoryLimit, NegativeLimitThrows) {
  EXPECT_THROW(set_device_memory_limit(-1), error);
  EXPECT_EQ(device_memory_limit(), 0);
}

}  // namespace
}  // namespace pcnn
