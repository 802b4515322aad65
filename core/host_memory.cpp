// How much host memory this process could still obtain: the system's, its cgroup's and its own
// address-space limit, whichever is smallest (a container's limit is invisible in /proc/meminfo).
#include <sys/resource.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "pcnn/memory.hpp"

namespace pcnn {
namespace {

// The value after `key` in a "key: value kB" file (/proc/meminfo, /proc/self/status), in bytes.
std::int64_t kib_field(const char* file, const std::string& key) {
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line))
    if (line.compare(0, key.size(), key) == 0) {
      std::istringstream fields(line.substr(key.size()));
      std::int64_t kib = -1;
      if (fields >> kib && kib >= 0) return kib * 1024;
      return -1;
    }
  return -1;
}

// A single number in a cgroup file ("max" or unreadable: -1).
std::int64_t cgroup_value(const std::string& file) {
  std::ifstream in(file);
  std::string word;
  if (!(in >> word) || word == "max") return -1;
  try {
    return std::stoll(word);
  } catch (const std::exception&) {
    return -1;
  }
}

// The directory of this process's cgroup (v2: the line "0::/path" of /proc/self/cgroup).
std::string cgroup_dir() {
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  while (std::getline(in, line))
    if (line.compare(0, 3, "0::") == 0) return "/sys/fs/cgroup" + line.substr(3);
  return {};
}

}  // namespace

std::int64_t available_host_memory() {
  std::int64_t best = kib_field("/proc/meminfo", "MemAvailable:");
  auto take = [&](std::int64_t v) {
    if (v >= 0) best = best < 0 ? v : std::min(best, v);
  };
  const std::string dir = cgroup_dir();
  if (!dir.empty()) {
    const std::int64_t limit = cgroup_value(dir + "/memory.max");
    const std::int64_t used = cgroup_value(dir + "/memory.current");
    if (limit >= 0 && used >= 0) take(std::max<std::int64_t>(0, limit - used));
  }
  rlimit as{};
  if (::getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY) {
    const std::int64_t in_use = kib_field("/proc/self/status", "VmSize:");
    const auto cap =
        static_cast<std::int64_t>(std::min<rlim_t>(as.rlim_cur, static_cast<rlim_t>(INT64_MAX)));
    take(std::max<std::int64_t>(0, cap - std::max<std::int64_t>(in_use, 0)));
  }
  return best;
}

std::string format_bytes(std::int64_t bytes) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3g GB (%lld bytes)", double(bytes) / 1e9,
                static_cast<long long>(bytes));
  return buf;
}

}  // namespace pcnn
