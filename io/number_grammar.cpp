#include "number_grammar.hpp"

#include <locale.h>
#include <stdlib.h>

#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>

namespace pcnn::io_detail {
namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }

bool iequals(std::string_view a, const char* b) {
  if (a.size() != std::strlen(b)) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if ((a[i] | 0x20) != b[i]) return false;  // b is lower case letters
  return true;
}

// The "C" locale for strtod_l/strtof_l: a program that sets another locale (a decimal comma)
// must not change what a file means.
locale_t c_locale() {
  static const locale_t loc = newlocale(LC_ALL_MASK, "C", static_cast<locale_t>(nullptr));
  return loc;
}

struct Range {
  std::int64_t lo, hi;
};

Range integer_range(Scalar t) {
  switch (t) {
    case Scalar::i8:
      return {-128, 127};
    case Scalar::u8:
      return {0, 255};
    case Scalar::i16:
      return {-32768, 32767};
    case Scalar::u16:
      return {0, 65535};
    case Scalar::i32:
      return {-2147483648LL, 2147483647LL};
    case Scalar::u32:
      return {0, 4294967295LL};
    case Scalar::i64:
      return {-kExactInteger, kExactInteger};
    default:  // u64
      return {0, kExactInteger};
  }
}

// The value of a literal that passed the float grammar, by std::from_chars (correctly rounded,
// as strtod), when that settles it: false sends the literal to the reference conversion below
// (strtod_l and strtof_l), which gives the reasons. from_chars answers "out of range" for what
// overflows or underflows to zero (strtod: inf or 0); those go to the reference.
// For float32 the gate asks that the literal round to the same float directly and through
// double. That can differ only when the double d is itself a midpoint between two adjacent
// floats (or the overflow threshold): a midpoint m is a double, so were m strictly between the
// literal x and d (or m == x), m would be nearer to x than d, the double nearest x. Any d that is
// no midpoint gives float(d) == the direct rounding; midpoints, and |d| >= FLT_MAX, go to the
// reference.
bool fast_value(std::string_view t, Scalar type, double& out) {
  const char* first = t.data() + (t[0] == '+' ? 1 : 0);
  const char* last = t.data() + t.size();
  double d = 0;
  const auto r = std::from_chars(first, last, d, std::chars_format::general);
  if (r.ec != std::errc() || r.ptr != last || !std::isfinite(d)) return false;
  if (type == Scalar::f32) {
    if (!(std::fabs(d) < double(std::numeric_limits<float>::max()))) return false;
    const float f = static_cast<float>(d);
    if (double(f) != d) {
      const float g = std::nextafter(f, d > double(f) ? INFINITY : -INFINITY);
      if (d == 0.5 * double(f) + 0.5 * double(g)) return false;
    }
  }
  out = d;
  return true;
}

}  // namespace

