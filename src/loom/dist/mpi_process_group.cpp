// ProcessGroup over MPI. The collectives are written on MPI_Sendrecv, not MPI's own reductions:
// MPI picks its reduction tree by message size, which would change the floating-point sum order
// (and the result bits) with the bucket size; here every sum runs in rank order. Each algorithm
// moves (n-1)/n of the buffer per rank (pairwise-exchange reduce-scatter, ring all-gather), which
// is what MPI's bandwidth-optimal algorithms move too, and the bytes are counted exactly.
#include "loom/dist/mpi_process_group.h"

#ifdef LOOM_HAVE_MPI

#define OMPI_SKIP_MPICXX 1  // the C API only: no C++ bindings to link
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <functional>

#include "loom/core/error.h"
#include "loom/dist/comm_thread.h"

namespace loom::dist {

namespace {

MPI_Datatype mpi_type(DType d) {
  switch (d) {
    case DType::f32: return MPI_FLOAT;
    case DType::f64: return MPI_DOUBLE;
    case DType::bf16: return MPI_UINT16_T;  // moved, never reduced by MPI
    case DType::i64: return MPI_INT64_T;
    case DType::i32: return MPI_INT32_T;
    default: LOOM_THROW(DTypeError, "MPI: dtype ", dtype_name(d), " has no transport type");
  }
}

std::string mpi_error_text(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  return std::string(text, static_cast<size_t>(len));
}

void check_mpi(int code, const char* what, const std::string& axis) {
  LOOM_CHECK(code == MPI_SUCCESS, DistError, "MPI ", what, " on mesh axis '", axis, "' failed: ", mpi_error_text(code));
}

// MPI counts are int: larger transfers go in pieces of at most 2^30 elements.
constexpr int64_t kMaxPiece = int64_t{1} << 30;

// Scratch reused across calls (the same bucket sizes come back every step).
std::vector<char>& scratch(size_t bytes) {
  thread_local std::vector<char> buf;
  if (buf.size() < bytes) buf.resize(bytes);
  return buf;
}

}  // namespace

struct MpiProcessGroup::Comms {
  MPI_Comm p2p = MPI_COMM_NULL;   // user send/recv
  MPI_Comm coll = MPI_COMM_NULL;  // the collectives' own traffic: tags never clash with the user's
};

MpiProcessGroup::MpiProcessGroup(std::string axis, void* comm, std::vector<int> members, int rank)
    : ProcessGroup(std::move(axis), rank, std::move(members)), comms_(new Comms) {
  MPI_Comm c = *static_cast<MPI_Comm*>(comm);
  comms_->p2p = c;
  check_mpi(MPI_Comm_dup(c, &comms_->coll), "Comm_dup", this->axis());
}

MpiProcessGroup::~MpiProcessGroup() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  // The communication thread calls into the communicators freed below: stop it first.
  if (finalized) abandon_async_ops("MPI was finalised first; wait() on every handle before Runtime::finalize()");
  else finish_async_ops();
  if (!finalized) {
    if (comms_->coll != MPI_COMM_NULL) MPI_Comm_free(&comms_->coll);
    if (comms_->p2p != MPI_COMM_NULL && comms_->p2p != MPI_COMM_WORLD) MPI_Comm_free(&comms_->p2p);
  }
  delete comms_;
}

std::unique_ptr<MpiProcessGroup> MpiProcessGroup::world() {
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::vector<int> members(static_cast<size_t>(size));
  for (int i = 0; i < size; ++i) members[static_cast<size_t>(i)] = i;
  MPI_Comm world = MPI_COMM_WORLD;
  return std::unique_ptr<MpiProcessGroup>(new MpiProcessGroup("world", &world, std::move(members), rank));
}

