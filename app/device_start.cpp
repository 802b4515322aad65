#include "device_start.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

#include "pcnn/device.hpp"

namespace pcnn::app {
namespace {

struct EarlyStart {
  std::mutex m;
  std::thread thread, release;
  int ordinal = -1;
  double ms = 0;
  std::exception_ptr error;
  // Whether the context is up (or its start failed): a mutex of its own, since device_startup
  // holds `m` while it joins the thread that says so.
  std::mutex ready_m;
  std::condition_variable ready_cv;
  bool ready = false, ready_ok = false;

  void announce(bool ok) {
    {
      const std::lock_guard<std::mutex> lock(ready_m);
      if (ready) return;
      ready = true;
      ready_ok = ok;
    }
    ready_cv.notify_all();
  }
};

EarlyStart& early() {
  static EarlyStart e;
  return e;
}

}  // namespace

void start_device_early(int ordinal, std::function<void()> prepare) {
  EarlyStart& e = early();
  const std::lock_guard<std::mutex> lock(e.m);
  if (e.ordinal >= 0) return;
  try {
    e.thread = std::thread([&e, ordinal, prepare = std::move(prepare)] {
      const auto t0 = std::chrono::steady_clock::now();
      try {
        initialize_device(ordinal);
        e.announce(true);
        if (prepare) prepare();
      } catch (...) {
        e.error = std::current_exception();
      }
      e.announce(false);  // the start failed before the context was up
      e.ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    });
  } catch (const std::system_error&) {
    return;  // no thread: device_startup starts the device when it is needed
  }
  e.ordinal = ordinal;
}

void warm_up(int ordinal, WarmUp kind, int k) {
  // A fixed scatter in the unit cube.
  const auto scatter = [](int n) {
    std::vector<float> xyz(3 * static_cast<std::size_t>(n));
    std::uint32_t x = 12345;
    for (float& v : xyz) {
      x = x * 1664525u + 1013904223u;
      v = static_cast<float>(x >> 8) / 16777216.f;
    }
    return xyz;
  };
  IndexOptions o;
  o.backend = Backend::cuda;
  o.device = ordinal;
  o.chunk_rows = 4096;  // 20,000 points in chunks; 256 in one, as by default
  Index index(o);
  const int kk = std::min(std::max(k, 1), 255);
  // The command's kNN or hybrid search of the indexed points (a radius search: below).
  const auto search = [&](double hybrid_radius) {
    if (kind == WarmUp::knn)
      static_cast<void>(index.self_knn({kk, true}));
    else if (kind == WarmUp::hybrid)
      static_cast<void>(index.self_hybrid({hybrid_radius, kk, true}));
  };
  // Kernels load at their first launch: 0.35-0.5 ms of a 1M-point command's GPU total (H200,
  // bench/results/2026-11-29-round23.md). 20,000 points, one of them not finite, their rows
  // forwarded in one pass. (The sorts that order a cloud's points, or its queries, and the kernels
  // of a search whose rows are too large to forward so, which this one never launches, loaded with
  // the context: initialize_device; bench/results/2026-11-30-round38.md.)
  std::vector<float> many = scatter(20000);
  many[3 * 777 + 1] = NAN;
  index.build(host_points(many.data(), 20000));
  search(0.05);
  // 256 points: a search of few queries, which loads both kernels of the shared walk.
  std::vector<float> xyz = scatter(256);
  index.build(host_points(xyz.data(), 256));
  search(0.25);
  if (kind == WarmUp::radius) {
    // The command counts first, then fills with the one walk that keeps what it counts and a
    // second walk for the rows longer than that: r = 0.5 gives rows both under and over 64 here
    // (up to ~130 inside the cube). With rows of ~17 only, a LiDAR-like scan's command loaded the
    // longer rows' kernels in its search. (Rows over 256, and the fill passes that replace the
    // one walk where memory is short, still load late.)
    std::vector<std::int64_t> offsets(257);
    static_cast<void>(index.self_radius_count({0.5, true}, {offsets.data(), 257}));
    static_cast<void>(index.self_radius({0.5, true}));
  }
}

bool wait_for_context(int ordinal) {
  EarlyStart& e = early();
  {
    const std::lock_guard<std::mutex> lock(e.m);
    if (e.ordinal != ordinal) return false;
  }
  std::unique_lock<std::mutex> lock(e.ready_m);
  e.ready_cv.wait(lock, [&] { return e.ready; });
  return e.ready_ok;
}

double device_startup(int ordinal, double* waited_ms) {
  EarlyStart& e = early();
  const auto t0 = std::chrono::steady_clock::now();
  {
    const std::lock_guard<std::mutex> lock(e.m);
    if (e.ordinal == ordinal) {
      if (e.thread.joinable()) e.thread.join();
      if (waited_ms)
        *waited_ms =
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                .count();
      if (e.error) std::rethrow_exception(e.error);
      return e.ms;
    }
  }
  const double ms = initialize_device(ordinal);
  if (waited_ms) *waited_ms = ms;
  return ms;
}

void release_device_early(Index&& index, int ordinal, std::vector<PageLock> locks) {
  EarlyStart& e = early();
  const std::lock_guard<std::mutex> lock(e.m);
  if (e.thread.joinable()) e.thread.join();  // the start-up is over before the end begins
  if (e.release.joinable()) e.release.join();
  auto held = std::make_unique<Index>(std::move(index));
  try {
    e.release = std::thread([ordinal, held = std::move(held), locks = std::move(locks)]() mutable {
      held.reset();             // its memory and streams,
      locks.clear();            // the host memory it copied from and into,
      release_device(ordinal);  // then the context
    });
  } catch (const std::system_error&) {
    // No thread: the index and the locks go here, the device at exit.
  }
}

void wait_for_release() noexcept {
  EarlyStart& e = early();
  const std::lock_guard<std::mutex> lock(e.m);
  if (e.release.joinable()) e.release.join();
}

void finish_early_start() noexcept {
  EarlyStart& e = early();
  const std::lock_guard<std::mutex> lock(e.m);
  if (e.thread.joinable()) e.thread.join();
  if (e.release.joinable()) e.release.join();
}

}  // namespace pcnn::app
