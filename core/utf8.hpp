// Well-formed UTF-8: what JSON documents and Python strings hold, in names read from files.
#pragma once

#include <cstddef>
#include <string_view>

namespace pcnn::detail {

/// The length of the well-formed UTF-8 sequence at s[i] (RFC 3629: no overlong forms, no
/// surrogates, nothing above U+10FFFF) that is more than one byte, or 0 where there is none.
inline std::size_t utf8_length(std::string_view s, std::size_t i) {
  const auto at = [&](std::size_t j) { return static_cast<unsigned char>(s[j]); };
  const unsigned char c = at(i);
  std::size_t n = 0;
  unsigned char lo = 0x80, hi = 0xbf;  // the second byte's range
  if (c >= 0xc2 && c <= 0xdf) {
    n = 2;
  } else if (c >= 0xe0 && c <= 0xef) {
    n = 3;
    if (c == 0xe0) lo = 0xa0;
    if (c == 0xed) hi = 0x9f;
  } else if (c >= 0xf0 && c <= 0xf4) {
    n = 4;
    if (c == 0xf0) lo = 0x90;
    if (c == 0xf4) hi = 0x8f;
  } else {
    return 0;
  }
  if (i + n > s.size() || at(i + 1) < lo || at(i + 1) > hi) return 0;
  for (std::size_t j = 2; j < n; ++j)
    if (at(i + j) < 0x80 || at(i + j) > 0xbf) return 0;
  return n;
}

}  // namespace pcnn::detail