std::unique_ptr<ProcessGroup> MpiProcessGroup::split(std::string axis, const std::vector<int>& members) {
  auto pos = std::find(members.begin(), members.end(), rank());
  LOOM_CHECK(!members.empty() && pos != members.end(), ValueError, "split of mesh axis '", axis, "': rank ", rank(),
             " of '", this->axis(), "' must be one of its own sub-group's members");
  for (int m : members)
    LOOM_CHECK(m >= 0 && m < size(), ValueError, "split of mesh axis '", axis, "': member ", m,
               " is outside the group of ", size());
  const int color = *std::min_element(members.begin(), members.end());
  const int key = static_cast<int>(pos - members.begin());
  MPI_Comm sub = MPI_COMM_NULL;
  check_mpi(MPI_Comm_split(comms_->p2p, color, key, &sub), "Comm_split", axis);
  int sub_size = 0;
  MPI_Comm_size(sub, &sub_size);
  LOOM_CHECK(sub_size == static_cast<int>(members.size()), DistError, "split of mesh axis '", axis, "': rank ", rank(),
             " expected a sub-group of ", members.size(), " ranks but MPI formed one of ", sub_size,
             "; the ranks disagree about the layout");
  std::vector<int> world_members;
  for (int m : members) world_members.push_back(this->members()[static_cast<size_t>(m)]);
  return std::unique_ptr<ProcessGroup>(new MpiProcessGroup(std::move(axis), &sub, std::move(world_members), key));
}

void MpiProcessGroup::sendrecv(const void* send, int64_t send_count, int dst, void* recv, int64_t recv_count, int src,
                               DType dtype) {
  const size_t es = dtype_size(dtype);
  const MPI_Datatype t = mpi_type(dtype);
  int64_t sent = 0, got = 0;
  while (sent < send_count || got < recv_count) {
    const int s = static_cast<int>(std::min(kMaxPiece, send_count - sent));
    const int r = static_cast<int>(std::min(kMaxPiece, recv_count - got));
    const char* send_at = static_cast<const char*>(send) + sent * es;
    char* recv_at = static_cast<char*>(recv) + got * es;
    // A direction that is done (or had nothing) sends or expects no message at all: each side
    // counts only its own direction, and with uneven counts (all_to_all_v) an empty message
    // nobody receives would be matched by the peer's next receive.
    const int to = sent < send_count ? dst : MPI_PROC_NULL, from = got < recv_count ? src : MPI_PROC_NULL;
    if (!CommThread::on_this_thread()) {
      check_mpi(MPI_Sendrecv(send_at, s, t, to, 0, recv_at, r, t, from, 0, comms_->coll, MPI_STATUS_IGNORE),
                "Sendrecv", axis());
    } else {
      // The same exchange, waited for without spinning (comm_thread.h "Waiting").
      MPI_Request requests[2];
      check_mpi(MPI_Irecv(recv_at, r, t, from, 0, comms_->coll, &requests[0]), "Irecv", axis());
      check_mpi(MPI_Isend(send_at, s, t, to, 0, comms_->coll, &requests[1]), "Isend", axis());
      for (int round = 0;; ++round) {
        int done = 0;
        check_mpi(MPI_Testall(2, requests, &done, MPI_STATUSES_IGNORE), "Testall", axis());
        if (done) break;
        CommThread::pause_between_tests(round);
      }
    }
    sent += s;
    got += r;
  }
  count_traffic(send_count * static_cast<int64_t>(es), recv_count * static_cast<int64_t>(es));
}

