// Exact double-precision brute-force kNN: the reference for every test.
#include <climits>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "knn_rows.hpp"
#include "pcnn/error.hpp"
#include "pcnn/testing/reference.hpp"

namespace pcnn {

void validate_knn_args(PointsView refs, const PointsView* queries, KnnParams params) {
  PCNN_EXPECTS(
      params.k >= 1 && params.k <= kMaxK,
      "k must be between 1 and " + std::to_string(kMaxK) + ", got " + std::to_string(params.k));
  auto check = [](const PointsView& v, const std::string& what) {
    PCNN_EXPECTS(v.count >= 0, what + ": negative point count");
    PCNN_EXPECTS(v.count <= INT_MAX, what + ": more than 2^31-1 points");
    PCNN_EXPECTS(!(v.data && v.data64), what + ": both float32 and float64 data given");
    PCNN_EXPECTS(v.count == 0 || v.address() != nullptr,
                 what + ": null data with a non-zero count");
    PCNN_EXPECTS(v.stride >= 3, what + ": stride must be at least 3 coordinates");
  };
  check(refs, "references");
  if (queries) check(*queries, "queries");
  PCNN_EXPECTS(!(params.exclude_self && queries),
               "exclude_self applies to a self-search only (no separate query set)");
}

void validate_radius(double radius) {
  PCNN_EXPECTS(std::isfinite(radius) && radius >= 0,
               "radius must be a finite number >= 0, got " + std::to_string(radius));
}

KnnResult reference_knn(PointsView refs, const PointsView* queries, KnnParams params) {
  validate_knn_args(refs, queries, params);
  const PointsView& qv = queries ? *queries : refs;
  KnnResult out = cpu::empty_result(qv.count, params.k);
  const std::vector<std::int32_t> ids = cpu::finite_indices(refs);
  cpu::parallel_rows(qv.count, [&](std::int64_t q) {
    if (!cpu::finite_point(qv, q)) return;
    const auto qp = cpu::xyz(qv, q);
    std::vector<std::pair<double, std::int32_t>> cand;
    cand.reserve(ids.size());
    for (std::int32_t i : ids) {
      if (params.exclude_self && i == q) continue;
      cand.emplace_back(cpu::sqdist_double(qp, cpu::xyz(refs, i)), i);
    }
    cpu::finish_row(cand, q, out);
  });
  return out;
}

}  // namespace pcnn
