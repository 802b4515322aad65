// The index's internals through its detail code, compiled by nvcc: the build's order
// (gpu/spatial_index.cu, detail::build_spatial_index: its keys and points against a stable sort
// on the host), and which searches forward their rows to the host (gpu/cuda_backend.cu). Skips,
// saying why, without a device.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "gpu/detail/curve_key.cuh"
#include "gpu/detail/row_forward.cuh"
#include "gpu/detail/spatial_index.cuh"
#include "gpu_test.hpp"
#include "index_test_util.hpp"
#include "pcnn/index.hpp"
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

// Rows beyond the limit for forwarding them as they complete whatever their order
// (forward_any_order_bytes(), 512 MiB, lowered here) are forwarded so only where they complete in
// some spatial order: a chunk of rows (by original index) ends before the last pass. A scan in scan
// order is forwarded so (no download), its non-finite points' empty rows with it. Of the same
// points in no spatial order, rows of k >= 16 are swept (sweep_rows; no download), and of shorter
// ones those in a window of the first forward_any_order_bytes() are forwarded as they complete and
// the rest downloaded after the search (all of them with the limit at 0). Each way gives the CPU
// backend's rows: self-searches with and without each point itself, and each cloud's points as
// queries of the other's index; k = 1, 5 (rows across the window's end), 8 (3.9 MB over a limit of
// 3.5 MB: a window), 16 (a swept row a half line), 20 and 24 (swept rows across half lines) and
// 32; rows on a host line, 16 bytes into one (self-searches without each point: short first and
// last segments) and 80 bytes into one (the other cloud's points: a first half line without rows).
// At k = 1 with each point itself, the first-copy lookup, whose rows are always downloaded.
TEST(IndexForward, LargeRowsReachTheHostWhateverTheirOrder) {
  PCNN_REQUIRE_DEVICE();
  int device = 0, integrated = 0;
  ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&integrated, cudaDevAttrIntegrated, device), cudaSuccess);
  if (integrated) GTEST_SKIP() << "an integrated GPU maps its rows: nothing is forwarded";
  struct Limit {  // the process's value again however the test ends
    std::size_t was = detail::forward_any_order_bytes().load();
    ~Limit() { detail::forward_any_order_bytes() = was; }
  } limit;
  const std::int64_t n = 30 * 2048;  // whole chunks: a short last one could end early by chance
  std::vector<float> scan = make_synthetic_cloud(SyntheticKind::lidar, n, 71);
  for (const std::int64_t i : {std::int64_t(0), n / 3, n - 1})  // first, among them, last
    scan[3 * i + 1] = NAN;
  std::vector<float> shuffled = scan;  // the same points in no spatial order
  std::mt19937 rng(72);
  for (std::size_t i = shuffled.size() / 3 - 1; i > 0; --i) {
    const std::size_t j = std::uniform_int_distribution<std::size_t>(0, i)(rng);
    std::swap_ranges(shuffled.begin() + 3 * i, shuffled.begin() + 3 * i + 3,
                     shuffled.begin() + 3 * j);
  }
  IndexOptions cpu;
  cpu.backend = Backend::cpu;
  IndexOptions chunked;
  chunked.backend = Backend::cuda;
  chunked.chunk_rows = 2048;  // chunks that end early in a scan's order
  for (const auto& [name, xyz, other, ordered] :
       {std::tuple{"scan order", &scan, &shuffled, true},
        std::tuple{"no order", &shuffled, &scan, false}}) {
    Index gpu(test::view(*xyz), chunked);
    Index reference(test::view(*xyz), cpu);
    for (const std::size_t most :
         {std::size_t{0}, std::size_t{1000012}, std::size_t{3500000}, std::size_t{512} << 20})
      for (const int k : {1, 5, 8, 16, 20, 24, 32})
        for (const int search : {0, 1, 2}) {  // self, self without itself, the other's points
          detail::forward_any_order_bytes() = most;
          const bool self = search < 2, exclude = search == 1;
          const bool in_order = self ? ordered : !ordered;
          const std::string at =
              std::string(name) + (self ? "" : ", the other cloud's points as queries") +
              ", k = " + std::to_string(k) + (exclude ? ", without itself" : "") + ", limit " +
              std::to_string(most);
          // Entries before the rows in their host line: 20 leaves a swept search's first half
          // line without rows.
          const int lead = exclude ? 4 : search == 2 ? 20 : 0;
          pcnn::page_locked_vector<std::int32_t> idx(n * k + lead, -7);
          pcnn::page_locked_vector<float> dist(n * k + lead, -1.f);
          const MatrixView<std::int32_t> idx_rows{idx.data() + lead, n, k};
          const MatrixView<float> dist_rows{dist.data() + lead, n, k};
          if (self)
            gpu.self_knn({k, exclude}, idx_rows, dist_rows);
          else
            gpu.knn(test::view(*other), {k}, idx_rows, dist_rows);
          const SearchTimings& t = gpu.last_timings();
          const std::int64_t bytes = n * k * 8;
          const auto limit = static_cast<std::int64_t>(most);
          if (self && k == 1 && !exclude) {
            // each point's first copy (first_copy_kernel), downloaded whatever the limit
          } else if (in_order || bytes <= limit || k >= detail::kSweepFromK) {
            EXPECT_EQ(t.download_ms, 0.f) << at << ": downloaded";
          } else {  // the rows past the window (whole 128-byte lines of each array) downloaded
            EXPECT_GT(t.download_ms, 0.f) << at << ": forwarded";
            const std::int64_t window = bytes - t.download_bytes;
            EXPECT_LE(window, static_cast<std::int64_t>(most)) << at;
            EXPECT_GT(window, static_cast<std::int64_t>(most) - 256) << at;
          }
          const KnnResult want =
              self ? reference.self_knn({k, exclude}) : reference.knn(test::view(*other), {k});
          EXPECT_TRUE(test::same_rows(idx.data() + lead, dist.data() + lead, want)) << at;
        }
  }
}

}  // namespace
}  // namespace pcnn
