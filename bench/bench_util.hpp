// Helpers the benchmark programs share.
#pragma once

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "pcnn/device.hpp"

namespace pcnn::bench {

/// The device every benchmark runs on: started (the context's cost kept out of the timings) and
/// described on stdout; exits with code 4, saying why, when none is usable.
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

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
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

}  // namespace pcnn::bench
