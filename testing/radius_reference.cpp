// Exact double-precision radius and hybrid search by brute force: the references for the tests.
#include <algorithm>
#include <cmath>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "knn_rows.hpp"
#include "pcnn/error.hpp"
#include "pcnn/radius.hpp"
#include "pcnn/testing/reference.hpp"

namespace pcnn {
namespace {

// Every finite reference within `radius` of query q (not q itself when exclude_self), with its
// exact squared distance.
template <class Row>
void within(PointsView refs, const PointsView& qv, const std::vector<std::int32_t>& ids,
            std::int64_t q, double radius, bool exclude_self, Row& out) {
  out.clear();
  if (!cpu::finite_point(qv, q)) return;
  const double r2 = radius * radius;
  const auto qp = cpu::xyz(qv, q);
  for (std::int32_t i : ids) {
    if (exclude_self && i == q) continue;
    const double d2 = cpu::sqdist_double(qp, cpu::xyz(refs, i));
    if (d2 <= r2) out.emplace_back(d2, i);
  }
}

}  // namespace

RadiusResult reference_radius(PointsView refs, const PointsView* queries, RadiusParams params) {
  validate_radius(params.radius);
  validate_knn_args(refs, queries, {1, params.exclude_self});
  const PointsView& qv = queries ? *queries : refs;
  const std::vector<std::int32_t> ids = cpu::finite_indices(refs);
  // Each row sorted by (exact double distance, index), then reported as the double rounded to
  // float: the contract (two distances equal in float but not in double keep the double order).
  std::vector<std::vector<std::pair<double, std::int32_t>>> rows(qv.count);
  cpu::parallel_rows(qv.count, [&](std::int64_t q) {
    auto& row = rows[q];
    within(refs, qv, ids, q, params.radius, params.exclude_self, row);
    std::sort(row.begin(), row.end());
  });
  RadiusResult r;
  r.rows = qv.count;
  r.offsets.assign(qv.count + 1, 0);
  for (std::int64_t q = 0; q < qv.count; ++q)
    r.offsets[q + 1] = r.offsets[q] + static_cast<std::int64_t>(rows[q].size());
  for (const auto& row : rows)
    for (const auto& [d, i] : row) {
      r.indices.push_back(i);
      r.sqdist.push_back(static_cast<float>(d));
    }
  return r;
}

HybridResult reference_hybrid(PointsView refs, const PointsView* queries, HybridParams params) {
  validate_radius(params.radius);
  const KnnParams kp{params.max_nn, params.exclude_self};
  validate_knn_args(refs, queries, kp);
  const PointsView& qv = queries ? *queries : refs;
  const std::vector<std::int32_t> ids = cpu::finite_indices(refs);
  HybridResult r;
  r.knn = cpu::empty_result(qv.count, kp.k);
  cpu::parallel_rows(qv.count, [&](std::int64_t q) {
    std::vector<std::pair<double, std::int32_t>> found;
    within(refs, qv, ids, q, params.radius, params.exclude_self, found);
    cpu::finish_row(found, q, r.knn);
  });
  r.counts = row_counts(r.knn);
  return r;
}

RadiusAgreement compare_radius(PointsView refs, const PointsView* queries, const RadiusResult& a,
                               const RadiusResult& b, double radius, bool exclude_self,
                               double rel_tol) {
  const PointsView& qv = queries ? *queries : refs;
  PCNN_EXPECTS(a.rows == qv.count && b.rows == qv.count,
               "compare_radius: results do not have one row per query");
  const double r2 = radius * radius, hi = r2 * (1 + rel_tol), lo = r2 * (1 - rel_tol);
  RadiusAgreement ag;
  ag.rows = qv.count;
  std::vector<std::int32_t> sa, sb, only;
  for (std::int64_t q = 0; q < qv.count; ++q) {
    std::string problem;
    auto check = [&](const RadiusResult& r, std::vector<std::int32_t>& sorted, const char* side) {
      sorted.assign(r.indices.begin() + r.offsets[q], r.indices.begin() + r.offsets[q + 1]);
      for (std::int32_t i : sorted) {
        if (i < 0 || i >= refs.count || !cpu::finite_point(refs, i) || (exclude_self && i == q) ||
            !cpu::finite_point(qv, q) || cpu::sqdist_double(qv, q, refs, i) > hi) {
          if (problem.empty())
            problem = std::string(side) + " lists " + std::to_string(i) + ", not a neighbor";
        }
      }
      std::sort(sorted.begin(), sorted.end());
      if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end() && problem.empty())
        problem = std::string(side) + " lists a neighbor twice";
    };
    check(a, sa, "first");
    check(b, sb, "second");
    only.clear();
    std::set_symmetric_difference(sa.begin(), sa.end(), sb.begin(), sb.end(),
                                  std::back_inserter(only));
    for (std::int32_t i : only) {
      const double d2 = cpu::sqdist_double(qv, q, refs, i);
      if (d2 < lo && problem.empty())
        problem = "neighbor " + std::to_string(i) + " (d2 " + std::to_string(d2) +
                  ") is listed by one side only";
    }
    if (problem.empty()) {
      ++ag.agreeing_rows;
      ag.boundary_points += static_cast<std::int64_t>(only.size());
      ag.identical_rows +=
          a.count(q) == b.count(q) &&
          std::equal(a.indices.begin() + a.offsets[q], a.indices.begin() + a.offsets[q + 1],
                     b.indices.begin() + b.offsets[q]);
    } else if (ag.first_bad_row < 0) {
      ag.first_bad_row = q;
      ag.first_problem = "row " + std::to_string(q) + ": " + problem;
    }
  }
  return ag;
}

