// pcnn — finding out whether a CUDA device is usable.
#pragma once

#include <cstdint>
#include <string>

namespace pcnn {

/// What pcnn knows of one CUDA device.
struct DeviceInfo {
  bool available = false;  ///< a device is present and usable
  std::string reason;      ///< why not, when !available (no driver, no device, driver too old)
  int ordinal = 0;
  std::string name;
  int cc_major = 0, cc_minor = 0;
  std::int64_t total_memory = 0;  ///< bytes
  int multiprocessors = 0;
  bool integrated = false;  ///< shares memory with the host (Jetson)
  int driver_version = 0, runtime_version = 0;
};

/// Describes device `ordinal` without throwing; `available` is false (with a reason) when it
/// cannot be used. Does not create a context.
DeviceInfo query_device(int ordinal = 0);

/// Creates the CUDA context on device `ordinal` (the one-time start-up cost, kept out of search
/// timings) and returns the milliseconds it took. Throws pcnn::no_device_error when unusable.
double initialize_device(int ordinal = 0);

/// Device memory pcnn itself holds (through its own allocations), in bytes.
struct DeviceMemoryStats {
  std::int64_t current_bytes = 0;
  std::int64_t peak_bytes = 0;          ///< since the last reset_peak_device_memory()
  std::int64_t allocations = 0;         ///< cudaMalloc calls made, ever
  std::int64_t pinned_allocations = 0;  ///< cudaHostAlloc calls made, ever
  std::int64_t registrations = 0;       ///< cudaHostRegister calls made, ever
  std::int64_t registered_now = 0;      ///< caller buffers registered at this moment
};
DeviceMemoryStats device_memory_stats();
void reset_peak_device_memory();

/// Caps the device memory pcnn may hold at once (bytes; 0 removes the cap), e.g. to share a GPU
/// with other work. Searches plan within it: a result too large for what is left is produced in
/// query chunks, and a request that cannot fit at all throws pcnn::out_of_memory_error saying
/// how many bytes it needed and how many were available. Applies process-wide, to every device.
void set_device_memory_limit(std::int64_t bytes);
std::int64_t device_memory_limit();

/// Bytes pcnn could allocate now on the current device: the free device memory plus what pcnn
/// keeps cached, or what is left under set_device_memory_limit() when that is smaller.
std::int64_t device_memory_available();

/// pcnn allocates device memory from the device's stream-ordered pool and keeps what it frees
/// cached there, so repeated searches do not pay for allocation. This returns the cached memory
/// to the device (synchronizes the device first).
void release_cached_device_memory();

}  // namespace pcnn
