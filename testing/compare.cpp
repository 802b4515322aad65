// Tie-aware comparison of two kNN results against the double-precision distances.
#include <array>
#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "knn_rows.hpp"
#include "pcnn/error.hpp"
#include "pcnn/testing/reference.hpp"

namespace pcnn {
namespace {

// Checks one result's row on its own; returns a description of the first problem, or "".
std::string check_row(const PointsView& refs, const std::array<double, 3>& qp, bool query_finite,
                      std::int64_t q, const KnnResult& r, const char* name, bool exclude_self,
                      double rel_tol, std::vector<double>& exact) {
  const std::size_t row = static_cast<std::size_t>(q) * r.k;
  exact.assign(r.k, INFINITY);
  bool padding = false;
  for (int j = 0; j < r.k; ++j) {
    const std::int32_t id = r.indices[row + j];
    std::ostringstream why;
    why << name << " neighbor " << j << " (index " << id << "): ";
    if (id == -1) {
      padding = true;
      continue;
    }
    if (padding) return why.str() + "follows padding";
    if (!query_finite) return why.str() + "the query is not finite, so it has no neighbors";
    if (id < 0 || id >= refs.count) return why.str() + "out of range";
    if (!cpu::finite_point(refs, id)) return why.str() + "not a finite point";
    if (exclude_self && id == q) return why.str() + "is the query itself";
    for (int i = 0; i < j; ++i)
      if (r.indices[row + i] == id) return why.str() + "listed twice";
    exact[j] = cpu::sqdist_double(qp, cpu::xyz(refs, id));
    const double reported = r.sqdist[row + j];
    if (std::fabs(reported - exact[j]) > rel_tol * exact[j] + 1e-30) {
      why << "reported squared distance " << reported << " but it is " << exact[j];
      return why.str();
    }
  }
  return "";
}

}  // namespace

KnnAgreement compare_knn(PointsView refs, const PointsView* queries, const KnnResult& a,
                         const KnnResult& b, bool exclude_self, double rel_tol) {
  const PointsView& qv = queries ? *queries : refs;
  PCNN_EXPECTS(a.rows == qv.count && b.rows == qv.count && a.k == b.k,
               "compare_knn: results do not have the same shape as the queries");
  KnnAgreement ag;
  ag.rows = qv.count;
  std::vector<double> ea, eb;
  for (std::int64_t q = 0; q < qv.count; ++q) {
    const std::size_t row = static_cast<std::size_t>(q) * a.k;
    bool identical = true;
    for (int j = 0; j < a.k; ++j) {
      identical = identical && a.indices[row + j] == b.indices[row + j];
      const float da = a.sqdist[row + j], db = b.sqdist[row + j];
      if (std::isfinite(da) && std::isfinite(db))
        ag.max_abs_sqdist_diff = std::max(ag.max_abs_sqdist_diff, std::fabs(double(da) - db));
    }
    const auto qp = cpu::xyz(qv, q);
    const bool qf = cpu::finite_point(qv, q);
    std::string problem = check_row(refs, qp, qf, q, a, "first", exclude_self, rel_tol, ea);
    if (problem.empty())
      problem = check_row(refs, qp, qf, q, b, "second", exclude_self, rel_tol, eb);
    for (int j = 0; j < a.k && problem.empty(); ++j) {
      const bool va = std::isfinite(ea[j]), vb = std::isfinite(eb[j]);
      if (va != vb) {
        problem = "neighbor " + std::to_string(j) + " present in only one result";
      } else if (va && std::fabs(ea[j] - eb[j]) > rel_tol * std::max(ea[j], eb[j]) + 1e-30) {
        std::ostringstream why;
        why << "neighbor " << j << ": index " << a.indices[row + j] << " at squared distance "
            << ea[j] << " vs index " << b.indices[row + j] << " at " << eb[j];
        problem = why.str();
      }
    }
    if (problem.empty()) {
      ++ag.agreeing_rows;
      if (identical) ++ag.identical_rows;
    } else if (ag.first_bad_row < 0) {
      ag.first_bad_row = q;
      ag.first_problem = "row " + std::to_string(q) + ": " + problem;
    }
  }
  return ag;
}

ExactnessReport classify_against_exact(PointsView refs, const PointsView* queries,
                                       const KnnResult& exact, const KnnResult& other,
                                       double rel_tol) {
  PCNN_EXPECTS(exact.rows == other.rows && exact.k == other.k,
               "classify_against_exact: results of different shapes");
  const PointsView& qv = queries ? *queries : refs;
  ExactnessReport rep;
  rep.rows = exact.rows;
  for (std::int64_t q = 0; q < exact.rows; ++q) {
    const std::size_t row = static_cast<std::size_t>(q) * exact.k;
    bool same = true;
    for (int j = 0; j < exact.k && same; ++j)
      same = exact.indices[row + j] == other.indices[row + j];
    if (same) {
      ++rep.identical;
      continue;
    }
    // The exact distances of both rows, position by position.
    bool equal = true, close = true;
    const auto qp = cpu::xyz(qv, q);
    for (int j = 0; j < exact.k; ++j) {
      const std::int32_t a = exact.indices[row + j], b = other.indices[row + j];
      if (a < 0 || b < 0 || b >= refs.count) {
        equal = close = a == b;
        if (!close) break;
        continue;
      }
      const double da = cpu::sqdist_double(qp, cpu::xyz(refs, a));
      const double db = cpu::sqdist_double(qp, cpu::xyz(refs, b));
      equal = equal && da == db;
      close = close && std::fabs(da - db) <= rel_tol * std::max(da, db) + 1e-30;
    }
    if (equal)
      ++rep.tie_order;
    else if (close)
      ++rep.rounding;
    else if (++rep.wrong == 1)
      rep.first_wrong = q;
  }
  return rep;
}

}  // namespace pcnn
