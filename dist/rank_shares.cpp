// The ranks of one host writing each other's blocks of a self-search's rows (dist/rank_shares.hpp).
#include "dist/rank_shares.hpp"

#include <cuda_runtime.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <random>
#include <string>
#include <utility>

#include "core/backend.hpp"
#include "core/row_shares.hpp"
#include "dist/mpi_common.hpp"
#include "gpu/detail/cuda_try.cuh"
#include "gpu/detail/device_scope.cuh"
#include "gpu/detail/stream.cuh"

namespace pcnn::mpi::internal {
namespace {

using pcnn::detail::DeviceScope;
using pcnn::detail::RowShares;
using pcnn::detail::Stream;
constexpr cudaMemAllocationHandleType kHandle = cudaMemHandleTypePosixFileDescriptor;

// A CUDA call that may fail where this way of running is not to be had: its error cleared.
bool succeeded(cudaError_t e) {
  if (e == cudaSuccess) return true;
  static_cast<void>(cudaGetLastError());
  return false;
}

// A file descriptor, closed with its owner.
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() { reset(-1); }
  Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Fd& operator=(Fd&& o) noexcept {
    reset(std::exchange(o.fd_, -1));
    return *this;
  }
  int get() const { return fd_; }
  void reset(int fd) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_;
};

// What each rank tells the others before the pools are passed.
struct Card {
  std::int32_t pid = 0;
  std::int32_t ready = 0;  // its pool exported and its socket listening
  char bus[32] = {};       // its device's PCI address
  char socket[64] = {};    // its socket's name in the abstract namespace
};

sockaddr_un address_of(const char* name, socklen_t& len) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  const std::size_t n = strnlen(name, sizeof Card::socket);
  std::memcpy(a.sun_path + 1, name, n);  // sun_path[0] stays 0: the abstract namespace
  len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n);
  return a;
}

// A socket listening for `backlog` connections under a name of this process's own.
Fd listen_socket(int backlog, char (&name)[sizeof Card::socket]) {
  Fd s(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (s.get() < 0) return Fd();
  std::random_device random;
  std::snprintf(name, sizeof name, "pcnn-%d-%08x%08x", static_cast<int>(::getpid()), random(),
                random());
  socklen_t len = 0;
  const sockaddr_un a = address_of(name, len);
  if (::bind(s.get(), reinterpret_cast<const sockaddr*>(&a), len) != 0 ||
      ::listen(s.get(), backlog) != 0)
    return Fd();
  return s;
}

// One message: this rank's number, and a descriptor with it.
struct Message {
  int rank = -1;
  iovec iov{};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  Message() {
    iov = {&rank, sizeof rank};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
  }
};

// Sends `fd` and this rank's number over a connection of its own to the socket `name` (queued
// on its listener: the other rank need not be accepting yet).
bool send_fd(const char* name, int rank, int fd) {
  Fd s(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  socklen_t len = 0;
  const sockaddr_un a = address_of(name, len);
  if (s.get() < 0 || ::connect(s.get(), reinterpret_cast<const sockaddr*>(&a), len) != 0)
    return false;
  Message m;
  m.rank = rank;
  cmsghdr* c = CMSG_FIRSTHDR(&m.msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &fd, sizeof fd);
  return ::sendmsg(s.get(), &m.msg, MSG_NOSIGNAL) == static_cast<ssize_t>(sizeof m.rank);
}

// Accepts one connection (waiting up to 10 s) and takes its rank and descriptor, where the process
// that sent them is the one that rank reported (its id, as the kernel gives it).
bool receive_fd(int listener, const std::vector<Card>& cards, int& from, Fd& fd) {
  pollfd p{listener, POLLIN, 0};
  if (::poll(&p, 1, 10000) != 1) return false;
  const Fd s(::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC));
  if (s.get() < 0) return false;
  Message m;
  if (::recvmsg(s.get(), &m.msg, MSG_CMSG_CLOEXEC) != static_cast<ssize_t>(sizeof m.rank))
    return false;
  const cmsghdr* c = CMSG_FIRSTHDR(&m.msg);
  if (!c || (m.msg.msg_flags & MSG_CTRUNC) || c->cmsg_level != SOL_SOCKET ||
      c->cmsg_type != SCM_RIGHTS || c->cmsg_len != CMSG_LEN(sizeof(int)))
    return false;
  int got = -1;
  std::memcpy(&got, CMSG_DATA(c), sizeof got);
  fd.reset(got);
  ucred peer{};
  socklen_t peer_len = sizeof peer;
  if (::getsockopt(s.get(), SOL_SOCKET, SO_PEERCRED, &peer, &peer_len) != 0) return false;
  from = m.rank;
  return from >= 0 && from < static_cast<int>(cards.size()) &&
         peer.pid == cards[static_cast<std::size_t>(from)].pid;
}

}  // namespace

