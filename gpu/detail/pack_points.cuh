// How a packed query (float4) says what to do with it: its w carries an int tag.
#pragma once

#include <cuda_runtime.h>

namespace pcnn::detail {

/// Tags carried in a packed query's w (as int bits): which reference to skip (>= 0), or none.
inline constexpr int kQueryNoSelf = -1;
/// The query is not finite: its result row stays empty.
inline constexpr int kQueryInvalid = -2;

}  // namespace pcnn::detail
