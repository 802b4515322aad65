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

/// The number of CUDA devices present (0 without a driver or a device). Never throws.
int device_count();

/// Starts the driver (where no call has yet) and creates the CUDA context on device `ordinal`,
/// then (once a context) loads the code that orders an index's points, whatever their number
/// (CUDA loads a kernel at its first launch): the one-time start-up cost, kept out of search
/// timings. Returns the milliseconds it took. Throws pcnn::no_device_error when unusable.
double initialize_device(int ordinal = 0);

/// Gives back what this process holds on device `ordinal` (cudaDeviceReset: its memory and its
/// context), for a process done with the GPU before it ends: the teardown otherwise comes at
/// exit (about 0.1 s on an H100 host). Every pcnn object using the device must be gone, and
/// page-locked memory (pcnn::allocate_page_locked) freed first: the reset may free it with the
/// context. A later use starts the device again. Never throws.
void release_device(int ordinal = 0) noexcept;

}  // namespace pcnn