void MpiProcessGroup::do_reduce_scatter(const void* input, void* output, int64_t chunk, DType dtype, ReduceOp op) {
  const int n = size(), r = rank();
  const size_t es = dtype_size(dtype), chunk_bytes = static_cast<size_t>(chunk) * es;
  std::vector<char>& slots = scratch(chunk_bytes * static_cast<size_t>(n));
  // Pairwise exchange: at step k send my piece of rank r+k, receive rank r-k's piece of mine.
  for (int k = 1; k < n; ++k) {
    const int dst = (r + k) % n, src = (r - k + n) % n;
    sendrecv(static_cast<const char*>(input) + chunk_bytes * static_cast<size_t>(dst), chunk, dst,
             slots.data() + chunk_bytes * static_cast<size_t>(src), chunk, src, dtype);
  }
  std::vector<const void*> srcs(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i)
    srcs[static_cast<size_t>(i)] = i == r ? static_cast<const char*>(input) + chunk_bytes * static_cast<size_t>(r)
                                          : slots.data() + chunk_bytes * static_cast<size_t>(i);
  reduce_in_rank_order(srcs, output, chunk, dtype, op);
}

void MpiProcessGroup::do_all_gather(const void* input, void* output, int64_t chunk, DType dtype) {
  const int n = size(), r = rank();
  const size_t chunk_bytes = static_cast<size_t>(chunk) * dtype_size(dtype);
  char* out = static_cast<char*>(output);
  if (out + chunk_bytes * static_cast<size_t>(r) != input)
    std::memmove(out + chunk_bytes * static_cast<size_t>(r), input, chunk_bytes);
  // Ring: at step k pass on the block received at step k-1.
  const int right = (r + 1) % n, left = (r - 1 + n) % n;
  for (int k = 0; k < n - 1; ++k) {
    const int send_block = (r - k + n) % n, recv_block = (r - k - 1 + n) % n;
    sendrecv(out + chunk_bytes * static_cast<size_t>(send_block), chunk, right,
             out + chunk_bytes * static_cast<size_t>(recv_block), chunk, left, dtype);
  }
}

void MpiProcessGroup::do_all_reduce(void* data, int64_t count, DType dtype, ReduceOp op) {
  const int n = size();
  const size_t es = dtype_size(dtype);
  if (count * n <= (int64_t{1} << 14)) {
    // Small (scalars, counters): gather everything, reduce locally in rank order.
    std::vector<char> all(static_cast<size_t>(count * n) * es);
    do_all_gather(data, all.data(), count, dtype);
    std::vector<const void*> srcs(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) srcs[static_cast<size_t>(i)] = all.data() + static_cast<size_t>(count * i) * es;
    reduce_in_rank_order(srcs, data, count, dtype, op);
    return;
  }
  // Large: reduce-scatter then all-gather over a buffer padded to n equal chunks.
  const int64_t chunk = (count + n - 1) / n;
  std::vector<char> padded(static_cast<size_t>(chunk * n) * es, 0);
  std::memcpy(padded.data(), data, static_cast<size_t>(count) * es);
  std::vector<char> mine(static_cast<size_t>(chunk) * es);
  do_reduce_scatter(padded.data(), mine.data(), chunk, dtype, op);
  do_all_gather(mine.data(), padded.data(), chunk, dtype);
  std::memcpy(data, padded.data(), static_cast<size_t>(count) * es);
}

void MpiProcessGroup::do_all_to_all_v(const void* input, const std::vector<int64_t>& send_counts, void* output,
                                      const std::vector<int64_t>& recv_counts, DType dtype) {
  const int n = size(), r = rank();
  const size_t es = dtype_size(dtype);
  std::vector<int64_t> send_off(static_cast<size_t>(n) + 1, 0), recv_off(static_cast<size_t>(n) + 1, 0);
  for (int i = 0; i < n; ++i) {
    send_off[static_cast<size_t>(i) + 1] = send_off[static_cast<size_t>(i)] + send_counts[static_cast<size_t>(i)];
    recv_off[static_cast<size_t>(i) + 1] = recv_off[static_cast<size_t>(i)] + recv_counts[static_cast<size_t>(i)];
  }
  const char* in = static_cast<const char*>(input);
  char* out = static_cast<char*>(output);
  LOOM_CHECK(send_counts[static_cast<size_t>(r)] == recv_counts[static_cast<size_t>(r)], ShapeError,
             "all_to_all_v on mesh axis '", axis(), "': rank ", r, " sends itself ", send_counts[static_cast<size_t>(r)],
             " elements but expects ", recv_counts[static_cast<size_t>(r)]);
  std::memmove(out + static_cast<size_t>(recv_off[static_cast<size_t>(r)]) * es,
               in + static_cast<size_t>(send_off[static_cast<size_t>(r)]) * es,
               static_cast<size_t>(send_counts[static_cast<size_t>(r)]) * es);
  for (int k = 1; k < n; ++k) {
    const size_t dst = static_cast<size_t>((r + k) % n), src = static_cast<size_t>((r - k + n) % n);
    sendrecv(in + static_cast<size_t>(send_off[dst]) * es, send_counts[dst], static_cast<int>(dst),
             out + static_cast<size_t>(recv_off[src]) * es, recv_counts[src], static_cast<int>(src), dtype);
  }
}

