#include "device_start.hpp"

#include <chrono>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>

#include "pcnn/device.hpp"

namespace pcnn::app {
namespace {

struct EarlyStart {
  std::mutex m;
  std::thread thread, release;
  int ordinal = -1;
  double ms = 0;
  std::exception_ptr error;
};

EarlyStart& early() {
  static EarlyStart e;
  return e;
}

}  // namespace

void start_device_early(int ordinal) {
  EarlyStart& e = early();
  const std::lock_guard<std::mutex> lock(e.m);
  if (e.ordinal >= 0) return;
  e.ordinal = ordinal;
  e.thread = std::thread([&e, ordinal] {
    try {
      e.ms = initialize_device(ordinal);
    } catch (...) {
      e.error = std::current_exception();
    }
  });
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

void release_device_early(Index&& index, int ordinal) {
  EarlyStart& e = early();
  const std::lock_guard<std::mutex> lock(e.m);
  if (e.thread.joinable()) e.thread.join();  // the start-up is over before the end begins
  if (e.release.joinable()) e.release.join();
  e.release = std::thread([ordinal, held = std::make_unique<Index>(std::move(index))]() mutable {
    held.reset();  // its memory and streams, then the context
    release_device(ordinal);
  });
}

void finish_early_start() noexcept {
  EarlyStart& e = early();
  const std::lock_guard<std::mutex> lock(e.m);
  if (e.thread.joinable()) e.thread.join();
  if (e.release.joinable()) e.release.join();
}

}  // namespace pcnn::app