struct RankShares::Impl {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0, size = 1, device = 0;
  bool one_host = false;
  int usable = -1;                   // -1: not opened yet
  cudaMemPool_t pool = nullptr;      // this rank's, exported to the others
  std::vector<cudaMemPool_t> peers;  // the others' pools, imported (null: this rank's)
  // This rank's block (indices, distances), kept between searches and grown as needed, and the
  // blocks every rank holds now opened here (2 a rank; this rank's own, or null for an empty one).
  void* own[2] = {};
  std::size_t own_bytes = 0;
  std::vector<void*> blocks;

  ~Impl() {
    const DeviceScope on(device, std::nothrow);
    close_blocks();
    free_own();
    for (cudaMemPool_t p : peers)
      if (p) PCNN_CUDA_TRY_NO_THROW(cudaMemPoolDestroy(p));
    if (pool) {
      PCNN_CUDA_TRY_NO_THROW(cudaDeviceSynchronize());
      PCNN_CUDA_TRY_NO_THROW(cudaMemPoolDestroy(pool));
    }
  }

  // Collective: makes this rank's pool, passes it to every other rank and opens theirs, once.
  bool open() {
    if (usable < 0) usable = open_pools() ? 1 : 0;
    return usable != 0;
  }
  bool open_pools();
  // Free device memory, counting what this rank's pool holds unused.
  std::size_t free_bytes() const;
  // The other ranks' blocks closed here (before any rank frees its own: see update_blocks).
  void close_blocks() noexcept {
    for (std::size_t i = 0; i < blocks.size(); ++i)
      if (blocks[i] && static_cast<int>(i / 2) != rank) PCNN_CUDA_TRY_NO_THROW(cudaFree(blocks[i]));
    blocks.clear();
  }
  void free_own() noexcept {
    for (void*& p : own)
      if (p) PCNN_CUDA_TRY_NO_THROW(cudaFree(std::exchange(p, nullptr)));
    own_bytes = 0;
  }
  // Collective: every rank's block holds `bytes` (this rank's) or more, and is open in every
  // other rank; false on every rank where one has no room.
  bool update_blocks(std::size_t bytes, std::int64_t block_rows);
};
bool RankShares::Impl::open_pools() {
  const DeviceScope on(device, std::nothrow);
  Card mine;
  mine.pid = static_cast<std::int32_t>(::getpid());
  Fd listener, exported;
  int types = 0;
  bool ok = one_host && size >= 2 && size <= RowShares::kMax &&
            succeeded(cudaDeviceGetAttribute(&types, cudaDevAttrMemoryPoolSupportedHandleTypes,
                                             device)) &&
            (types & kHandle) != 0 &&
            succeeded(cudaDeviceGetPCIBusId(mine.bus, sizeof mine.bus - 1, device));
  if (ok) {
    cudaMemPoolProps props{};
    props.allocType = cudaMemAllocationTypePinned;
    props.handleTypes = kHandle;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = device;
    ok = succeeded(cudaMemPoolCreate(&pool, &props));
  }
  if (ok) {
    // Freed blocks stay in the pool for the next search (and stay open in the other ranks).
    std::uint64_t keep = UINT64_MAX;
    int fd = -1;
    ok = succeeded(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep)) &&
         succeeded(cudaMemPoolExportToShareableHandle(&fd, pool, kHandle, 0));
    exported.reset(fd);
  }
  if (ok) {
    listener = listen_socket(size, mine.socket);
    ok = listener.get() >= 0;
  }
  mine.ready = ok ? 1 : 0;
  std::vector<Card> cards(static_cast<std::size_t>(size));
  check(MPI_Allgather(&mine, sizeof mine, MPI_BYTE, cards.data(), sizeof mine, MPI_BYTE, comm),
        "MPI_Allgather (pools)");
  for (const Card& c : cards)
    if (!c.ready) return false;  // the same cards, and so the same answer, on every rank
  // Every rank sends its pool to every other (the connections queue on their listeners), then
  // takes theirs.
  bool sent = true;
  for (int r = 0; r < size && sent; ++r)
    if (r != rank) sent = send_fd(cards[static_cast<std::size_t>(r)].socket, rank, exported.get());
  if (!on_every_rank(comm, sent)) return false;
  peers.assign(static_cast<std::size_t>(size), nullptr);
  bool got = true;
  for (int i = 0; i + 1 < size && got; ++i) {
    int from = -1;
    Fd fd;
    got = receive_fd(listener.get(), cards, from, fd) && from != rank &&
          !peers[static_cast<std::size_t>(from)];
    if (!got) break;
    cudaMemPool_t& p = peers[static_cast<std::size_t>(from)];
    got = succeeded(cudaMemPoolImportFromShareableHandle(
        &p, reinterpret_cast<void*>(static_cast<std::intptr_t>(fd.get())), kHandle, 0));
    // Its memory made writable by this rank's device (a pool is so on its own device).
    if (got && std::strncmp(cards[static_cast<std::size_t>(from)].bus, mine.bus, sizeof mine.bus)) {
      cudaMemAccessDesc a{};
      a.location.type = cudaMemLocationTypeDevice;
      a.location.id = device;
      a.flags = cudaMemAccessFlagsProtReadWrite;
      got = succeeded(cudaMemPoolSetAccess(p, &a, 1));
    }
  }
  return on_every_rank(comm, got);
}