void MpiProcessGroup::do_send(const void* data, int64_t count, DType dtype, int peer, int tag) {
  const size_t es = dtype_size(dtype);
  for (int64_t done = 0; done < count || (count == 0 && done == 0);) {
    const int piece = static_cast<int>(std::min(kMaxPiece, count - done));
    check_mpi(MPI_Send(static_cast<const char*>(data) + done * es, piece, mpi_type(dtype), peer, tag, comms_->p2p),
              "Send", axis());
    done += piece;
    if (count == 0) break;
  }
  count_traffic(count * static_cast<int64_t>(es), 0);
}

void MpiProcessGroup::do_recv(void* data, int64_t count, DType dtype, int peer, int tag) {
  const size_t es = dtype_size(dtype);
  for (int64_t done = 0; done < count || (count == 0 && done == 0);) {
    const int piece = static_cast<int>(std::min(kMaxPiece, count - done));
    MPI_Status status;
    check_mpi(MPI_Recv(static_cast<char*>(data) + done * es, piece, mpi_type(dtype), peer, tag, comms_->p2p, &status),
              "Recv", axis());
    int got = 0;
    MPI_Get_count(&status, mpi_type(dtype), &got);
    LOOM_CHECK(got == piece, DistError, "recv on mesh axis '", axis(), "' from rank ", peer, " (tag ", tag,
               "): expected ", piece, " elements, the sender sent ", got);
    done += piece;
    if (count == 0) break;
  }
  count_traffic(0, count * static_cast<int64_t>(es));
}

namespace {

// A posted isend/irecv: one request per piece of at most kMaxPiece elements (a zero-length
// message is one piece, as in do_send). Only the communication thread tests it.
class MpiTransfer final : public PendingTransfer {
 public:
  using Count = std::function<void(int64_t sent, int64_t received)>;
  MpiTransfer(const char* op, std::string axis, int peer, int tag, DType dtype, int64_t count, bool receives,
              Count count_bytes)
      : op_(op), axis_(std::move(axis)), peer_(peer), tag_(tag), dtype_(dtype), count_(count), receives_(receives),
        count_bytes_(std::move(count_bytes)) {}

  // Posts every piece (on the caller).
  void post(void* data, MPI_Comm comm) {
    const size_t es = dtype_size(dtype_);
    for (int64_t done = 0; done < count_ || requests_.empty();) {
      const int piece = static_cast<int>(std::min(kMaxPiece, count_ - done));
      MPI_Request request = MPI_REQUEST_NULL;
      char* at = static_cast<char*>(data) + done * es;
      const int rc = receives_ ? MPI_Irecv(at, piece, mpi_type(dtype_), peer_, tag_, comm, &request)
                               : MPI_Isend(at, piece, mpi_type(dtype_), peer_, tag_, comm, &request);
      check_mpi(rc, receives_ ? "Irecv" : "Isend", axis_);
      requests_.push_back(request);
      pieces_.push_back(piece);
      done += piece;
    }
    if (!receives_) count_bytes_(count_ * static_cast<int64_t>(es), 0);
  }

