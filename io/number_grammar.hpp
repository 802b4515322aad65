// The one number grammar of ascii .pcd and .ply data: what pcnn accepts is read as the same
// value by PCL's ascii readers (which otherwise take hex floats, "1e3" for an integer, or 300 for
// a uint8 and store something else without a word).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "header_check.hpp"

namespace pcnn::io_detail {

/// The value of a checked literal.
struct Number {
  double f = 0;        ///< as a double (integers too)
  std::int64_t i = 0;  ///< integers: the exact value
};

/// The longest literal accepted, in characters.
constexpr std::size_t kMaxNumberLength = 64;

/// Whose ascii reader reads the literal: PCL's .pcd reader (an istringstream for a file's first
/// values, atof after: integers through a double, floats rounded once or twice) or its .ply
/// reader (boost::lexical_cast: integers exactly, floats rounded once).
enum class Dialect { pcd, ply };

/// Checks one ascii literal against the type of its field, as `dialect`'s reader reads it.
/// Returns why it is not accepted, or an empty string when it is (then `value`, when given,
/// receives the value that reader stores). The grammar:
///   integers: [+-]?[0-9]+ ('-' only for signed types), within the type's range; 64-bit types
///             within ±2^53 (PCL's ascii .pcd reader converts them through a double); in .pcd
///             also with a fraction of zeros ("3.000000", numpy.savetxt's %f: both of PCL's
///             paths read 3);
///   floats:   [+-]?([0-9]+(.[0-9]*)?|.[0-9]+)([eE][+-]?[0-9]+)? or [+-]?nan, [+-]?inf,
///             [+-]?infinity (any case); finite literals must stay finite in the type; a float32
///             in .pcd must round to the same value directly and through double (PCL does one or
///             the other), in .ply it is rounded directly.
/// No hex, no spaces, at most kMaxNumberLength characters.
std::string check_number(std::string_view token, Scalar type, Dialect dialect,
                         Number* value = nullptr);

/// A count in a header: [0-9]+ and at most `max`. False otherwise.
bool parse_count(std::string_view token, std::uint64_t max, std::uint64_t* value);

}  // namespace pcnn::io_detail
