// OutputSet and OutputFile: every output of a command checked before any work, staged beside its
// target and committed together (see include/pcnn/io.hpp for the rules).
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <utility>
#include <vector>

#include "output_file.hpp"
#include "pcnn/memory.hpp"

namespace pcnn {
namespace io_detail {

// ---- OutputFile ----

OutputFile::OutputFile(std::string path, int fd, bool sync)
    : path_(std::move(path)), fd_(fd), sync_(sync) {
  buf_.reserve(1 << 20);
}

OutputFile::~OutputFile() {
  if (fd_ >= 0) ::close(fd_);
}

void OutputFile::fail(const std::string& why) const {
  throw output_error("cannot write '" + path_ + "': " + why, path_);
}

namespace {

// SIGPIPE blocked in the calling thread while it lives: a write to a pipe whose reader has gone
// then fails with EPIPE, reported as an output error, instead of the signal killing the process
// (a library never exits). After an EPIPE (`raised`), the SIGPIPE that write raised is taken back
// before the thread's mask is restored, unless one was already pending (then it is the caller's).
class PipeSignalBlocked {
 public:
  PipeSignalBlocked() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    sigset_t pending;
    sigemptyset(&pending);
    was_pending_ = sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE) == 1;
    blocked_ = pthread_sigmask(SIG_BLOCK, &pipe_, &old_) == 0;
  }
  ~PipeSignalBlocked() {
    if (!blocked_) return;
    if (raised && !was_pending_) {
      const timespec none{0, 0};
      while (sigtimedwait(&pipe_, nullptr, &none) == SIGPIPE) {
      }
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  PipeSignalBlocked(const PipeSignalBlocked&) = delete;
  PipeSignalBlocked& operator=(const PipeSignalBlocked&) = delete;

  bool raised = false;  // a write failed with EPIPE, raising SIGPIPE

 private:
  sigset_t pipe_, old_;
  bool was_pending_ = false, blocked_ = false;
};

// Writes all of [p, p + n) to fd: retries interrupted and partial writes, waits on a full
// non-blocking descriptor; any other failure (ENOSPC, EFBIG, EIO, EPIPE...) is an error.
const char* write_all(int fd, const char* p, std::size_t n) {
  PipeSignalBlocked no_sigpipe;
  while (n > 0) {
    const ssize_t k = ::write(fd, p, std::min<std::size_t>(n, std::size_t(1) << 30));
    if (k > 0) {
      p += k;
      n -= static_cast<std::size_t>(k);
      continue;
    }
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd pfd{fd, POLLOUT, 0};
      ::poll(&pfd, 1, -1);
      continue;
    }
    if (k < 0 && errno == EPIPE) no_sigpipe.raised = true;
    return k == 0 ? "the system wrote nothing" : std::strerror(errno);
  }
  return nullptr;
}

}  // namespace

void OutputFile::flush() {
  if (buf_.empty()) return;
  if (const char* err = write_all(fd_, buf_.data(), buf_.size())) fail(err);
  buf_.clear();
}

void OutputFile::write(const void* data, std::size_t n) {
  if (fd_ < 0) fail("written after it was finished");
  const char* p = static_cast<const char*>(data);
  if (buf_.size() + n > buf_.capacity()) flush();
  if (n >= buf_.capacity()) {
    if (const char* err = write_all(fd_, p, n)) fail(err);
    return;
  }
  buf_.insert(buf_.end(), p, p + n);
}

void OutputFile::finish() {
  if (fd_ < 0) fail("finished twice");
  flush();
  if (sync_ && ::fsync(fd_) != 0) fail(std::string("fsync: ") + std::strerror(errno));
  const int rc = ::close(fd_);
  fd_ = -1;
  if (rc != 0 && errno != EINTR) fail(std::string("close: ") + std::strerror(errno));
  done_ = true;
}

std::string lower_extension(const std::string& path) {
  std::string ext = std::filesystem::path(path).extension().string();
  for (auto& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return ext;
}

}  // namespace io_detail

// ---- OutputSet ----

namespace {

namespace fs = std::filesystem;
using io_detail::Format;
using io_detail::OutputFile;

[[noreturn]] void fail(const std::string& path, const std::string& why) {
  throw output_error("cannot write '" + path + "': " + why, path);
}

// Which file a path is: (device, inode) where it exists, else its absolute normal form.
struct FileId {
  bool exists = false;
  dev_t dev = 0;
  ino_t ino = 0;
  bool char_device = false;
  std::string key;
};

FileId id_of_stat(const struct stat& st) {
  FileId id;
  id.exists = true;
  id.dev = st.st_dev;
  id.ino = st.st_ino;
  id.char_device = S_ISCHR(st.st_mode);
  return id;
}

FileId identify(const std::string& path) {
  FileId id;
  struct stat st;
  if (::stat(path.c_str(), &st) == 0) id = id_of_stat(st);
  std::error_code ec;
  id.key = fs::weakly_canonical(fs::absolute(path, ec), ec).lexically_normal().string();
  return id;
}

bool same_file(const FileId& a, const FileId& b) {
  if (a.exists && b.exists) return a.dev == b.dev && a.ino == b.ino;
  return !a.key.empty() && a.key == b.key;
}

// "-", /dev/stdout, /dev/stderr, /dev/fd/N and /proc/self/fd/N name an open descriptor, which
// is written to as it is (the file behind it may be a regular file the shell opened: replacing
// that file would lose what the shell writes to it).
int named_descriptor(const std::string& p) {
  if (p == "-" || p == "/dev/stdout") return 1;
  if (p == "/dev/stderr") return 2;
  for (const char* prefix : {"/dev/fd/", "/proc/self/fd/"}) {
    const std::size_t n = std::strlen(prefix);
    if (p.compare(0, n, prefix) == 0 && p.size() > n && p.size() - n <= 6 &&
        p.find_first_not_of("0123456789", n) == std::string::npos)
      return std::stoi(p.substr(n));
  }
  return -1;
}

// Follows the last component while it is a symlink: the file a symlink finally names is the one
// replaced (the link stays a link); a link to a named descriptor (/dev/stdout) names it.
std::string follow_links(const std::string& named) {
  std::string p = named;
  for (int hops = 0; hops < 40; ++hops) {
    struct stat st;
    if (named_descriptor(p) >= 0) return p;  // the descriptor, not the file behind it
    if (::lstat(p.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) return p;
    std::vector<char> buf(static_cast<std::size_t>(std::max<off_t>(st.st_size, 255)) + 1);
    const ssize_t n = ::readlink(p.c_str(), buf.data(), buf.size() - 1);
    if (n < 0) fail(named, std::string("cannot read the symlink: ") + std::strerror(errno));
    const std::string target(buf.data(), static_cast<std::size_t>(n));
    const fs::path parent = fs::path(p).parent_path();
    p = target.empty() || target[0] == '/' || parent.empty() ? target : (parent / target).string();
  }
  fail(named, "too many levels of symbolic links");
}

// The temporaries (and commit's backups) not yet put in place or removed, by absolute path, for
// remove_uncommitted_outputs(), which a signal handler calls: fixed buffers (no allocation, so
// nothing for a leak checker either) and one atomic state a slot. A slot is free, being filled,
// ready, or taken by the handler (then left so: the process is ending).
enum : int { kSlotFree, kSlotFilling, kSlotReady, kSlotTaken };
constexpr int kPendingSlots = 64;
struct PendingSlot {
  std::atomic<int> state{kSlotFree};
  char path[PATH_MAX];
};
static_assert(std::atomic<int>::is_always_lock_free, "the signal handler needs lock-free atomics");
PendingSlot pending_files[kPendingSlots];
// Set while commit() puts outputs in place (or back): a handler on another thread waits for it to
// clear, so that it finds all renamed or all rolled back, never a mix with the backups gone.
// The committing thread holds the signals meanwhile (SignalsHeld), so it never waits on itself.
std::atomic<int> committing{0};

int add_pending(const std::string& absolute) {
  if (absolute.size() >= PATH_MAX) return -1;  // then removed only by its OutputSet
  for (int i = 0; i < kPendingSlots; ++i) {
    int free_slot = kSlotFree;
    if (!pending_files[i].state.compare_exchange_strong(free_slot, kSlotFilling)) continue;
    std::memcpy(pending_files[i].path, absolute.c_str(), absolute.size() + 1);
    pending_files[i].state.store(kSlotReady);
    return i;
  }
  return -1;  // more than 64 at once: the rest are removed only by their OutputSet
}

void drop_pending(int& slot) {
  int ready = kSlotReady;
  if (slot >= 0) pending_files[slot].state.compare_exchange_strong(ready, kSlotFree);
  slot = -1;
}

// The handled signals blocked in this thread (while commit() renames: see `committing`).
class SignalsHeld {
 public:
  SignalsHeld() {
    sigset_t s;
    sigemptyset(&s);
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE, SIGXCPU}) sigaddset(&s, sig);
    pthread_sigmask(SIG_BLOCK, &s, &old_);
  }
  ~SignalsHeld() { pthread_sigmask(SIG_SETMASK, &old_, nullptr); }
  SignalsHeld(const SignalsHeld&) = delete;
  SignalsHeld& operator=(const SignalsHeld&) = delete;

