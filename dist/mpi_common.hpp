// What the MPI layer's sources share: MPI calls checked, and steps that fail on every rank
// together.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <exception>
#include <string>
#include <vector>

#include "pcnn/error.hpp"
#include "pcnn/mpi.hpp"

namespace pcnn::mpi::internal {

inline void check(int rc, const char* what) {
  if (rc != MPI_SUCCESS) {
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, text, &len);
    throw error(std::string("MPI: ") + what + " failed: " + std::string(text, len));
  }
}

/// Collective: each rank's failure `e` (null: none) thrown on every rank, the failing ranks
/// their own error, the others peer_failure naming the first failing rank.
inline void rethrow_on_every_rank(MPI_Comm comm, const std::exception_ptr& e) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  const int mine = e ? rank : size;
  int first = size;
  check(MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm), "MPI_Allreduce");
  if (e) std::rethrow_exception(e);
  if (first < size) throw peer_failure("rank " + std::to_string(first) + " failed", first);
}

// Runs `f` on every rank; if it threw on any rank, every rank throws: the failing ranks their
// own error, the others peer_failure naming the first failing rank. Keeps every rank out of a
// collective that a failed rank will never enter.
template <class F>
void collectively(MPI_Comm comm, F&& f) {
  std::exception_ptr e;
  try {
    f();
  } catch (...) {
    e = std::current_exception();
  }
  rethrow_on_every_rank(comm, e);
}

/// Collective: whether `mine` holds on every rank.
inline bool on_every_rank(MPI_Comm comm, bool mine) {
  int all = mine ? 1 : 0;
  check(MPI_Allreduce(MPI_IN_PLACE, &all, 1, MPI_INT, MPI_MIN, comm), "MPI_Allreduce");
  return all != 0;
}

/// An argument of a collective call that every rank must pass alike: its name and its value in
/// 64 bits (a double's bit pattern where `real`; a digest's where `digest`).
struct Same {
  enum Kind { integer, real, digest };
  const char* name;
  std::uint64_t bits;
  Kind kind = integer;
};

/// Collective: where some argument differs between the ranks, throws invalid_argument_error
/// naming it on every rank. Collectives sized by such an argument would otherwise read or write
/// past their buffers, merge rows of different searches, or wait forever.
inline void same_on_every_rank(MPI_Comm comm, const std::string& call,
                               const std::vector<Same>& args) {
  std::vector<std::uint64_t> lo, hi;
  for (const Same& a : args) lo.push_back(a.bits);
  hi = lo;
  const int n = static_cast<int>(lo.size());
  check(MPI_Allreduce(MPI_IN_PLACE, lo.data(), n, MPI_UINT64_T, MPI_MIN, comm), "MPI_Allreduce");
  check(MPI_Allreduce(MPI_IN_PLACE, hi.data(), n, MPI_UINT64_T, MPI_MAX, comm), "MPI_Allreduce");
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (lo[i] == hi[i]) continue;
    std::string what = call + ": every rank must pass the same " + args[i].name;
    if (args[i].kind == Same::integer)
      what += " (they passed from " + std::to_string(static_cast<std::int64_t>(lo[i])) + " to " +
              std::to_string(static_cast<std::int64_t>(hi[i])) + ")";
    throw invalid_argument_error(what);
  }
}

}  // namespace pcnn::mpi::internal
