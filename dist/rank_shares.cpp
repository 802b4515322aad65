// The ranks of one host writing each other's blocks of a self-search's rows (dist/rank_shares.hpp).
#include "dist/rank_shares.hpp"

#include <cuda_runtime.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <thread>
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
  char pid_ns[32] = {};  // its pid namespace: ids from SO_PEERCRED compare only within one
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

// The longest a rank waits on another rank's socket: connecting, sending, accepting, receiving;
// and the connections a listener queues (the ranks', and any other process's, which are dropped).
constexpr int kSocketMs = 10000;
constexpr int kBacklog = 128;
// The longest a rank's destructor waits for the others to close its block, and the tag of their
// messages (the index's own communicator carries no other point-to-point message).
constexpr int kCloseMs = 2000;
constexpr int kClosedTag = 7001;

// Bounds a socket's blocking calls (connect and send, receive) to kSocketMs.
bool bound_waits(int s) {
  const timeval t{kSocketMs / 1000, 0};
  return ::setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &t, sizeof t) == 0 &&
         ::setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &t, sizeof t) == 0;
}

// A socket listening under a name of this process's own (its id and the clock: a name in use
// fails the bind, and the ranks fall back). Names in the abstract namespace are visible to every
// process of the host: receive_fd takes connections only from the ranks' processes.
Fd listen_socket(int backlog, char (&name)[sizeof Card::socket]) {
  Fd s(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (s.get() < 0) return Fd();
  const auto ticks = std::chrono::steady_clock::now().time_since_epoch().count();
  std::snprintf(name, sizeof name, "pcnn-%d-%llx", static_cast<int>(::getpid()),
                static_cast<unsigned long long>(ticks));
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
  if (s.get() < 0 || !bound_waits(s.get()) ||
      ::connect(s.get(), reinterpret_cast<const sockaddr*>(&a), len) != 0)
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

// Takes one rank's descriptor before `deadline`: connections from processes other than the
// ranks' (their ids as the kernel gives them, and this user's) are dropped unread; a rank's
// message must name that rank.
bool receive_fd(int listener, const std::vector<Card>& cards,
                std::chrono::steady_clock::time_point deadline, int& from, Fd& fd) {
  using namespace std::chrono;
  for (;;) {
    const auto left = duration_cast<milliseconds>(deadline - steady_clock::now()).count();
    if (left <= 0) return false;
    pollfd p{listener, POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(left));
    if (ready < 0 && errno == EINTR) continue;
    if (ready != 1) return false;
    const Fd s(::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC));  // the listener never blocks
    if (s.get() < 0 || !bound_waits(s.get())) continue;
    ucred peer{};
    socklen_t peer_len = sizeof peer;
    if (::getsockopt(s.get(), SOL_SOCKET, SO_PEERCRED, &peer, &peer_len) != 0 ||
        peer.uid != ::getuid())
      continue;
    from = -1;
    for (std::size_t r = 0; r < cards.size(); ++r)
      if (cards[r].pid == peer.pid) from = static_cast<int>(r);
    if (from < 0) continue;
    Message m;
    const ssize_t got = ::recvmsg(s.get(), &m.msg, MSG_CMSG_CLOEXEC);
    // Whatever descriptor came is owned first, then the message judged.
    const cmsghdr* c = CMSG_FIRSTHDR(&m.msg);
    if (c && c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS &&
        c->cmsg_len >= CMSG_LEN(sizeof(int))) {
      int d = -1;
      std::memcpy(&d, CMSG_DATA(c), sizeof d);
      fd.reset(d);
    }
    return got == static_cast<ssize_t>(sizeof m.rank) && !(m.msg.msg_flags & MSG_CTRUNC) && c &&
           c->cmsg_len == CMSG_LEN(sizeof(int)) && fd.get() >= 0 && m.rank == from;
  }
}

}  // namespace

struct RankShares::Impl {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0, size = 1, device = 0;
  bool one_host = false;
  int usable = -1;        // -1: not opened yet
  int self_searches = 0;  // dense self-searches so far (the first keeps blocks: see self_search)
  cudaMemPool_t pool = nullptr;      // this rank's, exported to the others
  std::vector<cudaMemPool_t> peers;  // the others' pools, imported (null: this rank's)
  // This rank's block (indices, distances), kept between searches and grown as needed, and the
  // blocks every rank holds now opened here (2 a rank; this rank's own, or null for an empty one).
  void* own[2] = {};
  std::size_t own_bytes = 0;
  std::vector<void*> blocks;

