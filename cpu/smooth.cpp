// Stencils, smoothing parameters, and the CPU references of both smoothings.
#include <algorithm>
#include <cmath>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "core/number_text.hpp"
#include "core/whole_number.hpp"
#include "pcnn/error.hpp"
#include "pcnn/smooth.hpp"

namespace pcnn {
namespace {

std::vector<float> parse_numbers(const std::string& text, const std::string& spec) {
  std::vector<float> out;
  // getline drops an empty last item: "1,2,1," was read as three numbers.
  PCNN_EXPECTS(text.empty() || text.back() != ',',
               "stencil '" + spec + "': a number is missing after the last ','");
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');) {
    const std::optional<float> v = detail::whole_float(item);
    PCNN_EXPECTS(v.has_value(), "stencil '" + spec + "': '" + item + "' is not a number");
    out.push_back(*v);
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
               "gaussian stencil: sigma must be > 0, got " + detail::number_text(sigma));
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

Stencil normalized(Stencil s) {
  float largest = 0;
  for (const float w : s.weights) largest = std::max(largest, std::fabs(w));
  if (!(largest > 0) || !std::isfinite(largest)) return s;  // validate() refuses such stencils
  int e = 0;
  std::frexp(largest, &e);  // largest = m * 2^e, m in [0.5, 1)
  for (float& w : s.weights) w = std::ldexp(w, -e);
  return s;
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
               "smoothing: lambda must be in (0, 1], got " + detail::number_text(p.lambda));
  PCNN_EXPECTS(std::isfinite(p.mu) && (p.mu == 0 || (p.mu < -p.lambda && p.mu >= -1)),
               "smoothing: Taubin needs -1 <= mu < -lambda (or mu = 0 for Laplacian), got mu = " +
                   detail::number_text(p.mu));
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

}  // namespace pcnn
