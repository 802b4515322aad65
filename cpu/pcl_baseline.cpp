// The CPU baseline: pcl::KdTreeFLANN on all cores.
#include <omp.h>
#include <pcl/kdtree/kdtree_flann.h>
#include <pcl/point_types.h>

#include <chrono>
#include <utility>
#include <vector>

#include "knn_rows.hpp"
#include "pcnn/baseline.hpp"

namespace pcnn {

KnnResult pcl_knn(PointsView refs, const PointsView* queries, KnnParams params,
                  CpuKnnTimings* timings) {
  validate_knn_args(refs, queries, params);
  const PointsView& qv = queries ? *queries : refs;
  KnnResult out = cpu::empty_result(qv.count, params.k);
  using clock = std::chrono::steady_clock;

  const auto t0 = clock::now();
  const std::vector<std::int32_t> ids = cpu::finite_indices(refs);
  auto cloud = pcl::make_shared<pcl::PointCloud<pcl::PointXYZ>>();
  cloud->resize(ids.size());
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const float* p = cpu::point(refs, ids[i]);
    (*cloud)[i] = pcl::PointXYZ(p[0], p[1], p[2]);
  }
  pcl::KdTreeFLANN<pcl::PointXYZ> tree(/*sorted=*/true);
  if (!ids.empty()) tree.setInputCloud(cloud);
  const auto t1 = clock::now();

  // Excluding self: ask for one more and drop the query itself (or, when duplicates of it
  // crowd it out, the last one).
  const int ask = params.k + (params.exclude_self ? 1 : 0);
  int threads = 1;
#pragma omp parallel
  {
#pragma omp single
    threads = omp_get_num_threads();
    std::vector<int> idx;
    std::vector<float> dist;
    std::vector<std::pair<float, std::int32_t>> cand;
#pragma omp for schedule(dynamic, 256)
    for (std::int64_t q = 0; q < qv.count; ++q) {
      if (ids.empty() || !cpu::finite_point(qv, q)) continue;
      const float* p = cpu::point(qv, q);
      tree.nearestKSearch(pcl::PointXYZ(p[0], p[1], p[2]), ask, idx, dist);
      cand.clear();
      for (std::size_t j = 0; j < idx.size(); ++j) cand.emplace_back(dist[j], ids[idx[j]]);
      if (params.exclude_self) {
        std::sort(cand.begin(), cand.end());
        auto self =
            std::find_if(cand.begin(), cand.end(), [q](const auto& c) { return c.second == q; });
        if (self != cand.end())
          cand.erase(self);
        else if (static_cast<int>(cand.size()) > params.k)
          cand.pop_back();
      }
      cpu::finish_row(cand, q, out);
    }
  }
  const auto t2 = clock::now();
  if (timings) {
    timings->build_ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
    timings->query_ms = std::chrono::duration<double, std::milli>(t2 - t1).count();
    timings->threads = threads;
  }
  return out;
}

}  // namespace pcnn