  bool test() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    LOOM_CHECK(!finalized, DistError, op_, " on mesh axis '", axis_, "' with rank ", peer_,
               " was still in flight when MPI was finalised: wait() on every handle before Runtime::finalize()");
    int flag = 0;
    std::vector<MPI_Status> statuses(requests_.size());
    const int rc = MPI_Testall(static_cast<int>(requests_.size()), requests_.data(), &flag, statuses.data());
    if (rc == MPI_ERR_IN_STATUS) {
      for (const MPI_Status& st : statuses)
        if (st.MPI_ERROR != MPI_SUCCESS && st.MPI_ERROR != MPI_ERR_PENDING) fail(st.MPI_ERROR);
    }
    if (rc != MPI_SUCCESS) fail(rc);
    if (!flag) return false;
    if (receives_) {
      for (size_t i = 0; i < statuses.size(); ++i) {
        int got = 0;
        MPI_Get_count(&statuses[i], mpi_type(dtype_), &got);
        LOOM_CHECK(got == pieces_[i], DistError, op_, " on mesh axis '", axis_, "' from rank ", peer_, " (tag ", tag_,
                   "): expected ", pieces_[i], " elements, the sender sent ", got);
      }
      count_bytes_(0, count_ * static_cast<int64_t>(dtype_size(dtype_)));
    }
    return true;
  }

 private:
  [[noreturn]] void fail(int code) const {
    LOOM_THROW(DistError, op_, " on mesh axis '", axis_, "' ", receives_ ? "from" : "to", " rank ", peer_, " (tag ",
               tag_, ", ", count_, " elements) failed: ", mpi_error_text(code),
               receives_ ? " (a message larger than the receive buffer is truncated: the sizes must agree)" : "");
  }

  const char* op_;
  std::string axis_;
  int peer_, tag_;
  DType dtype_;
  int64_t count_;
  bool receives_;
  Count count_bytes_;
  std::vector<MPI_Request> requests_;
  std::vector<int> pieces_;
};

}  // namespace

std::unique_ptr<PendingTransfer> MpiProcessGroup::do_isend(const void* data, int64_t count, DType dtype, int peer,
                                                           int tag) {
  auto t = std::make_unique<MpiTransfer>("isend", axis(), peer, tag, dtype, count, false,
                                         [this](int64_t s, int64_t r) { count_traffic(s, r); });
  t->post(const_cast<void*>(data), comms_->p2p);  // MPI_Isend takes a const buffer; post() serves both
  return t;
}

std::unique_ptr<PendingTransfer> MpiProcessGroup::do_irecv(void* data, int64_t count, DType dtype, int peer, int tag) {
  auto t = std::make_unique<MpiTransfer>("irecv", axis(), peer, tag, dtype, count, true,
                                         [this](int64_t s, int64_t r) { count_traffic(s, r); });
  t->post(data, comms_->p2p);
  return t;
}

void MpiProcessGroup::do_broadcast(void* data, int64_t count, DType dtype, int root) {
  // Binomial tree over ranks relative to the root.
  const int n = size(), v = (rank() - root + n) % n;
  int mask = 1;
  while (mask < n) {
    if (v & mask) {
      const int parent = (v - mask + root) % n;
      sendrecv(nullptr, 0, MPI_PROC_NULL, data, count, parent, dtype);
      break;
    }
    mask <<= 1;
  }
  mask >>= 1;
  for (; mask > 0; mask >>= 1)
    if (v + mask < n) sendrecv(data, count, (v + mask + root) % n, nullptr, 0, MPI_PROC_NULL, dtype);
}

void MpiProcessGroup::do_barrier() { check_mpi(MPI_Barrier(comms_->coll), "Barrier", axis()); }

}  // namespace loom::dist

#endif  // LOOM_HAVE_MPI
