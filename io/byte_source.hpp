// Sequential, buffered reading of a file for the input gate: bytes, and text lines with their
// endings and line numbers.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "header_check.hpp"

namespace pcnn::io_detail {

class ByteSource {
 public:
  /// Reads `fd` (the file the gate checks, named `path` in messages) from `offset`, with pread:
  /// any number of sources may read the one descriptor.
  ByteSource(const std::string& path, int fd, std::uint64_t offset)
      : path_(path), fd_(fd), offset_(offset), next_(offset) {
    buf_.resize(1 << 16);
  }
  ByteSource(const ByteSource&) = delete;
  ByteSource& operator=(const ByteSource&) = delete;

  /// Offset of the next byte.
  std::uint64_t offset() const { return offset_; }

  /// Copies up to n bytes; returns how many there were.
  std::size_t read(void* dst, std::size_t n) {
    auto* out = static_cast<char*>(dst);
    std::size_t done = 0;
    while (done < n && fill()) {
      const std::size_t k = std::min(n - done, end_ - pos_);
      std::memcpy(out + done, buf_.data() + pos_, k);
      pos_ += k;
      done += k;
      offset_ += k;
    }
    return done;
  }

  /// Skips n bytes; false when the file ends first.
  bool skip(std::uint64_t n) {
    while (n > 0) {
      if (!fill()) return false;
      const std::size_t k = static_cast<std::size_t>(std::min<std::uint64_t>(n, end_ - pos_));
      pos_ += k;
      offset_ += k;
      n -= k;
    }
    return true;
  }

  bool at_end() { return !fill(); }

  /// Reads the next line into `text` (without its ending). Returns false at the end of the
  /// file. `ending` is "\n", "\r\n" or "" (the file ended); a line longer than `max_length`
  /// sets `too_long` and stops there.
  bool line(std::string& text, std::string_view& ending, bool& too_long, std::size_t max_length) {
    text.clear();
    too_long = false;
    if (!fill()) return false;
    for (;;) {
      if (!fill()) {
        ending = "";
        return true;
      }
      const char* start = buf_.data() + pos_;
      const auto* nl = static_cast<const char*>(std::memchr(start, '\n', end_ - pos_));
      const std::size_t k = nl ? static_cast<std::size_t>(nl - start) : end_ - pos_;
      if (text.size() + k > max_length) {
        too_long = true;
        return true;
      }
      text.append(start, k);
      pos_ += k;
      offset_ += k;
      if (nl) {
        ++pos_;
        ++offset_;
        if (!text.empty() && text.back() == '\r') {
          text.pop_back();
          ending = "\r\n";
        } else {
          ending = "\n";
        }
        return true;
      }
    }
  }

 private:
  bool fill() {
    if (pos_ < end_) return true;
    pos_ = 0;
    end_ = 0;
    for (;;) {
      const ssize_t n = ::pread(fd_, buf_.data(), buf_.size(), static_cast<off_t>(next_));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0)
        reject(path_, "byte " + std::to_string(next_),
               std::string("cannot read it: ") + std::strerror(errno));
      end_ = static_cast<std::size_t>(n);
      next_ += end_;
      return end_ > 0;
    }
  }

  std::string path_;
  int fd_;
  std::vector<char> buf_;
  std::size_t pos_ = 0, end_ = 0;
  std::uint64_t offset_;  // of the next byte handed out
  std::uint64_t next_;    // of the next byte to read from the file
};

}  // namespace pcnn::io_detail
