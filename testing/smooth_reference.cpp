// CPU references of the smoothing (single-threaded loops, the same formulas and summation order
// as the device), for the tests.
#include <algorithm>
#include <cmath>
#include <vector>

#include "knn_rows.hpp"
#include "pcnn/error.hpp"
#include "pcnn/testing/smooth_reference.hpp"

namespace pcnn {
namespace {

// The value a stencil smooths, with the same float operations as the device (no contraction:
// the products are rounded before the sums on both sides).
float value_of(const float* p, const OrganizedSmoothParams& params) {
  if (params.value == SmoothValue::z) return p[2];
  const float dx = p[0] - params.sensor[0], dy = p[1] - params.sensor[1],
              dz = p[2] - params.sensor[2];
  const volatile float xx = dx * dx, yy = dy * dy, zz = dz * dz;
  return std::sqrt(xx + yy + zz);
}

}  // namespace

std::vector<float> reference_smooth_organized(PointsView pts, int width, int height,
                                              const OrganizedSmoothParams& params) {
  validate(params);
  PCNN_EXPECTS(width > 0 && height > 0 && std::int64_t(width) * height == pts.count,
               "organized smoothing: width x height must equal the point count");
  const Stencil st = normalized(params.stencil);
  const int R = st.radius, side = 2 * R + 1;
  std::vector<float> value(pts.count);
  for (std::int64_t i = 0; i < pts.count; ++i)
    value[i] = cpu::finite_point(pts, i) ? value_of(cpu::point(pts, i), params) : NAN;
  std::vector<float> out(pts.count * 3);
  for (int y = 0; y < height; ++y)
    for (int x = 0; x < width; ++x) {
      const std::int64_t i = std::int64_t(y) * width + x;
      const float* p = cpu::point(pts, i);
      float* o = &out[i * 3];
      std::copy(p, p + 3, o);
      const float v0 = value[i];
      if (!std::isfinite(v0)) {
        o[0] = o[1] = o[2] = NAN;
        continue;
      }
      float sum = 0, wsum = 0;
      for (int dy = -R; dy <= R; ++dy)
        for (int dx = -R; dx <= R; ++dx) {
          const int yy = y + dy, xx = x + dx;
          if (yy < 0 || yy >= height || xx < 0 || xx >= width) continue;
          const float v = value[std::int64_t(yy) * width + xx];
          if (!std::isfinite(v)) continue;
          if (params.depth_jump > 0 && std::fabs(v - v0) > params.depth_jump) continue;
          const volatile float w = st.separable ? st.weights[dy + R] * st.weights[dx + R]
                                                : st.weights[(dy + R) * side + dx + R];
          const volatile float wv = w * v;
          sum += wv;
          wsum += w;
        }
      float v1 = wsum > 0 ? sum / wsum : v0;
      if (params.max_move > 0) v1 = std::clamp(v1, v0 - params.max_move, v0 + params.max_move);
      if (params.value == SmoothValue::z) {
        o[2] = v1;
      } else if (v0 > 0) {
        const float s = v1 / v0;
        for (int a = 0; a < 3; ++a) {
          const volatile float d = (p[a] - params.sensor[a]) * s;
          o[a] = params.sensor[a] + d;
        }
      }
    }
  return out;
}

std::vector<float> reference_smooth_unorganized(PointsView pts, const KnnResult& nb,
                                                const UnorganizedSmoothParams& params) {
  validate(params);
  const int k = params.k;
  PCNN_EXPECTS(nb.rows == pts.count && nb.k == k,
               "unorganized smoothing: neighbor lists do not match the points and k");
  const std::int64_t n = pts.count;
  // Edge weights, from the initial neighbors.
  std::vector<float> w(n * k, 0.f);
  const auto table = distance_weight_table();
  for (std::int64_t i = 0; i < n; ++i) {
    float h = 0;
    int valid = 0;
    for (int j = 0; j < k; ++j)
      if (nb.indices[i * k + j] >= 0) {
        h += std::sqrt(nb.sqdist[i * k + j]);
        ++valid;
      }
    if (valid > 0) h /= float(valid);
    for (int j = 0; j < k; ++j) {
      if (nb.indices[i * k + j] < 0) continue;
      if (params.weights == UnorganizedSmoothParams::Weights::rank) {
        w[i * k + j] = params.rank_weights.empty() ? 1.f : params.rank_weights[j];
      } else {
        const float x = h > 0 ? std::sqrt(nb.sqdist[i * k + j]) / h : 0.f;
        w[i * k + j] = table[std::min(static_cast<int>(x * 16.f), kDistanceTable - 1)];
      }
    }
  }
  std::vector<float> start(n * 3), cur(n * 3), next(n * 3);
  for (std::int64_t i = 0; i < n; ++i) std::copy_n(cpu::point(pts, i), 3, &start[i * 3]);
  cur = start;
  std::vector<float> steps;
  for (int it = 0; it < params.iterations; ++it) {
    steps.push_back(params.lambda);
    if (params.mu != 0) steps.push_back(params.mu);
  }
  for (float f : steps) {
    for (std::int64_t i = 0; i < n; ++i) {
      const float* p = &cur[i * 3];
      float* q = &next[i * 3];
      std::copy_n(p, 3, q);
      if (!cpu::finite_point({cur.data(), n, 3}, i)) continue;
      float s[3] = {0, 0, 0}, ws = 0;
      for (int j = 0; j < k; ++j) {
        const std::int32_t nbr = nb.indices[i * k + j];
        if (nbr < 0) continue;
        const float wj = w[i * k + j];
        for (int a = 0; a < 3; ++a) {
          const volatile float t = wj * cur[nbr * 3 + a];
          s[a] += t;
        }
        ws += wj;
      }
      if (ws <= 0) continue;
      for (int a = 0; a < 3; ++a) {
        const volatile float step = f * (s[a] / ws - p[a]);
        q[a] = p[a] + step;
      }
      if (params.max_move > 0) {
        const float* o = &start[i * 3];
        const float d[3] = {q[0] - o[0], q[1] - o[1], q[2] - o[2]};
        const volatile float xx = d[0] * d[0], yy = d[1] * d[1], zz = d[2] * d[2];
        const float len = std::sqrt(xx + yy + zz);
        if (len > params.max_move)
          for (int a = 0; a < 3; ++a) {
            const volatile float t = d[a] * (params.max_move / len);
            q[a] = o[a] + t;
          }
      }
    }
    std::swap(cur, next);
  }
  return cur;
}

}  // namespace pcnn
