// Synthetic clouds: uniform, clustered, a LiDAR-like scan of a simple scene, and degenerate ones.
#include <algorithm>
#include <array>
#include <cmath>
#include <random>
#include <string>
#include <utility>

#include "pcnn/error.hpp"
#include "pcnn/testing/synthetic.hpp"

namespace pcnn {
namespace {

constexpr double kPi = 3.14159265358979323846;
constexpr double kHalfExtent = 50.0;  // the uniform and clustered clouds fill [-50, 50]^3 m

void uniform(std::int64_t n, std::mt19937_64& rng, std::vector<float>& out) {
  std::uniform_real_distribution<double> u(-kHalfExtent, kHalfExtent);
  for (std::int64_t i = 0; i < n; ++i)
    for (int a = 0; a < 3; ++a) out.push_back(static_cast<float>(u(rng)));
}

void clustered(std::int64_t n, std::mt19937_64& rng, std::vector<float>& out) {
  constexpr int kBlobs = 32;
  std::uniform_real_distribution<double> center(-0.8 * kHalfExtent, 0.8 * kHalfExtent);
  std::uniform_real_distribution<double> sigma(0.3, 4.0), weight(0.2, 1.0);
  std::array<std::array<double, 4>, kBlobs> blobs;
  std::vector<double> weights;
  for (auto& b : blobs) {
    b = {center(rng), center(rng), center(rng), sigma(rng)};
    weights.push_back(weight(rng));
  }
  std::discrete_distribution<int> pick(weights.begin(), weights.end());
  std::normal_distribution<double> g(0.0, 1.0);
  for (std::int64_t i = 0; i < n; ++i) {
    const auto& b = blobs[pick(rng)];
    for (int a = 0; a < 3; ++a) out.push_back(static_cast<float>(b[a] + b[3] * g(rng)));
  }
}

// Uniform, with n / 320 of the points packed in a ball of 0.5 m radius at the origin.
void hotspot(std::int64_t n, std::mt19937_64& rng, std::vector<float>& out) {
  const std::int64_t dense = n / 320;
  uniform(n - dense, rng, out);
  std::normal_distribution<double> g(0.0, 1.0);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (std::int64_t i = 0; i < dense; ++i) {
    double d[3] = {g(rng), g(rng), g(rng)};
    const double len = std::sqrt(d[0] * d[0] + d[1] * d[1] + d[2] * d[2]);
    const double r = 0.5 * std::cbrt(u(rng)) / (len > 0 ? len : 1);
    for (double v : d) out.push_back(static_cast<float>(v * r));
  }
}

// The LiDAR scene: a ground plane, axis-aligned boxes (buildings, walls, cars) and poles.
struct Box {
  double lo[3], hi[3];
};
struct Pole {
  double x, y, r, h;
};
const Box kBoxes[] = {
    {{10, -20, 0}, {30, -12, 8}}, {{-25, 5, 0}, {-15, 25, 12}}, {{-8, -6, 0}, {-4, -4, 1.5}},
    {{5, 3, 0}, {9.5, 4.8, 1.6}}, {{40, -5, 0}, {42, 30, 4}},   {{-60, -40, 0}, {-20, -38, 6}},
    {{15, 12, 0}, {17, 14, 2.5}},
};
const Pole kPoles[] = {{3, -3, 0.15, 6},   {-3, 8, 0.15, 6},  {12, 6, 0.2, 7},
                       {-12, -9, 0.15, 5}, {22, 20, 0.25, 8}, {-30, 0, 0.2, 6}};
constexpr double kSensorHeight = 1.8, kMaxRange = 120.0;

// Distance along the unit ray (o, d) to the first surface, or +inf.
double cast(const double o[3], const double d[3]) {
  double best = INFINITY;
  if (d[2] < 0) best = -o[2] / d[2];  // ground z = 0
  for (const Box& b : kBoxes) {
    double t0 = 0, t1 = INFINITY;
    for (int a = 0; a < 3; ++a) {
      if (std::fabs(d[a]) < 1e-12) {
        if (o[a] < b.lo[a] || o[a] > b.hi[a]) t0 = INFINITY;
        continue;
      }
      double ta = (b.lo[a] - o[a]) / d[a], tb = (b.hi[a] - o[a]) / d[a];
      if (ta > tb) std::swap(ta, tb);
      t0 = std::max(t0, ta);
      t1 = std::min(t1, tb);
    }
    if (t0 <= t1 && t0 > 0) best = std::min(best, t0);
  }
  for (const Pole& p : kPoles) {
    const double ox = o[0] - p.x, oy = o[1] - p.y;
    const double A = d[0] * d[0] + d[1] * d[1], B = 2 * (ox * d[0] + oy * d[1]),
                 C = ox * ox + oy * oy - p.r * p.r;
    const double disc = B * B - 4 * A * C;
    if (A < 1e-12 || disc < 0) continue;
    const double t = (-B - std::sqrt(disc)) / (2 * A);
    const double z = o[2] + t * d[2];
    if (t > 0 && z >= 0 && z <= p.h) best = std::min(best, t);
  }
  return best <= kMaxRange ? best : INFINITY;
}

// `zeros`: a ray that misses is stored at the origin, as organized scans store their no-returns,
// instead of being left out.
void lidar(std::int64_t n, std::mt19937_64& rng, std::vector<float>& out, bool zeros) {
  constexpr int kBeams = 64;
  constexpr double kElevLo = -25.0 * kPi / 180, kElevHi = 3.0 * kPi / 180;
  // About a third of the rays of a full sweep miss everything (sky); size the sweep so that
  // one or two revolutions give n points.
  const int steps = static_cast<int>(std::max<std::int64_t>(64, n / kBeams * 3 / 2 + 1));
  std::normal_distribution<double> noise(0.0, 0.01);
  std::uniform_real_distribution<double> jitter(0.0, 1.0);
  const double o[3] = {0, 0, kSensorHeight};
  std::int64_t made = 0;
  for (int rev = 0; made < n; ++rev) {
    const double phase = jitter(rng);  // later revolutions fall between earlier rays
    for (int s = 0; s < steps && made < n; ++s) {
      const double az = 2 * kPi * (s + phase) / steps;
      for (int b = 0; b < kBeams && made < n; ++b) {
        const double el = kElevLo + (kElevHi - kElevLo) * b / (kBeams - 1);
        const double d[3] = {std::cos(el) * std::cos(az), std::cos(el) * std::sin(az),
                             std::sin(el)};
        const double t = cast(o, d);
        if (!std::isfinite(t)) {  // a miss
          if (zeros) {
            out.insert(out.end(), {0.f, 0.f, 0.f});
            ++made;
          }
          continue;
        }
        const double r = t + noise(rng);
        for (int a = 0; a < 3; ++a) out.push_back(static_cast<float>(o[a] + r * d[a]));
        ++made;
      }
    }
    PCNN_EXPECTS(rev < 1000, "lidar generator: the scene returns too few points");
  }
}

// n / 50 uniform points, each stored 50 times; the copies of a point lie n / 50 apart in the
// cloud's order.
void repeated(std::int64_t n, std::mt19937_64& rng, std::vector<float>& out) {
  const std::int64_t distinct = std::max<std::int64_t>(1, n / 50);
  uniform(std::min(n, distinct), rng, out);
  for (std::int64_t i = distinct; i < n; ++i)
    for (int a = 0; a < 3; ++a)
      out.push_back(out[static_cast<std::size_t>((i % distinct) * 3 + a)]);
}

// Uniform on a segment through the cube (`dims` 1) or on a tilted plane through it (`dims` 2).
void flat(std::int64_t n, int dims, std::mt19937_64& rng, std::vector<float>& out) {
  std::uniform_real_distribution<double> u(-kHalfExtent, kHalfExtent);
  for (std::int64_t i = 0; i < n; ++i) {
    const double s = u(rng), t = dims == 2 ? u(rng) : 0.0;
    out.insert(out.end(), {static_cast<float>(0.8 * s), static_cast<float>(0.6 * s + 0.5 * t),
                           static_cast<float>(0.3 * s - 0.7 * t)});
  }
}

constexpr std::array<std::pair<SyntheticKind, const char*>, 9> kKinds = {{
    {SyntheticKind::uniform, "uniform"},
    {SyntheticKind::clustered, "clustered"},
    {SyntheticKind::lidar, "lidar"},
    {SyntheticKind::hotspot, "hotspot"},
    {SyntheticKind::noreturns, "noreturns"},
    {SyntheticKind::repeated, "repeated"},
    {SyntheticKind::identical, "identical"},
    {SyntheticKind::line, "line"},
    {SyntheticKind::plane, "plane"},
}};

}  // namespace

std::string synthetic_kind_names() {
  std::string names;
  for (const auto& k : kKinds) names += (names.empty() ? "" : ", ") + std::string(k.second);
  return names;
}

std::vector<float> make_depth_scene(int width, int height, double noise, double holes,
                                    std::uint64_t seed, std::vector<float>* truth) {
  PCNN_EXPECTS(width > 0 && height > 0, "depth scene: width and height must be positive");
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> g(0.0, 1.0);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  const double f = 0.8 * width, cx = 0.5 * (width - 1), cy = 0.5 * (height - 1);
  const std::size_t n = std::size_t(width) * height;
  std::vector<char> hole(n, 0);
  // Blobs of about 9 pixels until the fraction is reached.
  for (std::size_t made = 0; made < holes * double(n);) {
    const int x0 = int(u(rng) * width), y0 = int(u(rng) * height);
    for (int dy = -1; dy <= 1; ++dy)
      for (int dx = -1; dx <= 1; ++dx) {
        const int x = x0 + dx, y = y0 + dy;
        if (x < 0 || x >= width || y < 0 || y >= height || hole[std::size_t(y) * width + x])
          continue;
        hole[std::size_t(y) * width + x] = 1;
        ++made;
      }
  }
  std::vector<float> out(n * 3), clean(n * 3);
  for (int y = 0; y < height; ++y)
    for (int x = 0; x < width; ++x) {
      const std::size_t i = std::size_t(y) * width + x;
      const double rx = (x - cx) / f, ry = (y - cy) / f;
      const bool box = x >= width / 3 && x < 2 * width / 3 && y >= height / 3 && y < 2 * height / 3;
      const double z = box ? 2.0 : 4.0 + 0.5 * rx + 0.25 * ry;  // the wall is tilted
      const double zn = z + noise * g(rng);
      for (int a = 0; a < 3; ++a) {
        const double r = a == 0 ? rx : a == 1 ? ry : 1.0;
        clean[i * 3 + a] = hole[i] ? NAN : static_cast<float>(r * z);
        out[i * 3 + a] = hole[i] ? NAN : static_cast<float>(r * zn);
      }
    }
  if (truth) *truth = std::move(clean);
  return out;
}

SyntheticKind parse_synthetic_kind(const std::string& name) {
  for (const auto& k : kKinds)
    if (name == k.second) return k.first;
  throw error("unknown synthetic cloud kind '" + name + "' (" + synthetic_kind_names() + ")");
}

const char* to_string(SyntheticKind kind) {
  for (const auto& k : kKinds)
    if (kind == k.first) return k.second;
  return "?";
}

std::vector<float> make_synthetic_cloud(SyntheticKind kind, std::int64_t n, std::uint64_t seed) {
  PCNN_EXPECTS(n >= 0, "synthetic cloud: negative point count");
  std::mt19937_64 rng(seed);
  std::vector<float> out;
  out.reserve(static_cast<std::size_t>(n) * 3);
  switch (kind) {
    case SyntheticKind::uniform:
      uniform(n, rng, out);
      break;
    case SyntheticKind::clustered:
      clustered(n, rng, out);
      break;
    case SyntheticKind::lidar:
    case SyntheticKind::noreturns:
      lidar(n, rng, out, kind == SyntheticKind::noreturns);
      break;
    case SyntheticKind::hotspot:
      hotspot(n, rng, out);
      break;
    case SyntheticKind::repeated:
      repeated(n, rng, out);
      break;
    case SyntheticKind::identical:
      for (std::int64_t i = 0; i < n; ++i) out.insert(out.end(), {1.5f, -2.25f, 0.75f});
      break;
    case SyntheticKind::line:
    case SyntheticKind::plane:
      flat(n, kind == SyntheticKind::line ? 1 : 2, rng, out);
      break;
  }
  return out;
}

}  // namespace pcnn
