// The one writer path for every output: an OutputFile is a staged temporary beside its target
// (put in place by OutputSet::commit) or a target that is not a regular file, written directly.
// Every write, flush, fsync and close is checked.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "pcnn/io.hpp"

namespace pcnn::io_detail {

/// The format an output is written in (from its extension and kind).
enum class Format { npy, csv, pcd, ply, pairs_csv, csr_npy };

class OutputFile {
 public:
  /// Takes `fd` (closed by finish() or the destructor). `sync`: fsync before closing (staged
  /// files, so that the rename publishes complete data).
  OutputFile(std::string path, int fd, bool sync);
  ~OutputFile();
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  void write(const void* data, std::size_t n);
  void write(std::string_view s) { write(s.data(), s.size()); }
  /// Flushes, fsyncs (staged files) and closes; throws pcnn::output_error on any failure.
  void finish();
  bool finished() const { return fd_ < 0 && done_; }
  const std::string& path() const { return path_; }
  /// Throws pcnn::output_error "cannot write 'PATH': why".
  [[noreturn]] void fail(const std::string& why) const;

 private:
  void flush();

  std::string path_;
  int fd_;
  bool sync_;
  bool done_ = false;
  std::vector<char> buf_;
};

/// The format `path` (a file of a declared output) is written in.
Format output_format(const OutputSet& outputs, const std::string& path);

/// Starts writing `path` (a file of a declared output, as OutputSet::files lists them); each
/// file is written once. The returned file lives as long as `outputs`.
OutputFile& begin_output(OutputSet& outputs, const std::string& path);

/// The absolute path of the staged temporary of `path` (a file of a declared output, not yet
/// begun or just begun), "" when the target is not staged (stdout, a FIFO, a device).
std::string staged_temporary(OutputSet& outputs, const std::string& path);

/// The open file of `path` once begin_output has been called (throws otherwise).
OutputFile& begun_output(OutputSet& outputs, const std::string& path);

/// Lower-case extension of a path's last component, with the dot ("" if none).
std::string lower_extension(const std::string& path);

}  // namespace pcnn::io_detail