  ~Impl() {
    const DeviceScope on(device, std::nothrow);
    const bool shared = !blocks.empty();  // alike on every rank
    close_blocks();
    if (shared) wait_for_others_to_close();
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
  // CUDA asks every importer to close a block before its owner frees it. Indexes usually go on
  // every rank together, but a destructor must not hang on a rank that has failed or goes later:
  // each rank tells every other that it has closed their blocks (an empty message) and waits up
  // to kCloseMs for theirs; past that, or with MPI finalized, the block is freed all the same (no
  // rank writes or reads a block after the search that wrote it has ended on every rank). Sends
  // and receives, unlike a barrier, may be cancelled or let go when they time out.
  void wait_for_others_to_close() noexcept {
    int finalized = 1;
    MPI_Finalized(&finalized);
    if (finalized) return;
    std::vector<MPI_Request> sent, heard;
    for (int r = 0; r < size; ++r) {
      if (r == rank) continue;
      MPI_Request q = MPI_REQUEST_NULL;
      if (MPI_Isend(nullptr, 0, MPI_BYTE, r, kClosedTag, comm, &q) == MPI_SUCCESS)
        sent.push_back(q);
      if (MPI_Irecv(nullptr, 0, MPI_BYTE, r, kClosedTag, comm, &q) == MPI_SUCCESS)
        heard.push_back(q);
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kCloseMs);
    int done = heard.empty();
    while (!done && std::chrono::steady_clock::now() < deadline &&
           MPI_Testall(static_cast<int>(heard.size()), heard.data(), &done, MPI_STATUSES_IGNORE) ==
               MPI_SUCCESS)
      if (!done) std::this_thread::sleep_for(std::chrono::microseconds(200));
    for (MPI_Request& q : heard)
      if (q != MPI_REQUEST_NULL && MPI_Cancel(&q) == MPI_SUCCESS) MPI_Wait(&q, MPI_STATUS_IGNORE);
    for (MPI_Request& q : sent) {
      int finished = 0;
      if (q != MPI_REQUEST_NULL && MPI_Test(&q, &finished, MPI_STATUS_IGNORE) == MPI_SUCCESS &&
          !finished)
        MPI_Request_free(&q);
    }
  }
  // Collective: every rank's block holds `bytes` (this rank's) or more, and is open in every
  // other rank; false on every rank where one has no room.
  bool update_blocks(std::size_t bytes, std::int64_t block_rows);
};
bool RankShares::Impl::open_pools() {
  const DeviceScope on(device, std::nothrow);
  Card mine;
  mine.pid = static_cast<std::int32_t>(::getpid());
  const ssize_t ns = ::readlink("/proc/self/ns/pid", mine.pid_ns, sizeof mine.pid_ns - 1);
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
    int fd = -1;
    ok = succeeded(cudaMemPoolExportToShareableHandle(&fd, pool, kHandle, 0));
    exported.reset(fd);
  }
  if (ok) {
    listener = listen_socket(kBacklog, mine.socket);
    ok = listener.get() >= 0;
  }
  mine.ready = ok && ns > 0 ? 1 : 0;
  std::vector<Card> cards(static_cast<std::size_t>(size));
  check(MPI_Allgather(&mine, sizeof mine, MPI_BYTE, cards.data(), sizeof mine, MPI_BYTE, comm),
        "MPI_Allgather (pools)");
  // The same cards, and so the same answer, on every rank.
  for (const Card& c : cards)
    if (!c.ready || std::strncmp(c.pid_ns, cards[0].pid_ns, sizeof c.pid_ns)) return false;
  // Every rank sends its pool to every other (the connections queue on their listeners), then
  // takes theirs.
  bool sent = true;
  for (int r = 0; r < size && sent; ++r)
    if (r != rank) sent = send_fd(cards[static_cast<std::size_t>(r)].socket, rank, exported.get());
  if (!on_every_rank(comm, sent)) return false;
  peers.assign(static_cast<std::size_t>(size), nullptr);
  bool got = true;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kSocketMs);
  for (int i = 0; i + 1 < size && got; ++i) {
    int from = -1;
    Fd fd;
    got = receive_fd(listener.get(), cards, deadline, from, fd) && from != rank &&
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

// Ranks whose block must grow allocate a new one, and every rank opens every new block before any
// old one is closed (a block is never opened at an address another block still has open here);
// blocks that did not change stay open as they are. Then every rank closes the replaced blocks,
// and once all have (importers must close a block before its owner frees it), they are freed.
bool RankShares::Impl::update_blocks(std::size_t bytes, std::int64_t block_rows) {
  const bool first = blocks.empty();
  const bool grow = first || own_bytes < bytes;
  if (on_every_rank(comm, !grow)) return true;  // every block open as it is
  const DeviceScope on(device, std::nothrow);
  // The new block, freed unless it replaces the old one.
  struct Fresh {
    void* p[2] = {};
    ~Fresh() {
      for (void* q : p)
        if (q) PCNN_CUDA_TRY_NO_THROW(cudaFree(q));
    }
  } fresh;
  const bool grown = own_bytes < bytes;
  bool room = true;
  collectively(comm, [&] {
    if (!grown) return;
    const DeviceScope scope(device);
    // The block, and the search's scratch: a pass of up to all its rows at ~8 bytes a row of
    // sort keys and slots, besides 512 MB for the rest.
    room = static_cast<double>(free_bytes()) >=
           512.0 * (1 << 20) + 8.0 * static_cast<double>(block_rows) + 2.0 * bytes;
    const Stream stream;
    for (void*& p : fresh.p) {
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
  void* const current[2] = {grown ? fresh.p[0] : own[0], grown ? fresh.p[1] : own[1]};
  // Per rank: whether its block changed, and whether it holds one (an empty block, of no rows,
  // is not allocated; -1: it could not be exported).
  int mine_state[2] = {grown || first ? 1 : 0, room && current[0] ? 1 : 0};
  cudaMemPoolPtrExportData mine[2] = {};
  for (int j = 0; j < 2 && mine_state[1] > 0; ++j)
    if (!succeeded(cudaMemPoolExportPointer(&mine[j], current[j]))) mine_state[1] = -1;
  std::vector<cudaMemPoolPtrExportData> all(static_cast<std::size_t>(size) * 2);
  std::vector<int> states(static_cast<std::size_t>(size) * 2);
  check(MPI_Allgather(mine, sizeof mine, MPI_BYTE, all.data(), sizeof mine, MPI_BYTE, comm),
        "MPI_Allgather (blocks)");
  check(MPI_Allgather(mine_state, 2, MPI_INT, states.data(), 2, MPI_INT, comm),
        "MPI_Allgather (blocks held)");
  std::vector<void*> opened(static_cast<std::size_t>(size) * 2, nullptr);
  bool ok = on_every_rank(comm, room && mine_state[1] >= 0);
  for (int r = 0; r < size && ok; ++r)
    for (int j = 0; j < 2 && ok; ++j) {
      const std::size_t at = static_cast<std::size_t>(r) * 2 + j;
      void*& p = opened[at];
      if (r == rank) {
        p = current[j];
      } else if (!states[static_cast<std::size_t>(r) * 2] && at < blocks.size()) {
        p = std::exchange(blocks[at], nullptr);  // unchanged: kept open, not closed below
      } else if (states[static_cast<std::size_t>(r) * 2 + 1] > 0) {
        ok = succeeded(cudaMemPoolImportPointer(&p, peers[static_cast<std::size_t>(r)], &all[at]));
        if (!ok) p = nullptr;
      }
    }
  ok = on_every_rank(comm, ok);
  close_blocks();  // the replaced ones (and, where this failed, every one)
  blocks = std::move(opened);
  if (!ok) close_blocks();
  on_every_rank(comm, true);  // every importer has closed what it replaced or gave up
  if (!ok) {
    free_own();
    return false;
  }
  if (grown) {
    free_own();
    for (int j = 0; j < 2; ++j) own[j] = std::exchange(fresh.p[j], nullptr);
    own_bytes = bytes;
  }
  return true;
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
  // The same on every rank, so the same answer. An index's first dense self-search keeps the
  // blocks: opening the pools across the processes costs ~40 ms however small the cloud (47 ms
  // at 20M points, 64-69 ms at 200M, two H200s), which one search does not earn back (200M in
  // random order: 273-299 ms cut, 285-294 by blocks), and a one-shot command never searches again.
  if (size < 2 || size > RowShares::kMax || static_cast<int>(first.size()) != size + 1 ||
      rows <= 0 || rows > INT32_MAX || (m.self_searches < 2 && ++m.self_searches < 2))
    return false;
  using pcnn::detail::IndexAccess;
  Index::Backend_& backend = IndexAccess::backend(whole);
  const std::int64_t finite = whole.finite_size();
  const auto cut = [&](int r) { return dist::cut_position(finite, rows, r, size); };
  RowShares to = dist::row_shares(first);
  const std::int64_t block_rows = first[static_cast<std::size_t>(rank) + 1] - first[rank];
  const std::size_t bytes = static_cast<std::size_t>(block_rows) * search.k * 4;

  // 1. The orders agree at the cuts (checked as a guard: replicas built from the same points
  //    order them the same), and the cloud is not stored in spatial order.
  std::vector<std::int64_t> order;
  bool ok = true;
  collectively(m.comm, [&] {
    const DeviceScope on(m.device);
    order = dist::order_at_cuts(whole, rows, size);
    ok = !dist::stored_in_spatial_order(whole, to);
  });
  std::vector<std::int64_t> orders(static_cast<std::size_t>(size) * size);
  check(MPI_Allgather(order.data(), size, MPI_INT64_T, orders.data(), size, MPI_INT64_T, m.comm),
        "MPI_Allgather (orders)");
  for (std::size_t i = 0; i < orders.size(); ++i)
    ok = ok && orders[i] == orders[i % static_cast<std::size_t>(size)];
  if (!on_every_rank(m.comm, ok) || !m.open()) return false;

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
