// The CPUs this process may run on: its affinity mask (taskset, Slurm and container cpusets
// narrow it), else every hardware thread. CPU quotas (docker --cpus) are not seen.
#pragma once

#include <sched.h>

#include <algorithm>
#include <thread>

namespace pcnn::detail {

inline int usable_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

}  // namespace pcnn::detail
