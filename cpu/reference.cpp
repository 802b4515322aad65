// Exact double-precision brute-force kNN: the reference for every test.
#include <utility>
#include <vector>

#include "knn_rows.hpp"
#include "pcnn/reference.hpp"

namespace pcnn {

KnnResult reference_knn(PointsView refs, const PointsView* queries, KnnParams params) {
  validate_knn_args(refs, queries, params);
  const PointsView& qv = queries ? *queries : refs;
  KnnResult out = cpu::empty_result(qv.count, params.k);
  const std::vector<std::int32_t> ids = cpu::finite_indices(refs);
  cpu::parallel_rows(qv.count, [&](std::int64_t q) {
    if (!cpu::finite_point(qv, q)) return;
    const float* qp = cpu::point(qv, q);
    std::vector<std::pair<double, std::int32_t>> cand;
    cand.reserve(ids.size());
    for (std::int32_t i : ids) {
      if (params.exclude_self && i == q) continue;
      cand.emplace_back(cpu::sqdist_double(qp, cpu::point(refs, i)), i);
    }
    cpu::finish_row(cand, q, out);
  });
  return out;
}

}  // namespace pcnn
