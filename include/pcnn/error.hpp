// pcnn — errors thrown by the library.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace pcnn {

/// Base of every exception pcnn throws: a bad argument, an unreadable file, a device failure.
class error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A CUDA runtime call or kernel launch failed; the message names the call site and CUDA's reason.
class cuda_error : public error {
 public:
  using error::error;
};

/// No usable CUDA device (no driver, driver too old, no GPU, or the device was not found).
class no_device_error : public cuda_error {
 public:
  using cuda_error::cuda_error;
};

/// Device memory ran out, or a search would need more than is available (or more than the
/// limit set with pcnn::set_device_memory_limit). Nothing was launched for the failed request,
/// every device buffer it took was released, and the library stays usable: a smaller request, or
/// the same one after memory is freed, works.
class out_of_memory_error : public cuda_error {
 public:
  out_of_memory_error(const std::string& what, std::int64_t needed, std::int64_t available)
      : cuda_error(what), needed_(needed), available_(available) {}
  std::int64_t needed_bytes() const { return needed_; }        ///< what the request needed
  std::int64_t available_bytes() const { return available_; }  ///< what was available then

 private:
  std::int64_t needed_, available_;
};

namespace detail {
[[noreturn]] inline void throw_expects(const char* cond, const std::string& msg, const char* file,
                                       int line) {
  throw error(msg + " (" + cond + " failed at " + file + ":" + std::to_string(line) + ")");
}
}  // namespace detail

}  // namespace pcnn

/// Checks a precondition on caller input and throws pcnn::error with `msg` when it does not hold.
#define PCNN_EXPECTS(cond, msg)                                                   \
  do {                                                                            \
    if (!(cond)) ::pcnn::detail::throw_expects(#cond, (msg), __FILE__, __LINE__); \
  } while (0)
