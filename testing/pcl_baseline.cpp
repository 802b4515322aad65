// The CPU baseline: pcl::KdTreeFLANN on all cores.
#include <omp.h>
#include <pcl/features/normal_3d_omp.h>
#include <pcl/filters/radius_outlier_removal.h>
#include <pcl/filters/statistical_outlier_removal.h>
#include <pcl/kdtree/kdtree_flann.h>
#include <pcl/point_types.h>
#include <pcl/search/kdtree.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <utility>
#include <vector>

#include "knn_rows.hpp"
#include "pcnn/error.hpp"
#include "pcnn/index.hpp"
#include "pcnn/testing/baseline.hpp"

namespace pcnn {

namespace {

// A k-d tree over the finite references (PCL asserts on non-finite points); `ids` maps its
// points back to the references.
struct FiniteTree {
  std::vector<std::int32_t> ids;
  pcl::KdTreeFLANN<pcl::PointXYZ> tree{/*sorted=*/true};
  explicit FiniteTree(PointsView refs) : ids(cpu::finite_indices(refs)) {
    auto cloud = pcl::make_shared<pcl::PointCloud<pcl::PointXYZ>>();
    cloud->resize(ids.size());
    for (std::size_t i = 0; i < ids.size(); ++i) {
      const float* p = cpu::point(refs, ids[i]);
      (*cloud)[i] = pcl::PointXYZ(p[0], p[1], p[2]);
    }
    if (!ids.empty()) tree.setInputCloud(cloud);
  }
};

void set_timings(CpuKnnTimings* timings, std::chrono::steady_clock::time_point t0,
                 std::chrono::steady_clock::time_point t1, std::chrono::steady_clock::time_point t2,
                 int threads) {
  if (!timings) return;
  timings->build_ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
  timings->query_ms = std::chrono::duration<double, std::milli>(t2 - t1).count();
  timings->threads = threads;
}

}  // namespace

KnnResult pcl_knn(PointsView refs, const PointsView* queries, KnnParams params,
                  CpuKnnTimings* timings) {
  validate_knn_args(refs, queries, params);
  const PointsView& qv = queries ? *queries : refs;
  KnnResult out = cpu::empty_result(qv.count, params.k);
  using clock = std::chrono::steady_clock;

  const auto t0 = clock::now();
  const FiniteTree ft(refs);
  const std::vector<std::int32_t>& ids = ft.ids;
  const pcl::KdTreeFLANN<pcl::PointXYZ>& tree = ft.tree;
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
  set_timings(timings, t0, t1, clock::now(), threads);
  return out;
}

RadiusResult pcl_radius(PointsView refs, const PointsView* queries, RadiusParams params,
                        CpuKnnTimings* timings, int max_nn) {
  validate_radius(params.radius);
  validate_knn_args(refs, queries, {std::max(max_nn, 1), params.exclude_self});
  const PointsView& qv = queries ? *queries : refs;
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  const FiniteTree ft(refs);
  const auto t1 = clock::now();
  std::vector<std::vector<std::pair<float, std::int32_t>>> rows(qv.count);
  // Excluding self with a cap: ask for one more and drop the query (or the farthest).
  const int ask = max_nn > 0 ? max_nn + (params.exclude_self ? 1 : 0) : 0;
  int threads = 1;
#pragma omp parallel
  {
#pragma omp single
    threads = omp_get_num_threads();
    std::vector<int> idx;
    std::vector<float> dist;
#pragma omp for schedule(dynamic, 256)
    for (std::int64_t q = 0; q < qv.count; ++q) {
      if (ft.ids.empty() || !cpu::finite_point(qv, q)) continue;
      const float* p = cpu::point(qv, q);
      ft.tree.radiusSearch(pcl::PointXYZ(p[0], p[1], p[2]), params.radius, idx, dist,
                           static_cast<unsigned>(ask));
      auto& row = rows[q];
      for (std::size_t j = 0; j < idx.size(); ++j)
        if (!(params.exclude_self && ft.ids[idx[j]] == q))
          row.emplace_back(dist[j], ft.ids[idx[j]]);
      std::sort(row.begin(), row.end());
      if (max_nn > 0 && static_cast<int>(row.size()) > max_nn) row.resize(max_nn);
    }
  }
  const auto t2 = clock::now();
  RadiusResult r;
  r.rows = qv.count;
  r.offsets.assign(qv.count + 1, 0);
  for (std::int64_t q = 0; q < qv.count; ++q)
    r.offsets[q + 1] = r.offsets[q] + static_cast<std::int64_t>(rows[q].size());
  r.indices.reserve(r.offsets.back());
  r.sqdist.reserve(r.offsets.back());
  for (const auto& row : rows)
    for (const auto& [d, i] : row) {
      r.indices.push_back(i);
      r.sqdist.push_back(d);
    }
  set_timings(timings, t0, t1, t2, threads);
  return r;
}

HybridResult pcl_hybrid(PointsView refs, const PointsView* queries, HybridParams params,
                        CpuKnnTimings* timings) {
  validate_knn_args(refs, queries, {params.max_nn, params.exclude_self});
  const RadiusResult rr =
      pcl_radius(refs, queries, {params.radius, params.exclude_self}, timings, params.max_nn);
  HybridResult h;
  h.knn = cpu::empty_result(rr.rows, params.max_nn);
  h.counts.resize(rr.rows);
  for (std::int64_t q = 0; q < rr.rows; ++q) {
    h.counts[q] = static_cast<std::int32_t>(rr.count(q));
    for (std::int64_t j = 0; j < rr.count(q); ++j) {
      h.knn.indices[q * params.max_nn + j] = rr.indices[rr.offsets[q] + j];
      h.knn.sqdist[q * params.max_nn + j] = rr.sqdist[rr.offsets[q] + j];
    }
  }
  return h;
}

namespace {

pcl::PointCloud<pcl::PointXYZ>::Ptr to_pcl(PointsView pts) {
  auto cloud = pcl::make_shared<pcl::PointCloud<pcl::PointXYZ>>();
  cloud->resize(static_cast<std::size_t>(pts.count));
  bool dense = true;
  for (std::int64_t i = 0; i < pts.count; ++i) {
    const float* p = cpu::point(pts, i);
    (*cloud)[i] = pcl::PointXYZ(p[0], p[1], p[2]);
    dense = dense && cpu::finite_point(pts, i);
  }
  cloud->width = static_cast<std::uint32_t>(pts.count);
  cloud->height = 1;
  cloud->is_dense = dense;
  return cloud;
}

template <class Filter>
FilterResult run_filter(Filter& f, PointsView pts, double* ms) {
  const auto t0 = std::chrono::steady_clock::now();
  f.setInputCloud(to_pcl(pts));
  pcl::Indices kept;
  f.filter(kept);
  FilterResult r;
  r.kept.assign(kept.begin(), kept.end());
  std::sort(r.kept.begin(), r.kept.end());
  if (ms)
    *ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

// The statistics SOR decides with (PCL computes them but does not expose them), as
// gpu_statistical_outlier_removal computes them: each finite point's mean distance to its mean_k
// nearest others (FLANN's float distances, summed in ascending order in double, the mean
// rounded to float), then PCL's mean and sample standard deviation of those means. The
// neighbors come from pcnn's exact CPU backend.
void sor_statistics(PointsView pts, const SorParams& params, FilterResult& r) {
  IndexOptions o;
  o.backend = Backend::cpu;
  const KnnResult nn = Index(pts, o).self_knn({params.mean_k, true});
  double s = 0, ss = 0;
  std::int64_t n = 0;
  std::vector<float> d(static_cast<std::size_t>(params.mean_k));
  for (std::int64_t i = 0; i < pts.count; ++i) {
    const float* p = cpu::point(pts, i);
    if (!std::isfinite(p[0]) || !std::isfinite(p[1]) || !std::isfinite(p[2])) continue;
    for (int j = 0; j < params.mean_k; ++j)
      d[j] = flann_sqdist(p, cpu::point(pts, nn.indices[i * params.mean_k + j]));
    std::sort(d.begin(), d.end());
    double sum = 0;
    for (float v : d) sum += std::sqrt(static_cast<double>(v));
    const double mean = static_cast<float>(sum / params.mean_k);
    s += mean;
    ss += mean * mean;
    ++n;
  }
  r.mean = s / n;
  r.stddev = std::sqrt((ss - s * s / n) / (n - 1));
  r.threshold = r.mean + params.std_mul * r.stddev;
}

}  // namespace

FilterResult pcl_statistical_outlier_removal(PointsView pts, SorParams params, double* ms) {
  validate(params);
  validate_knn_args(pts, nullptr, {params.mean_k, true});
  const std::int64_t finite = static_cast<std::int64_t>(cpu::finite_indices(pts).size());
  PCNN_EXPECTS(finite > params.mean_k, "SOR: the cloud needs more than mean_k (" +
                                           std::to_string(params.mean_k) +
                                           ") finite points, it has " + std::to_string(finite));
  pcl::StatisticalOutlierRemoval<pcl::PointXYZ> f;
  f.setMeanK(params.mean_k);
  f.setStddevMulThresh(params.std_mul);
  FilterResult r = run_filter(f, pts, ms);
  sor_statistics(pts, params, r);
  return r;
}

FilterResult pcl_radius_outlier_removal(PointsView pts, RorParams params, double* ms) {
  validate(params);
  // PCL asserts on non-finite points in its radius search: run it on the finite points only
  // (as a PCL user must) and map the indices back.
  const std::vector<std::int32_t> ids = cpu::finite_indices(pts);
  if (ids.empty()) {  // nothing to keep; PCL would print an error for the empty tree
    if (ms) *ms = 0;
    return {};
  }
  std::vector<float> finite;
  finite.reserve(ids.size() * 3);
  for (std::int32_t i : ids)
    finite.insert(finite.end(), cpu::point(pts, i), cpu::point(pts, i) + 3);
  pcl::RadiusOutlierRemoval<pcl::PointXYZ> f;
  f.setRadiusSearch(params.radius);
  f.setMinNeighborsInRadius(params.min_neighbors);
  FilterResult r = run_filter(f, {finite.data(), static_cast<std::int64_t>(ids.size()), 3}, ms);
  for (auto& k : r.kept) k = ids[k];
  return r;
}

NormalsResult pcl_normals(PointsView pts, const NormalParams& params, double* ms) {
  validate(params);
  PCNN_EXPECTS(params.max_nn == 0, "PCL's NormalEstimation has no max_nn");
  auto cloud = pcl::make_shared<pcl::PointCloud<pcl::PointXYZ>>();
  cloud->resize(static_cast<std::size_t>(pts.count));
  bool dense = true;
  for (std::int64_t i = 0; i < pts.count; ++i) {
    const float* p = pts.data + i * pts.stride;
    (*cloud)[i] = pcl::PointXYZ(p[0], p[1], p[2]);
    dense = dense && pcl::isFinite((*cloud)[i]);
  }
  cloud->is_dense = dense;
  NormalsResult r;
  r.rows = pts.count;
  r.normals.resize(static_cast<std::size_t>(pts.count) * 3);
  r.curvature.resize(static_cast<std::size_t>(pts.count));
  if (pts.count == 0) return r;
  const auto t0 = std::chrono::steady_clock::now();
  pcl::NormalEstimationOMP<pcl::PointXYZ, pcl::Normal> ne(omp_get_max_threads());
  ne.setInputCloud(cloud);
  ne.setSearchMethod(pcl::make_shared<pcl::search::KdTree<pcl::PointXYZ>>());
  if (params.k > 0)
    ne.setKSearch(params.k);
  else
    ne.setRadiusSearch(params.radius);
  ne.setViewPoint(static_cast<float>(params.viewpoint[0]), static_cast<float>(params.viewpoint[1]),
                  static_cast<float>(params.viewpoint[2]));
  pcl::PointCloud<pcl::Normal> out;
  ne.compute(out);
  const auto t1 = std::chrono::steady_clock::now();
  if (ms) *ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
  for (std::int64_t i = 0; i < pts.count; ++i) {
    for (int a = 0; a < 3; ++a) r.normals[i * 3 + a] = out[i].normal[a];
    r.curvature[i] = out[i].curvature;
  }
  r.timings.total_ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
  return r;
}

}  // namespace pcnn
