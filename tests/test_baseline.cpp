// The CPU baseline (PCL's k-d tree) against the exact double-precision reference.
#include <gtest/gtest.h>

#include <ostream>

#include "pcnn/testing/baseline.hpp"
#include "pcnn/testing/reference.hpp"
#include "pcnn/testing/synthetic.hpp"
#include "test_clouds.hpp"

namespace pcnn {
namespace {

struct BaselineCase {
  SyntheticKind kind;
  int n, queries, k;
  bool exclude_self;
  double bad_fraction;
};
std::ostream& operator<<(std::ostream& os, const BaselineCase& c) {
  return os << to_string(c.kind) << " n=" << c.n << " queries=" << c.queries << " k=" << c.k
            << (c.exclude_self ? " exclude-self" : "") << " bad=" << c.bad_fraction;
}

class Baseline : public ::testing::TestWithParam<BaselineCase> {};

TEST_P(Baseline, AgreesWithTheReference) {
  const BaselineCase c = GetParam();
  std::vector<float> refs = make_synthetic_cloud(c.kind, c.n, 100 + c.k);
  std::vector<float> qs = make_synthetic_cloud(SyntheticKind::uniform, c.queries, 200 + c.k);
  test::poison(refs, c.bad_fraction, 3);
  test::poison(qs, c.bad_fraction, 4);
  const PointsView rv{refs.data(), c.n, 3}, qv{qs.data(), c.queries, 3};
  const PointsView* qp = c.queries ? &qv : nullptr;
  CpuKnnTimings t;
  const KnnResult got = pcl_knn(rv, qp, {c.k, c.exclude_self}, &t);
  const KnnResult ref = reference_knn(rv, qp, {c.k, c.exclude_self});
  const KnnAgreement ag = compare_knn(rv, qp, got, ref, c.exclude_self);
  EXPECT_TRUE(ag.all_agree()) << ag.first_problem;
  EXPECT_GE(t.threads, 1);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, Baseline,
    ::testing::Values(BaselineCase{SyntheticKind::uniform, 3000, 0, 8, false, 0},
                      BaselineCase{SyntheticKind::clustered, 3000, 0, 16, true, 0},
                      BaselineCase{SyntheticKind::lidar, 4000, 0, 1, true, 0},
                      BaselineCase{SyntheticKind::uniform, 2000, 500, 33, false, 0.1},
                      BaselineCase{SyntheticKind::uniform, 5, 0, 8, true, 0},
                      BaselineCase{SyntheticKind::uniform, 0, 10, 4, false, 0}));

TEST(BaselineTies, DuplicatesWithExcludeSelf) {
  const std::vector<float> xyz = test::duplicates(100, 12, 9);
  const PointsView v{xyz.data(), 1200, 3};
  const KnnResult got = pcl_knn(v, nullptr, {8, true});
  const KnnResult ref = reference_knn(v, nullptr, {8, true});
  EXPECT_TRUE(compare_knn(v, nullptr, got, ref, true).all_agree());
}

}  // namespace
}  // namespace pcnn
