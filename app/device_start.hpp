// The GPU's start-up begun early: on a thread of its own, while the inputs load.
//
// A process pays for a GPU before its first search: the driver, the context, and the modules of
// the kernels, which CUDA loads at each kernel's first launch (a command's one search paid for
// all of them and took twice its warm time). Begun before loading, with searches of small clouds
// that load the kernels the command will run, that cost overlaps the load instead of following
// it.
#pragma once

#include <functional>
#include <vector>

#include "pcnn/index.hpp"
#include "pcnn/memory.hpp"

namespace pcnn::app {

/// Begins the start-up of CUDA device `ordinal` on a thread, then runs `prepare` there (a
/// search of small clouds: see warm_up). At most one early start-up per process (later calls
/// do nothing); an error it meets (no usable device) is kept for device_startup. Where no thread
/// can be started, nothing is begun (device_startup then starts the device itself).
void start_device_early(int ordinal = 0, std::function<void()> prepare = {});

/// What a command will search, for warm_up: kNN (k), radius, or hybrid (k = max_nn).
enum class WarmUp { knn, radius, hybrid };

/// Builds and searches small clouds (20,000 and 256 points) on device `ordinal` the way a command
/// will (so that its kernels are loaded, and compiled where the device needs its PTX compiled).
/// Throws what the searches throw.
void warm_up(int ordinal, WarmUp kind, int k);

/// Waits until the early start-up of device `ordinal` has its context up (the warm-up may still
/// run): true then; false at once when there is no early start-up of that device, or once it
/// failed. Host memory can be page-locked from then on (pcnn::PageLock), while the warm-up runs.
bool wait_for_context(int ordinal);

/// The start-up of device `ordinal`: the early one, waited for (its error rethrown), or run now.
/// Returns its milliseconds (driver, context and modules); `waited_ms` (when given): how long
/// this call waited for it.
double device_startup(int ordinal, double* waited_ms = nullptr);

/// Ends the device's use as soon as a command is done with it: `index` destroyed, `locks`
/// released and device `ordinal` released (pcnn::release_device) on a thread, while the command
/// writes its outputs, rather than at exit. Nothing may use the device afterwards, and the locked
/// memory must outlive wait_for_release().
void release_device_early(Index&& index, int ordinal, std::vector<PageLock> locks = {});

/// Waits for the early release's thread, if any (before memory it unlocks is freed).
void wait_for_release() noexcept;

/// Waits for an early start-up that nobody waited for (the command chose the CPU, or failed)
/// and for an early release: before the process exits, so that the CUDA runtime is not torn
/// down under them.
void finish_early_start() noexcept;

}  // namespace pcnn::app