std::string check_number(std::string_view t, Scalar type, Dialect dialect, Number* value) {
  if (t.empty()) return "an empty value";
  if (t.size() > kMaxNumberLength)
    return "a value longer than " + std::to_string(kMaxNumberLength) + " characters";
  std::size_t i = 0;
  const bool negative = t[0] == '-';
  if (t[0] == '+' || t[0] == '-') ++i;
  const std::string_view body = t.substr(i);

  if (is_integer(type)) {
    if (body.empty()) return "not a number";
    std::string_view digits = body;
    if (dialect == Dialect::pcd) {  // "3.", "3.000": a fraction of zeros
      const std::size_t dot = body.find('.');
      if (dot != std::string_view::npos && dot > 0 &&
          body.find_first_not_of('0', dot + 1) == std::string_view::npos)
        digits = body.substr(0, dot);
    }
    for (char c : digits)
      if (!is_digit(c))
        return (c == '.' || c == 'e' || c == 'E' || c == 'x' || c == 'X')
                   ? std::string("not an integer (the field is ") + scalar_name(type) + ")"
                   : std::string("not a number");
    if (negative && !is_signed(type))
      return std::string("negative, but the field is ") + scalar_name(type);
    const Range r = integer_range(type);
    std::uint64_t v = 0;
    bool overflow = false;  // beyond 2^64 - 1: v saturates
    for (char c : digits)
      if (__builtin_mul_overflow(v, 10u, &v) ||
          __builtin_add_overflow(v, static_cast<std::uint64_t>(c - '0'), &v)) {
        v = ~std::uint64_t(0);
        overflow = true;
        break;
      }
    const bool in_range =
        negative ? v <= static_cast<std::uint64_t>(-r.lo) : v <= static_cast<std::uint64_t>(r.hi);
    if (!in_range) {
      // 64-bit values are read as PCL reads them, through a double: beyond 2^53 they would be
      // kept rounded (1732999999123456789 as ...768), so refused, though the type holds them.
      const bool wide = type == Scalar::i64 || type == Scalar::u64;
      const bool in_type =
          !overflow && (type == Scalar::u64 ||
                        (negative ? v <= (std::uint64_t(1) << 63) : v < (std::uint64_t(1) << 63)));
      if (wide && in_type)
        return std::string("beyond ") + (type == Scalar::i64 ? "±" : "") + "2^53 (" +
               std::to_string(r.hi) + "): PCL's ascii reader reads " + scalar_name(type) +
               " through a double, which would round it (a binary file keeps every 64-bit "
               "value of fields other than x, y, z)";
      return std::string("out of range for ") + scalar_name(type) + " (" +
             (wide ? (type == Scalar::i64 ? "-9223372036854775808 to 9223372036854775807"
                                          : "0 to 18446744073709551615")
                   : std::to_string(r.lo) + " to " + std::to_string(r.hi)) +
             ")";
    }
    if (value) {
      value->i = negative ? -static_cast<std::int64_t>(v) : static_cast<std::int64_t>(v);
      value->f = static_cast<double>(value->i);
    }
    return {};
  }

  if (iequals(body, "nan") || iequals(body, "inf") || iequals(body, "infinity")) {
    if (value) {
      const double v = iequals(body, "nan") ? std::numeric_limits<double>::quiet_NaN()
                                            : std::numeric_limits<double>::infinity();
      value->f = negative ? -v : v;
    }
    return {};
  }
  // [0-9]+(.[0-9]*)? | .[0-9]+, then an optional exponent.
  std::size_t j = 0, digits = 0;
  while (j < body.size() && is_digit(body[j])) ++j, ++digits;
  if (j < body.size() && body[j] == '.') {
    ++j;
    while (j < body.size() && is_digit(body[j])) ++j, ++digits;
  }
  if (digits == 0) return "not a number";
  if (j < body.size() && (body[j] == 'e' || body[j] == 'E')) {
    ++j;
    if (j < body.size() && (body[j] == '+' || body[j] == '-')) ++j;
    std::size_t exp_digits = 0;
    while (j < body.size() && is_digit(body[j])) ++j, ++exp_digits;
    if (exp_digits == 0) return "not a number (an exponent without digits)";
  }
  if (j != body.size()) return "not a number";

  double d = 0;
  if (fast_value(t, type, d)) {
    if (value) value->f = d;
    return {};
  }
  char buf[kMaxNumberLength + 1];
  std::memcpy(buf, t.data(), t.size());
  buf[t.size()] = '\0';
  d = strtod_l(buf, nullptr, c_locale());
  if (std::isinf(d)) return std::string("too large for ") + scalar_name(type);
  if (type == Scalar::f32) {
    const float through_double = static_cast<float>(d);
    const float direct = strtof_l(buf, nullptr, c_locale());
    if (std::isinf(direct) || std::isinf(through_double)) return "too large for float32";
    if (dialect == Dialect::ply) {
      d = direct;  // exact in the double; stored_value rounds it to itself
    } else if (std::memcmp(&direct, &through_double, sizeof(float)) != 0) {
      return "a float32 that rounds to different values directly and through double (PCL's "
             ".pcd reader does either)";
    }
  }
  if (value) value->f = d;
  return {};
}

bool parse_count(std::string_view t, std::uint64_t max, std::uint64_t* value) {
  if (t.empty() || t.size() > 19) return false;
  std::uint64_t v = 0;
  for (char c : t) {
    if (!is_digit(c)) return false;
    v = v * 10 + static_cast<std::uint64_t>(c - '0');
  }
  if (v > max) return false;
  *value = v;
  return true;
}

}  // namespace pcnn::io_detail
