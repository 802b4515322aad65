// KnnSession: every staging mode gives gpu_knn's results, chunking does not change them, a frame
// loop allocates nothing after its first frame, and caller memory registered for a call is
// released even when the call throws. Skips (saying why) without a device.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "gpu_test.hpp"
#include "pcnn/device.hpp"
#include "pcnn/error.hpp"
#include "pcnn/knn.hpp"
#include "pcnn/session.hpp"
#include "pcnn/synthetic.hpp"
#include "test_clouds.hpp"

namespace pcnn {
namespace {

struct Clouds {
  std::vector<float> map = make_synthetic_cloud(SyntheticKind::lidar, 30000, 31);
  std::vector<float> scan = [] {
    std::vector<float> s = make_synthetic_cloud(SyntheticKind::lidar, 7000, 32);
    test::poison(s, 0.01, 33);
    return s;
  }();
  PointsView map_view() const { return {map.data(), 30000, 3}; }
  PointsView scan_view() const { return {scan.data(), 7000, 3}; }
};

void expect_equal(const KnnView& v, const KnnResult& r, const std::string& what) {
  ASSERT_EQ(v.rows, r.rows) << what;
  ASSERT_EQ(v.k, r.k) << what;
  const std::size_t cells = static_cast<std::size_t>(r.rows) * r.k;
  EXPECT_TRUE(std::equal(r.indices.begin(), r.indices.end(), v.indices)) << what;
  EXPECT_TRUE(std::equal(r.sqdist.begin(), r.sqdist.end(), v.sqdist)) << what;
  (void)cells;
}

TEST(KnnSession, EveryStagingModeGivesGpuKnnResults) {
  PCNN_REQUIRE_DEVICE();
  const Clouds c;
  const PointsView mv = c.map_view(), sv = c.scan_view();
  const KnnResult self = gpu_knn(mv, nullptr, {9, true}, Algorithm::grid);
  const KnnResult other = gpu_knn(mv, &sv, {4, false}, Algorithm::grid);
  for (Staging mode : {Staging::pageable, Staging::pinned, Staging::registered, Staging::mapped,
                       Staging::automatic}) {
    const std::string name = to_string(mode);
    KnnSession session({mode, 0});
    EXPECT_NE(session.staging(), Staging::automatic);
    session.set_reference(mv);
    SessionTimings t;
    expect_equal(session.query(nullptr, {9, true}, &t), self, name + " self");
    EXPECT_EQ(t.staging, session.staging());
    expect_equal(session.query(&sv, {4, false}, &t), other, name + " queries");
    std::vector<std::int32_t> idx(other.indices.size());
    std::vector<float> dist(other.sqdist.size());
    session.query_into(&sv, {4, false}, idx.data(), dist.data(), &t);
    EXPECT_EQ(idx, other.indices) << name << " query_into";
    EXPECT_EQ(dist, other.sqdist) << name << " query_into";
    if (mode != Staging::mapped) {
      EXPECT_GT(t.download_bytes, 0) << name;
    }
  }
  EXPECT_EQ(parse_staging("registered"), Staging::registered);
  EXPECT_THROW(parse_staging("fast"), error);
}

TEST(KnnSession, TinyChunksGiveTheSameResults) {
  PCNN_REQUIRE_DEVICE();
  const Clouds c;
  const PointsView mv = c.map_view(), sv = c.scan_view();
  KnnSession one({Staging::pinned, 0}), many({Staging::pinned, 128});
  one.set_reference(mv);
  many.set_reference(mv);
  SessionTimings t1, t2;
  const KnnView a = one.query(nullptr, {12, true}, &t1);
  const std::vector<std::int32_t> a_idx(a.indices, a.indices + a.rows * a.k);
  const KnnView b = many.query(nullptr, {12, true}, &t2);
  EXPECT_EQ(t1.chunks, 1);
  EXPECT_EQ(t2.chunks, (30000 + 127) / 128);
  EXPECT_TRUE(std::equal(a_idx.begin(), a_idx.end(), b.indices));
  const KnnView q = many.query(&sv, {3, false}, &t2);
  expect_equal(q, gpu_knn(mv, &sv, {3, false}, Algorithm::grid), "chunked queries");
}

TEST(KnnSession, StreamedRowsArriveInOrderAndMatch) {
  PCNN_REQUIRE_DEVICE();
  const Clouds c;
  const PointsView mv = c.map_view(), sv = c.scan_view();
  const KnnResult self = gpu_knn(mv, nullptr, {7, true}, Algorithm::grid);
  const KnnResult other = gpu_knn(mv, &sv, {3, false}, Algorithm::grid);
  for (Staging mode : {Staging::pinned, Staging::pageable, Staging::mapped}) {
    KnnSession session({mode, 1000});  // 1024 rows per chunk
    session.set_reference(mv);
    for (const PointsView* q : {static_cast<const PointsView*>(nullptr), &sv}) {
      const KnnResult& want = q ? other : self;
      const KnnParams p{want.k, q == nullptr};
      std::vector<std::int32_t> idx;
      std::vector<float> dist;
      std::int64_t next = 0;
      int calls = 0;
      SessionTimings t;
      session.query_stream(
          q, p,
          [&](std::int64_t first, const KnnView& v) {
            EXPECT_EQ(first, next);
            next += v.rows;
            ++calls;
            idx.insert(idx.end(), v.indices, v.indices + v.rows * v.k);
            dist.insert(dist.end(), v.sqdist, v.sqdist + v.rows * v.k);
          },
          &t);
      EXPECT_EQ(calls, static_cast<int>((want.rows + 1023) / 1024)) << to_string(mode);
      EXPECT_EQ(t.chunks, calls);
      EXPECT_EQ(idx, want.indices) << to_string(mode);
      EXPECT_EQ(dist, want.sqdist) << to_string(mode);
    }
  }
}

TEST(KnnSession, UnderAMemoryCapRowsAreSearchedChunkByChunk) {
  PCNN_REQUIRE_DEVICE();
  const Clouds c;
  const PointsView mv = c.map_view();
  KnnSession session({Staging::pinned, 0});
  session.set_reference(mv);
  const KnnResult want = gpu_knn(mv, nullptr, {32, true}, Algorithm::grid);
  // Room for the search's workspace, not for 30000 x 32 x 8 bytes of rows at once.
  set_device_memory_limit(device_memory_stats().current_bytes + (24 << 20));
  SessionTimings t;
  KnnView v;
  EXPECT_NO_THROW(v = session.query(nullptr, {32, true}, &t));
  set_device_memory_limit(0);
  EXPECT_GT(t.chunks, 1);
  expect_equal(v, want, "chunks under a cap");
}

TEST(KnnSession, AFrameLoopAllocatesNothingAfterTheFirstFrame) {
  PCNN_REQUIRE_DEVICE();
  for (Staging mode : {Staging::pinned, Staging::mapped, Staging::pageable}) {
    KnnSession session({mode, 2048});  // several chunks, two streams
    DeviceMemoryStats after_first{};
    for (int frame = 0; frame < 4; ++frame) {
      // A new scan every frame, of the same size: indexed, searched for itself and for another.
      const std::vector<float> scan = make_synthetic_cloud(SyntheticKind::lidar, 20000, 40 + frame);
      const std::vector<float> other = make_synthetic_cloud(SyntheticKind::lidar, 5000, 60 + frame);
      const PointsView sv{scan.data(), 20000, 3}, ov{other.data(), 5000, 3};
      session.set_reference(sv);
      const KnnView self = session.query(nullptr, {8, true});
      ASSERT_EQ(self.rows, 20000);
      const KnnView q = session.query(&ov, {5, false});
      ASSERT_EQ(q.rows, 5000);
      if (frame == 0) after_first = device_memory_stats();
    }
    const DeviceMemoryStats now = device_memory_stats();
    EXPECT_EQ(now.allocations, after_first.allocations) << to_string(mode);
    EXPECT_EQ(now.pinned_allocations, after_first.pinned_allocations) << to_string(mode);
  }
}

TEST(KnnSession, RegisteredCallerMemoryIsReleasedWhenTheSearchThrows) {
  PCNN_REQUIRE_DEVICE();
  const Clouds c;
  const PointsView mv = c.map_view(), sv = c.scan_view();
  KnnSession session({Staging::registered, 0});
  session.set_reference(mv);
  std::vector<std::int32_t> idx(7000 * 6);
  std::vector<float> dist(7000 * 6);
  const std::int64_t registered_before = device_memory_stats().registered_now;
  set_device_memory_limit(device_memory_stats().current_bytes + 1024);
  EXPECT_THROW(session.query_into(&sv, {6, false}, idx.data(), dist.data()), out_of_memory_error);
  set_device_memory_limit(0);
  EXPECT_EQ(device_memory_stats().registered_now, registered_before);
  cudaPointerAttributes attr{};
  ASSERT_EQ(cudaPointerGetAttributes(&attr, idx.data()), cudaSuccess);
  EXPECT_EQ(attr.type, cudaMemoryTypeUnregistered);
  // The session still works.
  session.query_into(&sv, {6, false}, idx.data(), dist.data());
  EXPECT_EQ(idx, gpu_knn(mv, &sv, {6, false}, Algorithm::grid).indices);
  EXPECT_EQ(device_memory_stats().registered_now, registered_before);
  // Memory the caller registered itself stays registered after the call.
  ASSERT_EQ(cudaHostRegister(dist.data(), dist.size() * sizeof(float), cudaHostRegisterDefault),
            cudaSuccess);
  std::fill(idx.begin(), idx.end(), 0);
  session.query_into(&sv, {6, false}, idx.data(), dist.data());
  EXPECT_EQ(idx, gpu_knn(mv, &sv, {6, false}, Algorithm::grid).indices);
  ASSERT_EQ(cudaPointerGetAttributes(&attr, dist.data()), cudaSuccess);
  EXPECT_EQ(attr.type, cudaMemoryTypeHost);
  EXPECT_EQ(cudaHostUnregister(dist.data()), cudaSuccess);
}

TEST(KnnSession, MisuseThrows) {
  PCNN_REQUIRE_DEVICE();
  KnnSession session;
  EXPECT_THROW(session.query(nullptr, {4, false}), error);  // no reference yet
  const Clouds c;
  const PointsView mv = c.map_view(), sv = c.scan_view();
  session.set_reference(mv);
  EXPECT_THROW(session.query(&sv, {4, true}), error);
  EXPECT_THROW(session.query(nullptr, {0, false}), error);
}

}  // namespace
}  // namespace pcnn