 private:
  sigset_t old_;
};

std::string absolute_in(const std::string& final_path, const std::string& name) {
  std::error_code ec;
  const fs::path dir = fs::path(final_path).parent_path();
  return (fs::absolute(dir.empty() ? fs::path(".") : dir, ec) / name).string();
}

std::string random_suffix() {
  static const char digits[] = "abcdefghijklmnopqrstuvwxyz0123456789";
  std::random_device rd;  // the kernel's random source: names cannot be predicted
  std::string s;
  for (int i = 0; i < 12; ++i) s += digits[rd() % 36];
  return s;
}

}  // namespace

struct OutputSet::Impl {
  enum class Mode { staged, descriptor, direct };
  struct Target {
    std::string path;  // as named (derived for radius results), for messages
    Format format = Format::npy;
    Mode mode = Mode::staged;
    int descriptor = -1;     // Mode::descriptor
    std::string final_path;  // after following symlinks
    FileId id;
    int dir_fd = -1;                   // staged: the target's directory
    std::string name, temp;            // staged: the target's and the temporary's names in it
    int temp_fd = -1;                  // staged: until a writer takes it
    int pending = -1;                  // staged: the temporary's slot in pending_files
    bool existed = false;              // staged: a regular file is replaced
    std::unique_ptr<OutputFile> file;  // once writing has begun

