// Getting host points onto the device in the form every search kernel takes.
#pragma once

#include <cuda_runtime.h>

#include "device_buffer.cuh"
#include "pcnn/points.hpp"

namespace pcnn::detail {

/// References compacted to their finite points (float4, w unused) with each one's original index,
/// and queries packed as float4 whose w carries a tag (see pack_points.cuh).
struct PreparedSearch {
  device_buffer<float4> refs;    // finite references, in original order
  device_buffer<int> ref_ids;    // original index of each compacted reference
  device_buffer<int> ref_count;  // one int on the device: how many references are finite
  device_buffer<float4> queries;
  int n_refs_total = 0;  // references before compaction (an upper bound for sizing)
  int n_queries = 0;
};

/// Uploads `refs` (and `queries`, or uses the references as queries when it is null) on `stream`
/// and compacts them on the device. `uploaded` is recorded after the copies. Asynchronous: the
/// host memory must stay valid until the stream has passed this point.
PreparedSearch prepare_search(PointsView refs, const PointsView* queries, bool exclude_self,
                              cudaStream_t stream, cuda_event& uploaded);

}  // namespace pcnn::detail
