// The index build's order (gpu/spatial_index.cu, detail::build_spatial_index), compiled by nvcc:
// its keys and points against a stable sort on the host. Skips, saying why, without a device.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "gpu/detail/curve_key.cuh"
#include "gpu/detail/spatial_index.cuh"
#include "gpu_test.hpp"
#include "pcnn/memory.hpp"
#include "pcnn/testing/synthetic.hpp"

namespace pcnn {
namespace {

#define CUDA_OK(call) ASSERT_EQ((call), cudaSuccess)

struct Built {
  int key_low_bit = 0;
  int n = 0, n_knn = 0;
  std::vector<std::uint64_t> keys;
  std::vector<int> ids;  // the sorted points' indices
};

void build(const std::vector<float>& xyz, Built& out) {
  const int n = static_cast<int>(xyz.size() / 3);
  PoolResource mr;
  detail::device_buffer<float> points(xyz.size(), nullptr, mr);
  CUDA_OK(cudaMemcpy(points.data(), xyz.data(), points.bytes(), cudaMemcpyHostToDevice));
  detail::ExactCoords exact;
  exact.f32 = points.data();
  const detail::SpatialIndex index =
      detail::build_spatial_index(points.data(), 3, n, exact, nullptr, mr);
  out.key_low_bit = index.key_low_bit;
  out.n = index.n;
  out.n_knn = index.n_knn;
  out.keys.resize(n);
  std::vector<float4> sorted(n);
  CUDA_OK(cudaMemcpy(out.keys.data(), index.keys.data(), n * sizeof(std::uint64_t),
                     cudaMemcpyDeviceToHost));
  CUDA_OK(
      cudaMemcpy(sorted.data(), index.points.data(), n * sizeof(float4), cudaMemcpyDeviceToHost));
  out.ids.resize(n);
  for (int j = 0; j < n; ++j) std::memcpy(&out.ids[j], &sorted[j].w, sizeof(int));
  const float* b = index.host_bounds;
  for (int j = 0; j < n; ++j) {  // the points as stored, each with its key on those bounds
    const int i = out.ids[j];
    ASSERT_GE(i, 0);
    ASSERT_LT(i, n);
    ASSERT_EQ(sorted[j].x, xyz[3 * i]);
    ASSERT_EQ(out.keys[j], detail::curve_key(xyz[3 * i], xyz[3 * i + 1], xyz[3 * i + 2], b))
        << "position " << j;
  }
}

// The build sorts on the key bits a cloud of its size needs; where a bucket (keys equal in those
// bits) still holds more than a cell of points that differ, it sorts the buckets further on the
// bits below (detail::refine_by_curve, on ranks of the buckets it counts), until none does. Every
// key keeps all its bits. Checked: the order is a stable sort on the host of every point's full
// key on the bits from the index's low bit; no two points a cell apart share a bucket but not
// their full key; a plain uniform cloud is not sorted further, and a cloud squeezed by a far
// point, one with a tiny cluster among 200,000 buckets (ranks of 18 bits: too few counted and
// the 32-bit keys would wrap), and both at once are.
TEST(IndexBuildOrder, CrowdedBucketsAreSortedFurtherIntoAStableSortOfTheKeys) {
  PCNN_REQUIRE_DEVICE();
  const std::vector<float> plain = make_synthetic_cloud(SyntheticKind::uniform, 200000, 61);
  std::vector<float> far = plain;
  far.insert(far.end(), {1e5f, 1e5f, 1e5f});
  std::vector<float> cluster = plain;
  const std::vector<float> tiny = make_synthetic_cloud(SyntheticKind::uniform, 4000, 62);
  // 2 mm across: within one of the first sort's buckets (2.4 cm), over ~40 full-resolution steps
  for (std::size_t c = 0; c < tiny.size(); ++c) cluster.push_back(1.f + tiny[c] * 2e-5f);
  std::vector<float> both = cluster;
  both.insert(both.end(), {-1e5f, 3e4f, 1e5f});
  Built base;
  ASSERT_NO_FATAL_FAILURE(build(plain, base));
  EXPECT_GT(base.key_low_bit, 0);
  const std::pair<const char*, const std::vector<float>*> clouds[] = {
      {"plain", &plain}, {"far point", &far}, {"tiny cluster", &cluster}, {"both", &both}};
  for (const auto& [name, xyz] : clouds) {
    SCOPED_TRACE(name);
    Built got;
    ASSERT_NO_FATAL_FAILURE(build(*xyz, got));
    const int n = static_cast<int>(xyz->size() / 3);
    EXPECT_EQ(got.n, n);
    EXPECT_EQ(got.n_knn, n);
    if (xyz == &plain)
      EXPECT_EQ(got.key_low_bit, base.key_low_bit);
    else
      EXPECT_LT(got.key_low_bit, base.key_low_bit);
    const int low = got.key_low_bit;
    std::vector<std::pair<std::uint64_t, int>> want(n);
    for (int j = 0; j < n; ++j) want[j] = {got.keys[j], got.ids[j]};
    std::sort(want.begin(), want.end(), [](const auto& x, const auto& y) {
      return x.second < y.second;
    });  // back to input order, then a stable sort on the sorted bits
    std::stable_sort(want.begin(), want.end(), [low](const auto& x, const auto& y) {
      return x.first >> low < y.first >> low;
    });
    for (int j = 0; j < n; ++j) ASSERT_EQ(got.ids[j], want[j].second) << "position " << j;
    if (low > 0)
      for (int j = 0; j + detail::kCell < n; ++j)
        if (got.keys[j] >> low == got.keys[j + detail::kCell] >> low)
          ASSERT_EQ(got.keys[j], got.keys[j + detail::kCell]) << "crowded at " << j;
  }
}

}  // namespace
}  // namespace pcnn