    Target() = default;
    Target(Target&& o) noexcept
        : path(std::move(o.path)),
          format(o.format),
          mode(o.mode),
          descriptor(o.descriptor),
          final_path(std::move(o.final_path)),
          id(std::move(o.id)),
          dir_fd(std::exchange(o.dir_fd, -1)),
          name(std::move(o.name)),
          temp(std::exchange(o.temp, std::string())),
          temp_fd(std::exchange(o.temp_fd, -1)),
          pending(std::exchange(o.pending, -1)),
          existed(o.existed),
          file(std::move(o.file)) {}
    Target& operator=(Target&&) = delete;
    Target(const Target&) = delete;
    Target& operator=(const Target&) = delete;
    // An uncommitted temporary is removed: an error on the way leaves nothing behind.
    ~Target() {
      file.reset();
      if (temp_fd >= 0) ::close(temp_fd);
      if (!temp.empty()) ::unlinkat(dir_fd, temp.c_str(), 0);
      drop_pending(pending);
      if (dir_fd >= 0) ::close(dir_fd);
    }
  };
  struct Declared {
    std::string path;
    std::vector<std::size_t> targets;
  };
  struct Input {
    std::string path;
    FileId id;
  };

  std::vector<Target> targets;
  std::vector<Declared> declared;
  std::vector<Input> inputs;
  bool csv_streams = false;
  std::string stdout_user;
  FileId stdout_id;
  bool committed = false;

  // The file `path` names that has not been written yet (a character device such as /dev/null
  // may be named by several outputs), else the last one of that name.
  Target* find(const std::string& path) {
    Target* found = nullptr;
    for (auto& t : targets)
      if (t.path == path) {
        if (!t.file) return &t;
        found = &t;
      }
    return found;
  }

