// What exact distances are computed from: the caller's coordinates as stored, and how far the
// float filter of the search can be from them (the proof is at the top of refine.cuh).
#pragma once

#include <cuda_runtime.h>

#include <cfloat>
#include <cmath>
#include <cstdint>

namespace pcnn::detail {

/// The coordinates as the caller stored them, in original order: where exact distances come
/// from. One of the two pointers is set; `stride` is in elements.
struct ExactCoords {
  const float* f32 = nullptr;
  const double* f64 = nullptr;
  std::int64_t stride = 3;

  __device__ __forceinline__ double3 at(std::int64_t i) const {
    if (f64) {
      const double* p = f64 + i * stride;
      return make_double3(p[0], p[1], p[2]);
    }
    const float* p = f32 + i * stride;
    return make_double3(p[0], p[1], p[2]);
  }
  /// The same coordinates from point `offset` on (a range of the points as queries).
  ExactCoords from(std::int64_t offset) const {
    ExactCoords e = *this;
    if (f64) e.f64 += offset * stride;
    if (f32) e.f32 += offset * stride;
    return e;
  }
};

/// The reference's squared distance, bit for bit: ((dx*dx + dy*dy) + dz*dz) in double, rounded
/// at every step (no fused multiply-add), as testing/knn_rows.hpp computes it.
__device__ __forceinline__ double exact_sqdist(double3 a, double3 b) {
  const double dx = __dsub_rn(a.x, b.x), dy = __dsub_rn(a.y, b.y), dz = __dsub_rn(a.z, b.z);
  return __dadd_rn(__dadd_rn(__dmul_rn(dx, dx), __dmul_rn(dy, dy)), __dmul_rn(dz, dz));
}

/// How far float filter distances can be from exact ones (see the top of refine.cuh).
///
/// The exact squared distance D is the reference's double expression: within 2^-50 of the real
/// value relative, plus, where the products underflow, at most 3·2^-1075 absolute (subnormal
/// differences and sums are exact); the term 2^-1072 covers that. The scale 2^s is applied to
/// the root with ldexp, never squared: s reaches ±1100 for coordinates near the ends of double's
/// range, where 2^(2s) would overflow or underflow. D = +inf (a product overflowed) gives an
/// infinite reach: every point is a candidate, and the double ranking orders them as the
/// reference does.
struct FilterError {
  int scale_exp = 0;        // s: filter units per caller unit are 2^s
  double perturbation = 0;  // δ: how far a filter coordinate can be from (x - o)·2^s
  /// The largest float filter distance of any point at exact squared distance <= `d2`.
  /// Without a scale or a perturbation (float coordinates searched as they are), ρ² is
  /// (d2 + 2^-1072)(1 + 2^-50)², computed as it is rather than through a square root; the
  /// 2^-40 covers its double roundings, as it covers those of the square root.
  __host__ __device__ __forceinline__ float reach(double d2) const {
    double rho2;
    if (scale_exp == 0 && perturbation == 0) {
      rho2 = (d2 + 0x1p-1072) * (1 + 0x1p-49);  // (1 + 2^-50)² less 2^-100
    } else {
      const double rho = ldexp(sqrt(d2 + 0x1p-1072) * (1 + 0x1p-50), scale_exp) +
                         3.4641016151377549 * perturbation;
      rho2 = rho * rho;
    }
    const double r2 = rho2 * (1 + 6 * 0x1p-24 + 0x1p-40) + 0x1p-126;
    if (!(r2 < double(FLT_MAX))) return INFINITY;
#ifdef __CUDA_ARCH__
    return __double2float_ru(r2);
#else
    const float f = static_cast<float>(r2);
    return double(f) >= r2 ? f : std::nextafter(f, INFINITY);
#endif
  }
  /// The smallest float filter distance of any point at exact squared distance > `d2`: below
  /// it a point is inside for certain.
  __host__ __device__ __forceinline__ float certain_inside(double d2) const {
    const double real = d2 - 0x1p-1072;
    if (!(real > 0)) return 0.f;
    const double rho =
        ldexp(sqrt(real) * (1 - 0x1p-50), scale_exp) - 3.4641016151377549 * perturbation;
    if (rho <= 0) return 0.f;
    const double r2 = rho * rho * (1 - 6 * 0x1p-24 - 0x1p-40) - 0x1p-126;
    if (r2 <= 0) return 0.f;
    if (r2 > double(FLT_MAX)) return FLT_MAX;
#ifdef __CUDA_ARCH__
    return __double2float_rd(r2);
#else
    const float f = static_cast<float>(r2);
    return double(f) <= r2 ? f : std::nextafter(f, 0.f);
#endif
  }