std::size_t RankShares::Impl::free_bytes() const {
  std::size_t free_bytes = 0, total = 0;
  PCNN_CUDA_TRY(cudaMemGetInfo(&free_bytes, &total));
  std::uint64_t reserved = 0, used = 0;
  PCNN_CUDA_TRY(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &reserved));
  PCNN_CUDA_TRY(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &used));
  return free_bytes + static_cast<std::size_t>(reserved - used);
}

// Ranks whose block must grow allocate a new one and every rank opens every rank's current block
// before any old one is closed (so no block is opened at an address another one still has);
// then every rank closes the old blocks, and once all have (the importers must close a block
// before its owner frees it), the old ones are freed.
bool RankShares::Impl::update_blocks(std::size_t bytes, std::int64_t block_rows) {
  const bool grow = own_bytes < bytes || blocks.empty();
  if (on_every_rank(comm, !grow)) return true;  // every block open as it is
  const DeviceScope on(device, std::nothrow);
  void* fresh[2] = {};
  const auto free_fresh = [&] {
    for (void*& p : fresh)
      if (p) PCNN_CUDA_TRY_NO_THROW(cudaFree(std::exchange(p, nullptr)));
  };
  bool room = true;
  collectively(comm, [&] {
    if (own_bytes >= bytes) return;
    const DeviceScope scope(device);
    room = static_cast<double>(free_bytes()) >=
           512.0 * (1 << 20) + 8.0 * static_cast<double>(block_rows) + 2.0 * bytes;
    const Stream stream;
    for (void*& p : fresh) {
      if (!room || bytes == 0) break;
      const cudaError_t e = cudaMallocFromPoolAsync(&p, bytes, pool, stream.get());
      if (e == cudaErrorMemoryAllocation) {
        static_cast<void>(cudaGetLastError());
        p = nullptr;
        room = false;
        break;
      }
      PCNN_CUDA_TRY(e);
    }
    PCNN_CUDA_TRY(cudaStreamSynchronize(stream.get()));
  });
  const bool grown = own_bytes < bytes;
  void* const current[2] = {grown ? fresh[0] : own[0], grown ? fresh[1] : own[1]};
  cudaMemPoolPtrExportData mine[2] = {};
  int held = room && current[0] ? 1 : 0;  // an empty block (of no rows) is not allocated
  for (int j = 0; j < 2 && held; ++j)
    held = succeeded(cudaMemPoolExportPointer(&mine[j], current[j])) ? 1 : -1;
  std::vector<cudaMemPoolPtrExportData> all(static_cast<std::size_t>(size) * 2);
  std::vector<int> holds(static_cast<std::size_t>(size));
  check(MPI_Allgather(mine, sizeof mine, MPI_BYTE, all.data(), sizeof mine, MPI_BYTE, comm),
        "MPI_Allgather (blocks)");
  check(MPI_Allgather(&held, 1, MPI_INT, holds.data(), 1, MPI_INT, comm),
        "MPI_Allgather (blocks held)");
  std::vector<void*> opened(static_cast<std::size_t>(size) * 2, nullptr);
  bool ok = on_every_rank(comm, room && held >= 0);
  for (int r = 0; r < size && ok; ++r)
    for (int j = 0; j < 2 && ok; ++j) {
      void*& p = opened[static_cast<std::size_t>(r) * 2 + j];
      if (r == rank)
        p = current[j];
      else if (holds[static_cast<std::size_t>(r)] > 0)
        ok = succeeded(cudaMemPoolImportPointer(&p, peers[static_cast<std::size_t>(r)],
                                                &all[static_cast<std::size_t>(r) * 2 + j]));
      if (!ok) p = nullptr;
    }
  ok = on_every_rank(comm, ok);
  // The old blocks closed everywhere, then freed where replaced.
  close_blocks();
  blocks = std::move(opened);
  if (!ok) close_blocks();
  on_every_rank(comm, true);
  if (grown || !ok) free_own();
  if (ok && grown) {
    std::copy(fresh, fresh + 2, own);
    own_bytes = bytes;
  } else {
    free_fresh();
  }
  return ok;
}