  // Resolves what `path` names and checks it; creates a staged target's temporary.
  Target resolve(const std::string& path) {
    Target t;
    t.path = path;
    int fd = named_descriptor(path);
    if (fd < 0) {
      t.final_path = follow_links(path);
      fd = named_descriptor(t.final_path);  // a link to /dev/stdout, /dev/fd/N
    }
    if (fd >= 0) {
      const int flags = ::fcntl(fd, F_GETFL);
      if (flags < 0) fail(path, "descriptor " + std::to_string(fd) + " is not open");
      if ((flags & O_ACCMODE) == O_RDONLY)
        fail(path, "descriptor " + std::to_string(fd) + " is not open for writing");
      struct stat st;
      if (::fstat(fd, &st) == 0) t.id = id_of_stat(st);
      t.id.key = "fd:" + std::to_string(fd);
      t.id.char_device = false;  // a terminal on stdout takes one output, like a pipe
      t.mode = Mode::descriptor;
      t.descriptor = fd;
      return t;
    }
    struct stat st;
    if (::stat(t.final_path.c_str(), &st) == 0) {
      if (S_ISDIR(st.st_mode)) fail(path, "is a directory");
      if (!S_ISREG(st.st_mode)) {  // FIFO, device, socket: written to, never replaced
        t.mode = Mode::direct;
        t.id = identify(t.final_path);
        return t;
      }
      t.existed = true;
    } else if (errno != ENOENT) {
      fail(path, std::strerror(errno));
    }
    t.id = identify(t.final_path);
    const fs::path fp(t.final_path);
    t.name = fp.filename().string();
    if (t.name.empty() || t.name == "." || t.name == "..")
      fail(path, t.name.empty() ? "names a directory (it ends in '/')" : "is a directory");
    const std::string dir = fp.parent_path().empty() ? "." : fp.parent_path().string();
    t.dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (t.dir_fd < 0)
      fail(path, errno == ENOENT
                     ? "its directory '" + dir + "' does not exist"
                     : "cannot open its directory '" + dir + "': " + std::strerror(errno));
    if (t.existed) check_replaceable(t, st);
    return t;
  }

  // A file that the shell's > or cp could not write is not replaced either: one the caller may
  // not write, or another user's in a sticky directory (/tmp), where the rename would fail after
  // all the work.
  static void check_replaceable(const Target& t, const struct stat& st) {
    if (::faccessat(t.dir_fd, t.name.c_str(), W_OK, AT_EACCESS) != 0)
      fail(t.path, std::string("it exists and is not writable (") + std::strerror(errno) + ")");
    struct stat dir;
    const uid_t me = ::geteuid();
    if (::fstat(t.dir_fd, &dir) == 0 && (dir.st_mode & S_ISVTX) && me != 0 && st.st_uid != me &&
        dir.st_uid != me)
      fail(t.path,
           "it belongs to another user in a sticky directory (such as /tmp), where only its "
           "owner may replace it");
  }