  /// The float search keeps its k best by float distance and offers the scan every point within
  /// widen(w) of its k-th float distance w; the refinement then needs every point within
  /// reach(D), D the largest exact distance of the k (refine.cuh). widen(w) >= reach(D) for
  /// every finite D the reference can compute for a point of float distance <= w (a D of +inf
  /// goes to the gather, see refine.cuh):
  ///   the filter length a of such a point is <= sqrt((w + 2^-126) / (1 - 6u));
  ///   2^s sqrt(D_real) <= a + 2√3δ, D <= D_real (1 + 2^-50) + 3·2^-1075, so
  ///   2^s sqrt(D + 2^-1072) (1 + 2^-50) <= (a + 2√3δ)(1 + 2^-49) + 2^(s - 535);
  ///   reach(D) <= ((a + 2√3δ)(1 + 2^-49) + 2^(s - 535) + 2√3δ)² (1 + 6u + 2^-40) + 2^-126.
  /// widen() evaluates that rounding every step upward, with widen_term() = (4√3δ +
  /// 2^(s - 535)) (1 + 2^-40) rounded up (+inf when it overflows float: no pruning then).
  ///
  /// Where that term T is at most 2^-74 (float coordinates searched as they are, δ = 0 and
  /// s = 0; also scaled float clouds and the like: the bound below holds for any s and δ whose
  /// T is that small), widen_term() returns 0 and widen() takes a bound without the square root,
  /// which is most of its cost (it runs at every insertion into a list). With a = the filter length
  /// above and (x + T)² <= (1 + η) x² + (1 + 1/η) T², η = 2^-20:
  ///   reach(D) <= (w + 2^-126) (1 + 2^-20)(1 + 2^-49)² (1 + 6u + 2^-40) / (1 - 6u)
  ///               + (1 + 2^20) T² (1 + 6u + 2^-40) + 2^-126
  ///            <= (w + 2^-126) (1 + 2^-19) + 2^-124        (1.75·2^-20 < 2^-19; T² < 2^-147).
  float widen_term() const {
    const double c =
        (4 * 1.7320508075688774 * perturbation + std::ldexp(1.0, scale_exp - 535)) * (1 + 0x1p-40);
    if (c <= 0x1p-74) return 0.f;
    if (!(c < double(FLT_MAX))) return INFINITY;
    const float f = static_cast<float>(c);
    return double(f) >= c ? f : std::nextafter(f, INFINITY);
  }
#ifdef __CUDACC__
  static __device__ __forceinline__ float widen(float w, float term) {
    if (term == 0.f) return __fmaf_ru(__fadd_ru(w, 0x1p-126f), 1.f + 0x1p-19f, 0x1p-124f);
    const float a = __fsqrt_ru(__fmul_ru(__fadd_ru(w, 0x1p-126f), 1.f + 0x1p-20f));
    const float rho = __fadd_ru(__fmul_ru(a, 1.f + 0x1p-20f), term);
    return __fadd_ru(__fmul_ru(__fmul_ru(rho, rho), 1.f + 0x1p-19f), 0x1p-125f);
  }
#endif
};

/// What the refinement of a kNN or hybrid search needs besides the index.
struct ExactSearch {
  ExactCoords refs;     // the indexed points, original order
  ExactCoords queries;  // the queries by original query index (the indexed points: self-search)
  FilterError err;
  bool filter_exact = false;  // the filter coordinates are these coordinates themselves
};

}  // namespace pcnn::detail