RankShares::RankShares(MPI_Comm comm, bool one_host, int device) : impl_(std::make_unique<Impl>()) {
  impl_->comm = comm;
  impl_->one_host = one_host;
  impl_->device = device;
  MPI_Comm_rank(comm, &impl_->rank);
  MPI_Comm_size(comm, &impl_->size);
}

RankShares::~RankShares() = default;

bool RankShares::self_search(Index& whole, const dist::DenseSearch& search,
                             const std::vector<std::int64_t>& first, std::int32_t* idx, float* dist,
                             double& setup_ms) {
  const auto t_setup = std::chrono::steady_clock::now();
  setup_ms = 0;
  Impl& m = *impl_;
  const int size = m.size, rank = m.rank;
  const std::int64_t rows = first.empty() ? 0 : first.back();
  // The same on every rank, so the same answer.
  if (size < 2 || size > RowShares::kMax || static_cast<int>(first.size()) != size + 1 ||
      rows <= 0 || rows > INT32_MAX || !m.open())
    return false;
  using pcnn::detail::IndexAccess;
  Index::Backend_& backend = IndexAccess::backend(whole);
  const std::int64_t finite = whole.finite_size();
  const auto cut = [&](int r) { return dist::cut_position(finite, rows, r, size); };
  RowShares to;
  to.count = size;
  for (int r = 0; r <= size; ++r)
    to.first[r] = static_cast<int>(first[static_cast<std::size_t>(r)]);
  const std::int64_t block_rows = first[static_cast<std::size_t>(rank) + 1] - first[rank];
  const std::size_t bytes = static_cast<std::size_t>(block_rows) * search.k * 4;

  // 1. The orders agree at the cuts (checked as a guard: replicas built from the same points
  //    order them the same), and the cloud is not stored in spatial order.
  std::vector<std::int64_t> order(static_cast<std::size_t>(size), -1);
  bool ok = true;
  collectively(m.comm, [&] {
    const DeviceScope on(m.device);
    order[0] = finite;
    for (int r = 1; r < size; ++r)
      if (cut(r) < rows) order[static_cast<std::size_t>(r)] = backend.original_index_at(cut(r));
    const Stream stream;
    ok = backend.order_breaks(to, stream.get()) >= dist::kCutBreaks;
  });
  std::vector<std::int64_t> orders(static_cast<std::size_t>(size) * size);
  check(MPI_Allgather(order.data(), size, MPI_INT64_T, orders.data(), size, MPI_INT64_T, m.comm),
        "MPI_Allgather (orders)");
  for (std::size_t i = 0; i < orders.size(); ++i)
    ok = ok && orders[i] == orders[i % static_cast<std::size_t>(size)];
  if (!on_every_rank(m.comm, ok)) return false;

  // 2. Every rank's block, big enough, open in every other rank.
  if (!m.update_blocks(bytes, block_rows)) return false;
  for (int r = 0; r < size; ++r) {
    to.idx[r] = static_cast<std::int32_t*>(m.blocks[static_cast<std::size_t>(r) * 2]);
    to.dist[r] = static_cast<float*>(m.blocks[static_cast<std::size_t>(r) * 2 + 1]);
  }
  setup_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_setup).count();

  // 3. Each rank searches its positions, writing every row into its owner's block; once every
  //    rank has (the agreement after the search), each copies its own block to the host.
  std::exception_ptr failed;
  try {
    const DeviceScope on(m.device);
    const Stream stream;
    const KnnParams params{search.k, search.exclude_self};
    backend.self_dense_positions(cut(rank), cut(rank + 1), params,
                                 search.hybrid ? search.radius : INFINITY, to, stream.get(),
                                 IndexAccess::timings(whole));
  } catch (...) {
    failed = std::current_exception();
  }
  const bool searched = on_every_rank(m.comm, !failed);
  if (searched && bytes > 0) {
    try {
      const DeviceScope on(m.device);
      PCNN_CUDA_TRY(cudaMemcpy(idx, m.own[0], bytes, cudaMemcpyDeviceToHost));
      PCNN_CUDA_TRY(cudaMemcpy(dist, m.own[1], bytes, cudaMemcpyDeviceToHost));
    } catch (...) {
      failed = std::current_exception();
    }
  }
  rethrow_on_every_rank(m.comm, failed);
  return true;
}

}  // namespace pcnn::mpi::internal