  // The temporary: in the target's directory (the rename stays on one file system), a name no
  // one can guess, created exclusively and never through a symlink. Creating it is also the
  // proof that the directory is writable, before any work is done.
  void create_temporary(Target& t) {
    struct stat st;
    const bool keep_mode = t.existed && ::stat(t.final_path.c_str(), &st) == 0;
    for (int attempt = 0; attempt < 100; ++attempt) {
      const std::string temp = "." + t.name.substr(0, 200) + ".pcnn-" + random_suffix();
      // Registered before it exists: a signal on any thread then never finds it unregistered
      // (unlinking a name not yet made is harmless).
      int pending = add_pending(absolute_in(t.final_path, temp));
      const int fd = ::openat(t.dir_fd, temp.c_str(),
                              O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
      if (fd >= 0) {
        t.temp = temp;
        t.temp_fd = fd;
        t.pending = pending;
        if (keep_mode) keep_owner_and_mode(fd, st);
        return;
      }
      const int create_errno = errno;
      drop_pending(pending);
      errno = create_errno;
      if (errno != EEXIST)
        fail(t.path, std::string("cannot create a file in its directory: ") + std::strerror(errno));
    }
    fail(t.path, "cannot create a temporary file in its directory");
  }

  // The replaced file's owner and group where this process may give them (root; a group it is
  // in), and its permission bits; set-user-ID and set-group-ID only with the owner or group kept
  // (never a set-user-ID file of another owner than the original's).
  static void keep_owner_and_mode(int fd, const struct stat& was) {
    if (::fchown(fd, was.st_uid, was.st_gid) != 0) (void)::fchown(fd, (uid_t)-1, was.st_gid);
    struct stat now;
    if (::fstat(fd, &now) != 0) return;
    mode_t mode = was.st_mode & 01777;
    if (now.st_uid == was.st_uid) mode |= was.st_mode & S_ISUID;
    if (now.st_gid == was.st_gid) mode |= was.st_mode & S_ISGID;
    ::fchmod(fd, mode);
  }

  static bool writes_to_terminal(const Target& t) {
    if (t.mode == Mode::descriptor) return ::isatty(t.descriptor) == 1;
    if (t.mode != Mode::direct) return false;
    // Only a character device can be a terminal; a FIFO is never opened here (opening and
    // closing it would end its reader's input before the data comes).
    struct stat st;
    if (::stat(t.final_path.c_str(), &st) != 0 || !S_ISCHR(st.st_mode)) return false;
    const int fd = ::open(t.final_path.c_str(), O_WRONLY | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return false;  // the write reports why
    const bool tty = ::isatty(fd) == 1;
    ::close(fd);
    return tty;
  }

  void check_conflicts(const Target& t) const {
    for (const auto& in : inputs)
      if (same_file(t.id, in.id))
        fail(t.path, "it is the input '" + in.path + "' (an output never overwrites an input)");
    for (const auto& o : targets)
      if (same_file(t.id, o.id) && !(t.id.char_device && o.id.char_device))
        fail(t.path, "it is also the output '" + o.path + "'");
    if (!stdout_user.empty() && same_file(t.id, stdout_id) && !t.id.char_device)
      fail(t.path, "stdout is taken by " + stdout_user);
    // Standard error takes the program's messages (the pcnn command's notes, table and errors),
    // which would be mixed into the data: it is no output (a terminal or /dev/null aside; and
    // stdout, where the caller sent stderr with 2>&1, is the caller's choice).
    struct stat err, out;
    const bool is_stdout =
        t.descriptor == 1 || (::fstat(1, &out) == 0 && same_file(t.id, id_of_stat(out)));
    if (::fstat(2, &err) == 0 && !S_ISCHR(err.st_mode) && !is_stdout &&
        (t.descriptor == 2 || same_file(t.id, id_of_stat(err))))
      fail(t.path, "it is standard error, where messages go (redirect stderr elsewhere)");
  }
};

OutputSet::OutputSet() : impl_(std::make_unique<Impl>()) {}
OutputSet::~OutputSet() = default;
OutputSet::Impl& OutputSet::impl() const {
  PCNN_EXPECTS(impl_ != nullptr, "use of a moved-from pcnn::OutputSet");
  return *impl_;
}
OutputSet::OutputSet(OutputSet&&) noexcept = default;
OutputSet& OutputSet::operator=(OutputSet&&) noexcept = default;

void OutputSet::add_input(const std::string& path) {
  if (path == "-") return;  // standard input: read to its end before anything is written
  Impl::Input in{path, identify(path)};
  for (const auto& t : impl().targets)
    if (same_file(t.id, in.id))
      fail(t.path, "it is the input '" + path + "' (an output never overwrites an input)");
  impl().inputs.push_back(in);
}

void OutputSet::reserve_stdout(const std::string& what) {
  struct stat st;
  FileId id;
  if (::fstat(1, &st) == 0) id = id_of_stat(st);
  id.key = "fd:1";
  for (const auto& t : impl().targets)
    if (same_file(t.id, id) && !t.id.char_device) fail(t.path, "stdout is taken by " + what);
  impl().stdout_user = what;
  impl().stdout_id = id;
}

void OutputSet::prefer_csv_streams(bool csv) { impl().csv_streams = csv; }

void OutputSet::add(const std::string& path, OutputKind kind) {
  if (path.empty()) throw output_error("an output path is empty");
  Impl& im = impl();
  Impl::Target first = im.resolve(path);
  im.check_conflicts(first);  // before the extension: "it is the input" says more
  const bool staged = first.mode == Impl::Mode::staged;
  const std::string ext = io_detail::lower_extension(path);
  std::vector<std::pair<std::string, Format>> files;
  switch (kind) {
    case OutputKind::array:
      if (ext == ".npy" || ext == ".csv" || !staged)
        files.emplace_back(path, ext == ".csv" || (!staged && ext != ".npy" && im.csv_streams)
                                     ? Format::csv
                                     : Format::npy);
      else
        fail(path, (ext.empty() ? "no extension" : "unknown extension '" + ext + "'") +
                       " (expected .npy or .csv)");
      break;
    case OutputKind::cloud:
      if (ext == ".pcd" || ext == ".ply" || !staged)
        files.emplace_back(path, ext == ".ply" ? Format::ply : Format::pcd);
      else
        fail(path, (ext.empty() ? "no extension" : "unknown extension '" + ext + "'") +
                       " (expected .pcd or .ply)");
      break;
    case OutputKind::radius:
      if (ext == ".csv" || !staged) {
        files.emplace_back(path, Format::pairs_csv);
      } else if (ext == ".npy" || ext.empty()) {
        const std::string base = ext.empty() ? path : path.substr(0, path.size() - 4);
        for (const char* part : {".offsets.npy", ".indices.npy", ".sqdist.npy"})
          files.emplace_back(base + part, Format::npy);
      } else {
        fail(path, "unknown extension '" + ext +
                       "' (expected .csv, or .npy or none for OUT.offsets/indices/sqdist.npy)");
      }
      break;
  }
  Impl::Declared d{path, {}};
  std::vector<Impl::Target> added;
  for (std::size_t i = 0; i < files.size(); ++i) {
    Impl::Target t =
        (i == 0 && files[i].first == path) ? std::move(first) : im.resolve(files[i].first);
    t.format = files[i].second;
    im.check_conflicts(t);
    for (const auto& o : added)
      if (same_file(t.id, o.id)) fail(t.path, "it is also the output '" + o.path + "'");
    added.push_back(std::move(t));
  }
  // Binary data is never sent to a terminal (it would garble it and help no one).
  for (const auto& t : added)
    if (t.format != Format::csv && t.format != Format::pairs_csv && Impl::writes_to_terminal(t))
      fail(t.path,
           "it is a terminal, and this output is binary (redirect it to a file or a "
           "pipe, or name a .csv)");
  // All checked: now reserve the temporaries (the proof the directories are writable).
  for (auto& t : added) {
    if (t.mode == Impl::Mode::staged) im.create_temporary(t);
    d.targets.push_back(im.targets.size());
    im.targets.push_back(std::move(t));
  }
  im.declared.push_back(std::move(d));
}

bool OutputSet::is_stream(const std::string& path) {
  struct stat st;
  return named_descriptor(path) >= 0 ||
         (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode));
}

std::vector<std::string> OutputSet::files(const std::string& path) const {
  for (const auto& d : impl().declared)
    if (d.path == path) {
      std::vector<std::string> out;
      for (std::size_t i : d.targets) out.push_back(impl().targets[i].path);
      return out;
    }
  return {};
}

void OutputSet::check_space(const std::vector<std::pair<std::string, std::int64_t>>& files,
                            const std::string& what) const {
  Impl& im = impl();
  struct Device {
    dev_t dev;
    std::int64_t needed, free;
    std::string dir, first;
  };
  std::vector<Device> devices;
  rlimit fsize{};
  const bool limited = ::getrlimit(RLIMIT_FSIZE, &fsize) == 0 && fsize.rlim_cur != RLIM_INFINITY;
  for (const auto& [path, bytes] : files) {
    const Impl::Target* t = im.find(path);
    if (!t || t->mode != Impl::Mode::staged) continue;
    if (limited && static_cast<rlim_t>(bytes) > fsize.rlim_cur)
      fail(path, what + " need " + format_bytes(bytes) +
                     " in this file, over the file size limit of " +
                     format_bytes(static_cast<std::int64_t>(fsize.rlim_cur)) + " (ulimit -f)");
    struct stat st;
    struct statvfs vfs;
    if (::fstat(t->dir_fd, &st) != 0 || ::fstatvfs(t->dir_fd, &vfs) != 0) continue;
    auto it = std::find_if(devices.begin(), devices.end(),
                           [&](const Device& d) { return d.dev == st.st_dev; });
    if (it == devices.end()) {
      const fs::path dir = fs::path(t->final_path).parent_path();
      devices.push_back(
          {st.st_dev, 0,
           static_cast<std::int64_t>(vfs.f_bavail) * static_cast<std::int64_t>(vfs.f_frsize),
           dir.empty() ? "." : dir.string(), path});
      it = devices.end() - 1;
    }
    it->needed += bytes;
  }
  for (const auto& d : devices)
    if (d.needed > d.free)
      fail(d.first, what + " need " + format_bytes(d.needed) + " on the file system of '" + d.dir +
                        "', which has " + format_bytes(d.free) + " free");
}

void OutputSet::commit() {
  Impl& im = impl();
  if (im.committed) throw output_error("outputs committed twice");
  for (const auto& t : im.targets)
    if (!t.file || !t.file->finished()) fail(t.path, "nothing was written to it");
  std::vector<Impl::Target*> staged;
  for (auto& t : im.targets)
    if (t.mode == Impl::Mode::staged) staged.push_back(&t);
  // Each target is still what add() found there, the same regular file, or nothing (a file
  // removed meanwhile is simply written): a FIFO, symlink or other file put there meanwhile is
  // not replaced. `replaces`: a file is there to replace.
  std::vector<char> replaces(staged.size(), 0);
  for (std::size_t i = 0; i < staged.size(); ++i) {
    const Impl::Target* t = staged[i];
    struct stat st;
    const bool there = ::fstatat(t->dir_fd, t->name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0;
    const bool absent = !there && errno == ENOENT;
    const bool same = there && t->existed && S_ISREG(st.st_mode) && st.st_dev == t->id.dev &&
                      st.st_ino == t->id.ino;
    if (!absent && !same)
      fail(t->path, std::string("it changed while pcnn ran (") +
                        (t->existed ? "another file is there now" : "something was made there") +
                        "): left as it is");
    replaces[i] = same;
  }
  // Hard links to the files about to be replaced, so that a failed rename can undo the ones
  // before it (where the file system has no hard links, that target cannot be restored).
  std::vector<std::string> backup(staged.size());
  std::vector<int> backup_pending(staged.size(), -1);
  for (std::size_t i = 0; i < staged.size(); ++i) {
    if (!replaces[i]) continue;
    const std::string b = "." + staged[i]->name.substr(0, 200) + ".pcnn-" + random_suffix();
    backup_pending[i] = add_pending(absolute_in(staged[i]->final_path, b));  // before it exists
    if (::linkat(staged[i]->dir_fd, staged[i]->name.c_str(), staged[i]->dir_fd, b.c_str(), 0) ==
        0) {
      backup[i] = b;
    } else {
      if (errno == ENOENT) replaces[i] = 0;  // removed since the check: a new file after all
      drop_pending(backup_pending[i]);
    }
  }
  // From the first rename to the last (or to the rollback's end), no signal handler acts.
  const SignalsHeld held;
  struct Committing {
    Committing() { committing.store(1); }
    ~Committing() { committing.store(0); }
  } in_progress;
  std::size_t done = 0;
  int err = 0;
  for (; done < staged.size(); ++done) {
    Impl::Target& t = *staged[done];
    // A new file never replaces one made there since the check above.
    const unsigned flags = replaces[done] ? 0 : RENAME_NOREPLACE;
    int rc = ::renameat2(t.dir_fd, t.temp.c_str(), t.dir_fd, t.name.c_str(), flags);
    if (rc != 0 && (errno == EINVAL || errno == ENOSYS))  // a file system without the flag
      rc = ::renameat(t.dir_fd, t.temp.c_str(), t.dir_fd, t.name.c_str());
    if (rc != 0) {
      err = errno;
      break;
    }
    t.temp.clear();
    drop_pending(t.pending);
  }
  if (done < staged.size()) {
    for (std::size_t j = 0; j < done; ++j) {
      Impl::Target& t = *staged[j];
      if (!backup[j].empty())
        ::renameat(t.dir_fd, backup[j].c_str(), t.dir_fd, t.name.c_str());
      else if (!replaces[j])
        ::unlinkat(t.dir_fd, t.name.c_str(), 0);
    }
    for (std::size_t j = done; j < staged.size(); ++j)
      if (!backup[j].empty()) ::unlinkat(staged[j]->dir_fd, backup[j].c_str(), 0);
    for (int& slot : backup_pending) drop_pending(slot);
    fail(staged[done]->path, std::string("cannot rename it into place: ") + std::strerror(err));
  }
  committing.store(0);
  im.committed = true;
  // The renames themselves reach the disk: each directory once (a command's outputs share one,
  // mostly; a directory's fsync took ~70 ms after 640 MB of rows, H200 host, and was done for
  // each output in it).
  std::vector<std::pair<dev_t, ino_t>> synced;
  for (std::size_t i = 0; i < staged.size(); ++i) {
    struct stat st {};
    const bool known = ::fstat(staged[i]->dir_fd, &st) == 0;
    const std::pair<dev_t, ino_t> id{st.st_dev, st.st_ino};
    if (!known || std::find(synced.begin(), synced.end(), id) == synced.end()) {
      ::fsync(staged[i]->dir_fd);
      if (known) synced.push_back(id);
    }
  }
  for (std::size_t i = 0; i < staged.size(); ++i)
    if (!backup[i].empty()) ::unlinkat(staged[i]->dir_fd, backup[i].c_str(), 0);
  for (int& slot : backup_pending) drop_pending(slot);
}

void remove_uncommitted_outputs() noexcept {
  while (committing.load() != 0) {
  }  // another thread is putting outputs in place: a moment
  for (auto& slot : pending_files) {
    int ready = kSlotReady;
    if (slot.state.compare_exchange_strong(ready, kSlotTaken)) ::unlink(slot.path);
  }
}

namespace io_detail {

namespace {

OutputSet::Impl::Target& declared_file(OutputSet::Impl& im, const std::string& path) {
  auto* t = im.find(path);
  if (!t) throw output_error("cannot write '" + path + "': it was not declared as an output", path);
  return *t;
}

}  // namespace

Format output_format(const OutputSet& outputs, const std::string& path) {
  return declared_file(outputs.impl(), path).format;
}

std::string staged_temporary(OutputSet& outputs, const std::string& path) {
  auto& t = declared_file(outputs.impl(), path);
  if (t.mode != OutputSet::Impl::Mode::staged || t.temp.empty()) return "";
  const fs::path dir = fs::path(t.final_path).parent_path();
  return (fs::absolute(dir.empty() ? fs::path(".") : dir) / t.temp).string();
}

OutputFile& begun_output(OutputSet& outputs, const std::string& path) {
  auto& t = declared_file(outputs.impl(), path);
  if (!t.file) fail(t.path, "not begun");
  return *t.file;
}

OutputFile& begin_output(OutputSet& outputs, const std::string& path) {
  OutputSet::Impl& im = outputs.impl();
  auto& t = declared_file(im, path);
  if (im.committed || t.file) fail(t.path, "written twice");
  int fd = -1;
  switch (t.mode) {
    case OutputSet::Impl::Mode::staged:
      fd = std::exchange(t.temp_fd, -1);
      break;
    case OutputSet::Impl::Mode::descriptor:
      fd = ::fcntl(t.descriptor, F_DUPFD_CLOEXEC, 3);
      if (fd < 0) fail(t.path, std::string("cannot use its descriptor: ") + std::strerror(errno));
      break;
    case OutputSet::Impl::Mode::direct:
      fd = ::open(t.final_path.c_str(), O_WRONLY | O_NOCTTY | O_CLOEXEC);
      if (fd < 0) fail(t.path, std::string("cannot open it: ") + std::strerror(errno));
      break;
  }
  t.file = std::make_unique<OutputFile>(t.path, fd, t.mode == OutputSet::Impl::Mode::staged);
  return *t.file;
}

}  // namespace io_detail

}  // namespace pcnn
