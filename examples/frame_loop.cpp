// A sensor frame loop: every frame brings a new cloud of the same size; the index is rebuilt over
// it in place and each point's 8 nearest neighbors go into buffers allocated once, before the
// loop. After the first frame nothing is allocated any more, by the loop or by pcnn: the counters
// of Index::memory_stats() stand still (the program checks it, and fails if they do not).
#include <pcnn/error.hpp>
#include <pcnn/index.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

namespace {

// A stand-in for a sensor: a ground plane and a ball of 1 m radius rolling along x, `n` points in
// all, written into `xyz` (3n floats) without allocating.
void next_frame(int frame, std::mt19937& rng, std::vector<float>& xyz) {
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  const std::size_t n = xyz.size() / 3;
  for (std::size_t i = 0; i < n; ++i) {
    float* p = &xyz[3 * i];
    if (i % 4 != 0) {  // ground: 20 m x 20 m at z = 0
      p[0] = 10.f * u(rng);
      p[1] = 10.f * u(rng);
      p[2] = 0.f;
    } else {  // ball: a random direction, normalized
      float d[3] = {u(rng), u(rng), u(rng)};
      const float len = std::sqrt(d[0] * d[0] + d[1] * d[1] + d[2] * d[2]) + 1e-6f;
      p[0] = 0.5f * static_cast<float>(frame) + d[0] / len;
      p[1] = d[1] / len;
      p[2] = 1.f + d[2] / len;
    }
  }
}

}  // namespace

int main() {
  const std::int64_t n = 50000;  // points per frame
  const int k = 8, frames = 10;
  // Everything the loop writes is allocated here, once.
  std::vector<float> xyz(3 * static_cast<std::size_t>(n));
  std::vector<std::int32_t> idx(static_cast<std::size_t>(n) * k);
  std::vector<float> d2(idx.size());
  std::mt19937 rng(1);

  try {
    pcnn::Index index;  // empty; the GPU when one is usable, else the CPU
    pcnn::KnnParams params;
    params.k = k;
    params.exclude_self = true;
    std::int64_t first_frame_allocations = 0;
    bool allocated_later = false;
    for (int frame = 0; frame < frames; ++frame) {
      next_frame(frame, rng, xyz);
      index.build(pcnn::host_points(xyz.data(), n));  // in place: reuses the index's memory
      const double build_ms = index.last_timings().total_ms;
      index.self_knn(params, {idx.data(), n, k}, {d2.data(), n, k});
      const double search_ms = index.last_timings().total_ms;

      double sum = 0;  // mean distance to the nearest neighbor (column 0 of each row)
      for (std::int64_t i = 0; i < n; ++i) sum += std::sqrt(d2[static_cast<std::size_t>(i) * k]);

      // Device blocks from the index's memory pool, page-locked staging buffers, and caller
      // buffers page-locked for transfers: each counts every time it was obtained, ever.
      const pcnn::IndexMemoryStats m = index.memory_stats();
      const std::int64_t allocations =
          m.device_allocations + m.pinned_allocations + m.registrations;
      std::printf(
          "frame %d (%s): build %.2f ms, search %.2f ms, mean NN distance %.4f m | device memory "
          "%.1f MiB held, allocations so far: device %lld, page-locked %lld, registrations %lld\n",
          frame, pcnn::to_string(index.backend()), build_ms, search_ms, sum / double(n),
          double(m.device.current_bytes) / 1048576.0, static_cast<long long>(m.device_allocations),
          static_cast<long long>(m.pinned_allocations), static_cast<long long>(m.registrations));
      if (frame == 0)
        first_frame_allocations = allocations;
      else if (allocations != first_frame_allocations)
        allocated_later = true;
    }
    if (index.backend() == pcnn::Backend::cpu)
      std::printf("(the CPU backend holds no device memory: its counters stay at 0)\n");
    if (allocated_later) {
      std::printf("FAILED: the index allocated after its first frame\n");
      return 1;
    }
    std::printf("no allocations after frame 0\n");
  } catch (const pcnn::error& e) {
    std::fprintf(stderr, "pcnn: %s\n", e.what());
    return 1;
  }
}
