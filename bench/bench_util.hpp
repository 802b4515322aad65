// Helpers the benchmark programs share: starting the backend, wall clocks, medians, option
// lists, and device buffers for the cases whose points or results live on the GPU.
//
// Every benchmark times what a library user sees: the public calls of pcnn::Index (wall clock
// around them, and the parts the index reports in Index::last_timings()), after one untimed
// warm-up run, as the median of several timed runs.
#pragma once

#include <cuda_runtime.h>
#include <execinfo.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "pcnn/device.hpp"
#include "pcnn/index.hpp"

namespace pcnn::bench {

/// On SIGSEGV, SIGFPE, SIGBUS or SIGABRT: the calling thread's stack (addresses and the
/// symbols the binary exports) and the process's mappings on stderr, then the default action.
/// For crashes met on a GPU machine without a debugger: addr2line on this machine's binary
/// turns the addresses (less the executable's base, in the mappings) into functions.
inline void report_crashes() {
  void* warm[1];
  static_cast<void>(backtrace(warm, 1));  // loads what backtrace needs now, not in the handler
  static char alt[1 << 16];               // a stack of its own: a stack overflow reports too
  stack_t ss{};
  ss.ss_sp = alt;
  ss.ss_size = sizeof alt;
  sigaltstack(&ss, nullptr);
  struct sigaction sa {};
  sa.sa_flags = SA_RESETHAND | SA_ONSTACK;
  sa.sa_handler = [](int sig) {
    void* frames[64];
    const int n = backtrace(frames, 64);
    const char head[] = "\n*** crash: the stack of the thread that received the signal\n";
    static_cast<void>(!write(2, head, sizeof head - 1));
    backtrace_symbols_fd(frames, n, 2);
    const int maps = open("/proc/self/maps", O_RDONLY);
    char buf[4096];
    for (ssize_t r; maps >= 0 && (r = read(maps, buf, sizeof buf)) > 0;)
      static_cast<void>(!write(2, buf, static_cast<std::size_t>(r)));
    raise(sig);
  };
  for (const int sig : {SIGSEGV, SIGFPE, SIGBUS, SIGABRT}) sigaction(sig, &sa, nullptr);
}

/// The device every GPU-only benchmark runs on: started (the context's cost kept out of the
/// timings) and described on stdout; exits with code 4, saying why, when none is usable.
inline DeviceInfo start_device(const char* program) {
  const DeviceInfo dev = query_device();
  if (!dev.available) {
    std::fprintf(stderr, "%s: no usable CUDA device: %s\n", program, dev.reason.c_str());
    std::exit(4);
  }
  initialize_device(dev.ordinal);
  std::printf("# device: %s (%s), %d SMs, %.1f GiB\n", dev.name.c_str(),
              dev.integrated ? "integrated" : "discrete", dev.multiprocessors,
              dev.total_memory / 1073741824.0);
  return dev;
}

/// The threads the CPU backend runs with for IndexOptions::threads = `threads` (0: all).
inline int cpu_threads(int threads) {
  return threads > 0 ? threads : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

/// Resolves `--device` (auto, cuda, cpu) as Index would, starts the GPU when it is the one
/// (so that context creation stays out of every timing) and says on stdout what runs.
/// Exits with code 4 when cuda is asked for and no device is usable.
inline Backend start_backend(const char* program, const std::string& device, int threads) {
  Backend b = parse_backend(device);
  if (b == Backend::automatic) b = query_device().available ? Backend::cuda : Backend::cpu;
  if (b == Backend::cuda)
    start_device(program);
  else
    std::printf("# device: CPU backend, %d threads\n", cpu_threads(threads));
  return b;
}

using Clock = std::chrono::steady_clock;

inline double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

/// The median (upper median for an even count); 0 for none.
inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

/// The p-quantile (0..1) by nearest rank; 0 for none.
inline double quantile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const auto i = static_cast<std::size_t>(p * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

inline std::vector<std::string> parse_words(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) out.push_back(item);
  return out;
}

inline std::vector<long long> parse_list(const std::string& s) {
  std::vector<long long> out;
  for (const std::string& w : parse_words(s)) out.push_back(std::stoll(w));
  return out;
}

/// Exits with code 4 naming the call when a CUDA runtime call of the benchmark itself fails
/// (the library's own failures arrive as pcnn::cuda_error).
inline void cuda_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    std::exit(4);
  }
}

/// `count` elements of device memory (cudaMalloc), freed on destruction. Move-only.
template <class T>
class DeviceArray {
 public:
  DeviceArray() = default;
  explicit DeviceArray(std::int64_t count) : count_(count) {
    if (count > 0) cuda_check(cudaMalloc(reinterpret_cast<void**>(&data_), bytes()), "cudaMalloc");
  }
  ~DeviceArray() {
    if (data_) cudaFree(data_);  // nothing to report from a destructor
  }
  DeviceArray(DeviceArray&& o) noexcept : data_(o.data_), count_(o.count_) {
    o.data_ = nullptr;
    o.count_ = 0;
  }
  DeviceArray& operator=(DeviceArray&& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(count_, o.count_);
    return *this;
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  T* data() const { return data_; }
  std::int64_t count() const { return count_; }
  std::size_t bytes() const { return static_cast<std::size_t>(count_) * sizeof(T); }
  void upload(const T* from) {
    cuda_check(cudaMemcpy(data_, from, bytes(), cudaMemcpyHostToDevice), "cudaMemcpy (upload)");
  }
  void download(T* to) const {
    cuda_check(cudaMemcpy(to, data_, bytes(), cudaMemcpyDeviceToHost), "cudaMemcpy (download)");
  }

 private:
  T* data_ = nullptr;
  std::int64_t count_ = 0;
};

}  // namespace pcnn::bench
