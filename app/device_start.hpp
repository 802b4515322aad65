// The GPU's start-up begun early: on a thread of its own, while the inputs load.
//
// A process pays for a GPU before its first search: the driver, the context, and the modules of
// the kernels (loaded eagerly by the pcnn command, see main.cpp, so that the first search is not
// slowed by loading its kernels). Begun before loading, that cost overlaps the load instead of
// following it.
#pragma once

#include "pcnn/index.hpp"

namespace pcnn::app {

/// Begins the start-up of CUDA device `ordinal` on a thread. At most one early start-up per
/// process (later calls do nothing); an error it meets (no usable device) is kept for
/// device_startup.
void start_device_early(int ordinal = 0);

/// The start-up of device `ordinal`: the early one, waited for (its error rethrown), or run now.
/// Returns its milliseconds (driver, context and modules); `waited_ms` (when given): how long
/// this call waited for it.
double device_startup(int ordinal, double* waited_ms = nullptr);

/// Ends the device's use as soon as a command is done with it: `index` destroyed and device
/// `ordinal` released (pcnn::release_device) on a thread, while the command writes its outputs,
/// rather than at exit. Nothing may use the device afterwards.
void release_device_early(Index&& index, int ordinal);

/// Waits for an early start-up that nobody waited for (the command chose the CPU, or failed)
/// and for an early release: before the process exits, so that the CUDA runtime is not torn
/// down under them.
void finish_early_start() noexcept;

}  // namespace pcnn::app
