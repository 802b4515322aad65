// For GPU tests: skip, saying why, when no CUDA device is usable.
#pragma once

#include <gtest/gtest.h>

#include "pcnn/device.hpp"

// GTEST_SKIP returns from the function it is in, so this is a macro, not a helper function.
#define PCNN_REQUIRE_DEVICE()                                                         \
  do {                                                                                \
    const ::pcnn::DeviceInfo pcnn_dev_ = ::pcnn::query_device();                      \
    if (!pcnn_dev_.available) GTEST_SKIP() << "no CUDA device: " << pcnn_dev_.reason; \
  } while (0)