RadiusAgreement compare_hybrid(PointsView refs, const PointsView* queries, const HybridResult& a,
                               const HybridResult& b, double radius, bool exclude_self,
                               double rel_tol) {
  const PointsView& qv = queries ? *queries : refs;
  PCNN_EXPECTS(a.knn.rows == qv.count && b.knn.rows == qv.count && a.knn.k == b.knn.k,
               "compare_hybrid: results do not have the same shape as the queries");
  const int k = a.knn.k;
  const double lo = radius * radius * (1 - rel_tol);
  RadiusAgreement ag;
  ag.rows = qv.count;
  for (std::int64_t q = 0; q < qv.count; ++q) {
    // Each row as a one-row radius result, to check what it lists as compare_radius does.
    auto row = [&](const HybridResult& h) {
      RadiusResult r;
      r.rows = 1;
      const std::int32_t* idx = h.knn.indices.data() + q * k;
      r.indices.assign(idx, idx + h.counts[q]);
      r.offsets = {0, h.counts[q]};
      return r;
    };
    const RadiusResult ra = row(a), rb = row(b);
    const PointsView one = qv.slice(q, 1);
    std::string problem;
    // Validity of each side (neighbors, distinct, within r), through compare_radius on one row.
    for (const RadiusResult* r : {&ra, &rb}) {
      const RadiusAgreement self_check = compare_radius(refs, &one, *r, *r, radius, false, rel_tol);
      if (!self_check.all_agree() && problem.empty()) problem = self_check.first_problem;
      for (std::int32_t i : r->indices)
        if (exclude_self && i == q && problem.empty()) problem = "lists the query itself";
    }
    const std::int64_t m = std::min(ra.count(0), rb.count(0));
    auto d2 = [&](std::int32_t i) { return cpu::sqdist_double(qv, q, refs, i); };
    for (std::int64_t j = 0; j < m && problem.empty(); ++j) {
      const double da = d2(ra.indices[j]), db = d2(rb.indices[j]);
      if (std::abs(da - db) > rel_tol * std::max(da, db) + 1e-30)
        problem = "position " + std::to_string(j) + ": distances " + std::to_string(da) + " and " +
                  std::to_string(db);
    }
    const RadiusResult& longer = ra.count(0) > rb.count(0) ? ra : rb;
    for (std::int64_t j = m; j < longer.count(0) && problem.empty(); ++j)
      if (d2(longer.indices[j]) < lo)
        problem = "one side lists " + std::to_string(longer.count(0)) + " neighbors, the other " +
                  std::to_string(m);
    if (problem.empty()) {
      ++ag.agreeing_rows;
      ag.boundary_points += longer.count(0) - m;
      ag.identical_rows += ra.indices == rb.indices;
    } else if (ag.first_bad_row < 0) {
      ag.first_bad_row = q;
      ag.first_problem = "row " + std::to_string(q) + ": " + problem;
    }
  }
  return ag;
}

std::int64_t first_radius_difference(const RadiusResult& a, const RadiusResult& b) {
  PCNN_EXPECTS(a.rows == b.rows, "radius results of different sizes");
  for (std::int64_t q = 0; q < a.rows; ++q) {
    if (a.count(q) != b.count(q)) return q;
    for (std::int64_t i = 0; i < a.count(q); ++i) {
      const std::int64_t x = a.offsets[q] + i, y = b.offsets[q] + i;
      if (a.indices[x] != b.indices[y] || a.sqdist[x] != b.sqdist[y]) return q;
    }
  }
  return -1;
}

}  // namespace pcnn
