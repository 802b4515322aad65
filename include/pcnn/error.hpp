// pcnn — errors thrown by the library: a small taxonomy. The library never prints, never exits and
// never asserts on input; every failure reaches the caller as one of these.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>

namespace pcnn {

/// Base of every exception pcnn throws.
class error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// An argument the caller passed is invalid (k out of range, a view with a null pointer, an
/// output of the wrong size, a device view given to the CPU backend...). The message says which
/// and why; nothing was changed (two exceptions: the outputs of a radius fill given offsets that
/// are not the count's, Index::radius_fill; and a CPU-backend build whose points another thread
/// changed during the call, which leaves the index empty, Index::build).
class invalid_argument_error : public error {
 public:
  using error::error;
};

/// A CUDA runtime call or kernel launch failed; the message names the call and CUDA's reason.
class cuda_error : public error {
 public:
  using error::error;
};

/// No usable CUDA device (no driver, driver too old, no GPU, or the device was not found).
class no_device_error : public cuda_error {
 public:
  using cuda_error::cuda_error;
};

/// Memory ran out, or a search would need more than is available (device memory, or the cap of a
/// pcnn::LimitedResource). Nothing was launched for the failed request, every buffer it took was
/// released, and the object stays usable: a smaller request, or the same one after memory is
/// freed, works.
class out_of_memory_error : public error {
 public:
  out_of_memory_error(const std::string& what, std::int64_t needed, std::int64_t available)
      : error(what), needed_(needed), available_(available) {}
  std::int64_t needed_bytes() const { return needed_; }        ///< what the request needed
  std::int64_t available_bytes() const { return available_; }  ///< what was available then

 private:
  std::int64_t needed_, available_;
};

/// A file could not be read or written (base of pcnn::input_error and pcnn::output_error).
class io_error : public error {
 public:
  /// `path`: the file the error is about, as the caller named it ("" when none is known).
  explicit io_error(const std::string& what, std::string path = "")
      : error(what), path_(std::move(path)) {}
  /// The file the error is about, as the caller named it (`<stdin>` for standard input); empty
  /// when none is known.
  const std::string& path() const noexcept { return path_; }

 private:
  std::string path_;
};

/// A file could not be read as a cloud; the message names the file and the reason.
class input_error : public io_error {
 public:
  using io_error::io_error;
};

/// A result could not be written; the message names the file and the reason.
class output_error : public io_error {
 public:
  using io_error::io_error;
};

}  // namespace pcnn

/// Checks a precondition on caller input; throws pcnn::invalid_argument_error with `msg` (a
/// sentence for the user: no source location, no expression) when it does not hold.
#define PCNN_EXPECTS(cond, msg)                               \
  do {                                                        \
    if (!(cond)) throw ::pcnn::invalid_argument_error((msg)); \
  } while (0)
