// Stencils, smoothing parameters, and the CPU references of both smoothings.
#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "knn_rows.hpp"
#include "pcnn/error.hpp"
#include "pcnn/smooth.hpp"

namespace pcnn {
namespace {

std::vector<float> parse_numbers(const std::string& text, const std::string& spec) {
  std::vector<float> out;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');) {
    std::size_t used = 0;
    float v = 0;
    try {
      v = std::stof(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    PCNN_EXPECTS(used == item.size() && !item.empty(),
                 "stencil '" + spec + "': '" + item + "' is not a number");
    out.push_back(v);
  }
  return out;
}

int int_of(const std::string& text, const std::string& spec) {
  std::size_t used = 0;
  int v = -1;
  try {
    v = std::stoi(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  PCNN_EXPECTS(used == text.size() && !text.empty(),
               "stencil '" + spec + "': '" + text + "' is not an integer radius");
  return v;
}

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

Stencil box_stencil(int radius) {
  Stencil s;
  s.radius = radius;
  s.separable = true;
  s.weights.assign(2 * std::max(radius, 0) + 1, 1.f);
  validate(s);
  return s;
}

Stencil gaussian_stencil(int radius, double sigma) {
  PCNN_EXPECTS(std::isfinite(sigma) && sigma > 0,
               "gaussian stencil: sigma must be > 0, got " + std::to_string(sigma));
  Stencil s;
  s.radius = radius;
  s.separable = true;
  for (int d = -radius; d <= radius; ++d)
    s.weights.push_back(static_cast<float>(std::exp(-0.5 * d * d / (sigma * sigma))));
  validate(s);
  return s;
}

Stencil stencil_from_taps(const std::vector<float>& taps) {
  PCNN_EXPECTS(!taps.empty(), "stencil: no coefficients");
  PCNN_EXPECTS(taps.size() % 2 == 1, "stencil: a list of taps needs an odd count (2R + 1), got " +
                                         std::to_string(taps.size()));
  Stencil s;
  s.radius = static_cast<int>(taps.size() / 2);
  s.separable = true;
  s.weights = taps;
  validate(s);
  return s;
}

Stencil stencil_from_grid(const std::vector<float>& grid) {
  PCNN_EXPECTS(!grid.empty(), "stencil: no coefficients");
  const int side = static_cast<int>(std::lround(std::sqrt(double(grid.size()))));
  PCNN_EXPECTS(std::size_t(side) * side == grid.size() && side % 2 == 1,
               "stencil: a grid needs (2R + 1)^2 coefficients, got " + std::to_string(grid.size()));
  Stencil s;
  s.radius = side / 2;
  s.separable = false;
  s.weights = grid;
  validate(s);
  return s;
}

Stencil parse_stencil(const std::string& spec) {
  const std::size_t colon = spec.find(':');
  const std::string kind = spec.substr(0, colon),
                    rest = colon == std::string::npos ? std::string() : spec.substr(colon + 1);
  if (kind == "box") return box_stencil(int_of(rest, spec));
  if (kind == "gaussian") {
    const std::size_t c2 = rest.find(':');
    PCNN_EXPECTS(c2 != std::string::npos, "stencil '" + spec + "': use gaussian:R:SIGMA");
    const std::vector<float> sigma = parse_numbers(rest.substr(c2 + 1), spec);
    PCNN_EXPECTS(sigma.size() == 1, "stencil '" + spec + "': use gaussian:R:SIGMA");
    return gaussian_stencil(int_of(rest.substr(0, c2), spec), sigma[0]);
  }
  if (kind == "list") return stencil_from_taps(parse_numbers(rest, spec));
  if (kind == "grid") return stencil_from_grid(parse_numbers(rest, spec));
  throw error("unknown stencil '" + spec +
              "' (box:R, gaussian:R:SIGMA, list:c0,c1,... or grid:c0,c1,...)");
}

void validate(const Stencil& s) {
  PCNN_EXPECTS(s.radius >= 0 && s.radius <= kMaxStencilRadius,
               "stencil radius must be 0.." + std::to_string(kMaxStencilRadius) + ", got " +
                   std::to_string(s.radius) + " (" + std::to_string(2 * s.radius + 1) + " taps)");
  const std::size_t side = 2 * s.radius + 1;
  PCNN_EXPECTS(!s.weights.empty(), "stencil: no coefficients");
  PCNN_EXPECTS(s.weights.size() == (s.separable ? side : side * side),
               "stencil: " + std::to_string(s.weights.size()) + " coefficients for radius " +
                   std::to_string(s.radius) + " (want " +
                   std::to_string(s.separable ? side : side * side) + ")");
  double sum = 0;
  for (float w : s.weights) {
    PCNN_EXPECTS(std::isfinite(w), "stencil: a coefficient is not finite");
    sum += w;
  }
  PCNN_EXPECTS(sum > 0,
               "stencil: the coefficients must have a positive sum, got " + std::to_string(sum));
  const float center = s.separable ? s.weights[s.radius] : s.weights[side * side / 2];
  PCNN_EXPECTS(center > 0, "stencil: the center coefficient must be positive");
}

void validate(const OrganizedSmoothParams& p) {
  validate(p.stencil);
  PCNN_EXPECTS(std::isfinite(p.depth_jump) && p.depth_jump >= 0,
               "depth jump must be >= 0 (0: off)");
  PCNN_EXPECTS(std::isfinite(p.max_move) && p.max_move >= 0, "max move must be >= 0 (0: off)");
  for (float c : p.sensor) PCNN_EXPECTS(std::isfinite(c), "sensor position must be finite");
}

void validate(const UnorganizedSmoothParams& p) {
  PCNN_EXPECTS(p.k >= 1 && p.k <= kMaxK, "smoothing: k must be between 1 and " +
                                             std::to_string(kMaxK) + ", got " +
                                             std::to_string(p.k));
  PCNN_EXPECTS(std::isfinite(p.lambda) && p.lambda > 0 && p.lambda <= 1,
               "smoothing: lambda must be in (0, 1], got " + std::to_string(p.lambda));
  PCNN_EXPECTS(std::isfinite(p.mu) && (p.mu == 0 || (p.mu < -p.lambda && p.mu >= -1)),
               "smoothing: Taubin needs -1 <= mu < -lambda (or mu = 0 for Laplacian), got mu = " +
                   std::to_string(p.mu));
  PCNN_EXPECTS(p.iterations >= 0 && p.iterations <= 10000,
               "smoothing: iterations must be 0..10000");
  PCNN_EXPECTS(p.rank_weights.empty() || static_cast<int>(p.rank_weights.size()) == p.k,
               "smoothing: rank weights need k = " + std::to_string(p.k) + " entries, got " +
                   std::to_string(p.rank_weights.size()));
  for (float w : p.rank_weights)
    PCNN_EXPECTS(std::isfinite(w) && w >= 0, "smoothing: rank weights must be finite and >= 0");
  PCNN_EXPECTS(std::isfinite(p.max_move) && p.max_move >= 0, "max move must be >= 0 (0: off)");
}

std::array<float, kDistanceTable> distance_weight_table() {
  std::array<float, kDistanceTable> t{};
  for (int i = 0; i < kDistanceTable; ++i) {
    const double x = i / 16.0;
    t[i] = static_cast<float>(std::exp(-0.5 * x * x));
  }
  return t;
}

std::vector<float> reference_smooth_organized(PointsView pts, int width, int height,
                                              const OrganizedSmoothParams& params) {
  validate(params);
  PCNN_EXPECTS(width > 0 && height > 0 && std::int64_t(width) * height == pts.count,
               "organized smoothing: width x height must equal the point count");
  const int R = params.stencil.radius, side = 2 * R + 1;
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
          const volatile float w =
              params.stencil.separable
                  ? params.stencil.weights[dy + R] * params.stencil.weights[dx + R]
                  : params.stencil.weights[(dy + R) * side + dx + R];
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
