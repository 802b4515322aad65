// pcnn — re-centering double-precision coordinates before converting them to float.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

namespace pcnn {

/// Center of the bounding box of the finite points among `n` packed xyz triples, or (0, 0, 0)
/// when none is finite.
std::array<double, 3> bounding_box_center(const double* xyz, std::int64_t n);

/// An origin from which every finite point's offset is exactly a float, axis by axis, so that the
/// float coordinates plus the origin are the stored coordinates (searches are then exact for the
/// stored coordinates): the bounding-box center rounded to float, or rounded to an integer, or 0,
/// the first that is exact on the axis. Sets `exact` false when no candidate is exact on some
/// axis (the box center is used there, and offsets are rounded to float).
/// The float overloads here and below compute in double, as for the same points converted to
/// double: the results are identical.
std::array<double, 3> exact_origin(const double* xyz, std::int64_t n, bool& exact);
std::array<double, 3> exact_origin(const float* xyz, std::int64_t n, bool& exact);

/// Whether float(xyz - origin) == xyz - origin for every finite point.
bool recenters_exactly(const double* xyz, std::int64_t n, const std::array<double, 3>& origin);
bool recenters_exactly(const float* xyz, std::int64_t n, const std::array<double, 3>& origin);

/// float(xyz - origin) for each of `n` packed xyz triples; points with a non-finite coordinate
/// become NaN in all three. Georeferenced coordinates (1e5..1e7 m) keep millimeter resolution
/// because the subtraction happens in double.
/// @throws pcnn::error when a finite point lies more than 1e18 from the origin (squared
///         distances in float would overflow), naming the point;
///         pcnn::invalid_argument_error for an origin that is not finite.
std::vector<float> recenter(const double* xyz, std::int64_t n, const std::array<double, 3>& origin);

/// As recenter, in place: each of `n` float triples becomes float(xyz - origin) (NaN in all three
/// where one is not finite). @throws pcnn::error as recenter (the points are then partly
/// re-centered). Both work on several threads for large clouds.
void recenter_in_place(float* xyz, std::int64_t n, const std::array<double, 3>& origin);

}  // namespace pcnn
