// The asynchronous ops of the MPI group, run by mpirun at 1, 2, 3 and 4 ranks: each gives the bits
// of its blocking form, several can be in flight on one group and on two, point-to-point rings,
// errors reach wait(), byte counts, and destroying a group with ops in flight.
#include <gtest/gtest.h>

#include <bit>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "loom/dist/runtime.h"

namespace loom::dist {
namespace {

ProcessGroup& world() { return *Runtime::get()->world(); }

// Values whose float sum depends on the order of the ranks (as in FloatSumsRunInRankOrder).
std::vector<float> order_sensitive(int64_t count, int rank) {
  std::vector<float> v(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i)
    v[static_cast<size_t>(i)] = (rank % 2 ? -1.0f : 1.0f) * (1.0f + 1e-7f * static_cast<float>(i)) *
                                (rank == 0 ? 1e8f : 1.0f + static_cast<float>(rank) * 0.3f);
  return v;
}

template <typename T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

TEST(AsyncCollectives, EveryOpGivesTheBitsOfItsBlockingForm) {
  ProcessGroup& g = world();
  const int n = g.size(), r = g.rank();
  for (int64_t count : {int64_t{5}, int64_t{30000}}) {  // both all-reduce algorithms
    std::vector<float> blocking = order_sensitive(count, r), async = blocking;
    g.all_reduce(std::span<float>(blocking));
    g.iall_reduce(std::span<float>(async))->wait();
    EXPECT_TRUE(same_bits(blocking, async)) << "all_reduce of " << count;
  }
  const int64_t chunk = 777;
  std::vector<float> in = order_sensitive(chunk * n, r), rs_b(chunk), rs_a(chunk);
  g.reduce_scatter(std::span<const float>(in), std::span<float>(rs_b));
  g.ireduce_scatter(std::span<const float>(in), std::span<float>(rs_a))->wait();
  EXPECT_TRUE(same_bits(rs_b, rs_a));
  std::vector<bf16> mine(static_cast<size_t>(chunk), bf16(static_cast<float>(r) + 0.5f)), ag_b(in.size()), ag_a(in.size());
  g.all_gather(std::span<const bf16>(mine), std::span<bf16>(ag_b));
  g.iall_gather(std::span<const bf16>(mine), std::span<bf16>(ag_a))->wait();
  EXPECT_TRUE(same_bits(ag_b, ag_a));
  for (int p = 0; p < n; ++p) EXPECT_EQ(static_cast<float>(ag_a[static_cast<size_t>(p * chunk)]), p + 0.5f);
  // all_to_all_v: rank r sends p+1 elements valued 16·r + p to each p.
  std::vector<int64_t> send_counts(static_cast<size_t>(n)), recv_counts(static_cast<size_t>(n), r + 1);
  std::vector<double> a2a_in;
  for (int p = 0; p < n; ++p) {
    send_counts[static_cast<size_t>(p)] = p + 1;
    for (int k = 0; k <= p; ++k) a2a_in.push_back(16.0 * r + p);
  }
  std::vector<double> a2a_out(static_cast<size_t>(n * (r + 1)));
  g.iall_to_all_v(std::span<const double>(a2a_in), send_counts, std::span<double>(a2a_out), recv_counts)->wait();
  for (int p = 0; p < n; ++p) EXPECT_EQ(a2a_out[static_cast<size_t>(p * (r + 1))], 16.0 * p + r);
  for (int root = 0; root < n; ++root) {
    std::vector<int64_t> b(9, r * 100 + 7);
    g.ibroadcast(std::span<int64_t>(b), root)->wait();
    EXPECT_EQ(b[8], root * 100 + 7) << "root " << root;
  }
  Tensor t = Tensor::full({3, 2}, static_cast<double>(r + 1));
  g.iall_reduce(t)->wait();
  EXPECT_EQ(t.at({2, 1}), n * (n + 1) / 2.0);
}

TEST(AsyncCollectives, SeveralInFlightOnOneGroupRunInIssueOrder) {
  // Eight ops started before any wait, a blocking op among them (it runs after the ones issued
  // before it), then waited in reverse order.
  ProcessGroup& g = world();
  const int n = g.size(), r = g.rank();
  constexpr int kOps = 8;
  std::vector<std::vector<float>> bufs(kOps), outs(kOps);
  std::vector<WorkHandle> works;
  std::vector<float> blocking(1000, static_cast<float>(r));
  for (int k = 0; k < kOps; ++k) {
    if (k == 4) g.all_reduce(std::span<float>(blocking));
    bufs[static_cast<size_t>(k)].assign(static_cast<size_t>(20000 + k), static_cast<float>(k * 10 + r));
    if (k % 2 == 0) {
      works.push_back(g.iall_reduce(std::span<float>(bufs[static_cast<size_t>(k)])));
    } else {
      outs[static_cast<size_t>(k)].resize(bufs[static_cast<size_t>(k)].size() * static_cast<size_t>(n));
      works.push_back(g.iall_gather(std::span<const float>(bufs[static_cast<size_t>(k)]),
                                    std::span<float>(outs[static_cast<size_t>(k)])));
    }
  }
  EXPECT_EQ(blocking[999], static_cast<float>(n * (n - 1) / 2));
  for (int k = kOps - 1; k >= 0; --k) {
    works[static_cast<size_t>(k)]->wait();
    EXPECT_TRUE(works[static_cast<size_t>(k)]->is_completed());
    if (k % 2 == 0) {
      EXPECT_EQ(bufs[static_cast<size_t>(k)].back(), static_cast<float>(n * k * 10 + n * (n - 1) / 2)) << k;
    } else {
      const auto& o = outs[static_cast<size_t>(k)];
      const size_t per = bufs[static_cast<size_t>(k)].size();
      for (int p = 0; p < n; ++p) EXPECT_EQ(o[static_cast<size_t>(p) * per + per - 1], static_cast<float>(k * 10 + p)) << k;
    }
  }
}

TEST(AsyncCollectives, TwoGroupsInFlightAtOnce) {
  // A second group over the same ranks has a thread of its own; ops on both overlap.
  ProcessGroup& g = world();
  const int n = g.size(), r = g.rank();
  std::vector<int> all(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) all[static_cast<size_t>(i)] = i;
  std::unique_ptr<ProcessGroup> other = g.split("second", all);
  const int64_t count = 50000;
  std::vector<float> a(static_cast<size_t>(count), 1.0f + r), b(static_cast<size_t>(count), 2.0f * r);
  std::vector<float> ga(static_cast<size_t>(count * n)), gb(static_cast<size_t>(count * n));
  std::vector<WorkHandle> works;
  for (int rep = 0; rep < 3; ++rep) {
    works.push_back(g.iall_gather(std::span<const float>(a), std::span<float>(ga)));
    works.push_back(other->iall_gather(std::span<const float>(b), std::span<float>(gb)));
    works.push_back(other->iall_reduce(std::span<float>(b)));  // after its gather, in issue order
  }
  for (auto& w : works) w->wait();
  for (int p = 0; p < n; ++p) {
    EXPECT_EQ(ga[static_cast<size_t>(p * count)], 1.0f + p);
  }
  // b went through three all-reduces (each after a gather of the value before it).
  const float s = static_cast<float>(n * (n - 1));  // Σ 2p
  EXPECT_EQ(b[0], s * static_cast<float>(n * n));
  EXPECT_EQ(gb[static_cast<size_t>((n - 1) * count)], s * static_cast<float>(n));  // the third gather saw b after two
}

TEST(AsyncCollectives, IsendIrecvRing) {
  ProcessGroup& g = world();
  const int n = g.size(), r = g.rank();
  if (n == 1) return;
  const int right = (r + 1) % n, left = (r - 1 + n) % n;
  for (int64_t count : {int64_t{0}, int64_t{3}, int64_t{1} << 20}) {  // empty, eager and rendezvous sizes
    std::vector<float> out(static_cast<size_t>(count)), in(static_cast<size_t>(count), -1.0f);
    for (int64_t i = 0; i < count; ++i) out[static_cast<size_t>(i)] = static_cast<float>(r * 1000 + i % 997);
    // Every rank posts both before waiting on either: blocking sends in this order would deadlock.
    WorkHandle send = g.isend(std::span<const float>(out), right, 5);
    WorkHandle recv = g.irecv(std::span<float>(in), left, 5);
    recv->wait();
    send->wait();
    for (int64_t i = 0; i < count; ++i)
      ASSERT_EQ(in[static_cast<size_t>(i)], static_cast<float>(left * 1000 + i % 997)) << "count " << count;
  }
  // Several tags in flight, received in the opposite order they were sent.
  Tensor t0 = Tensor::full({4}, 10.0 + r), t1 = Tensor::full({4}, 20.0 + r);
  Tensor got0 = Tensor::zeros({4}), got1 = Tensor::zeros({4});
  WorkHandle rx1 = g.irecv(got1, left, 1), rx0 = g.irecv(got0, left, 0);
  WorkHandle tx0 = g.isend(t0, right, 0), tx1 = g.isend(t1, right, 1);
  for (auto* w : {&rx1, &rx0, &tx0, &tx1}) (*w)->wait();
  EXPECT_EQ(got0.at({3}), 10.0 + left);
  EXPECT_EQ(got1.at({0}), 20.0 + left);
}

TEST(AsyncCollectives, ErrorsOnTheCommThreadReachWait) {
  ProcessGroup& g = world();
  const int n = g.size(), r = g.rank();
  if (n == 1) return;
  // Every rank asks to send itself 1 element but to receive 2 from itself: the backend refuses
  // on the communication thread before moving anything, so wait() throws on every rank.
  std::vector<int64_t> send_counts(static_cast<size_t>(n), 1), recv_counts(static_cast<size_t>(n), 1);
  recv_counts[static_cast<size_t>(r)] = 2;
  std::vector<float> in(static_cast<size_t>(n)), out(static_cast<size_t>(n + 1));
  WorkHandle bad = g.iall_to_all_v(std::span<const float>(in), send_counts, std::span<float>(out), recv_counts);
  try {
    bad->wait();
    ADD_FAILURE() << "wait() must rethrow the all_to_all_v error";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("sends itself 1 elements but expects 2"), std::string::npos) << e.what();
  }
  // The group still works afterwards.
  EXPECT_EQ(g.all_reduce_scalar(1.0), static_cast<double>(n));
  // A receive that expects more than was sent: the receiver's wait() says so.
  if (r == 0) {
    std::vector<int32_t> five(5, 7);
    g.isend(std::span<const int32_t>(five), 1, 9)->wait();
  } else if (r == 1) {
    std::vector<int32_t> eight(8);
    try {
      g.irecv(std::span<int32_t>(eight), 0, 9)->wait();
      ADD_FAILURE() << "a short message must fail the irecv";
    } catch (const DistError& e) {
      const std::string expected = "irecv on mesh axis 'world' from rank 0 (tag 9): expected 8 elements, the sender sent 5";
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    }
  }
  g.barrier();
}

TEST(AsyncCollectives, StatsCountAsyncTrafficLikeBlocking) {
  ProcessGroup& g = world();
  const int n = g.size();
  g.reset_stats();
  std::vector<float> in(static_cast<size_t>(1000 * n)), out(1000);
  WorkHandle rs = g.ireduce_scatter(std::span<const float>(in), std::span<float>(out));
  rs->wait();
  WorkHandle ag = g.iall_gather(std::span<const float>(out), std::span<float>(in));
  ag->wait();
  EXPECT_EQ(g.stats().bytes_sent, int64_t{2 * (n - 1) * 1000 * 4});
  EXPECT_EQ(g.stats().bytes_received, int64_t{2 * (n - 1) * 1000 * 4});
  EXPECT_EQ(g.stats().num_collectives, n > 1 ? 2 : 0);
  if (n > 1) {
    const int r = g.rank();
    std::vector<double> x(10, 1.0), y(10);
    WorkHandle tx = g.isend(std::span<const double>(x), (r + 1) % n), rx = g.irecv(std::span<double>(y), (r - 1 + n) % n);
    tx->wait();
    rx->wait();
    EXPECT_EQ(g.stats().bytes_sent, int64_t{2 * (n - 1) * 1000 * 4 + 80});
    EXPECT_EQ(g.stats().bytes_received, int64_t{2 * (n - 1) * 1000 * 4 + 80});
  }
}

TEST(AsyncCollectives, HandlesCompleteWithoutWaitAndGroupsWaitWhenDestroyed) {
  ProcessGroup& g = world();
  const int n = g.size(), r = g.rank();
  std::vector<float> v(4000, 1.0f + r);
  WorkHandle w = g.iall_reduce(std::span<float>(v));
  for (int spins = 0; !w->is_completed() && spins < 60000; ++spins)
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  EXPECT_TRUE(w->is_completed());
  EXPECT_EQ(v[0], static_cast<float>(n * (n + 1) / 2));
  // A group destroyed with ops still queued finishes them first.
  std::vector<int> all(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) all[static_cast<size_t>(i)] = i;
  std::unique_ptr<ProcessGroup> scratch = g.split("scratch", all);
  std::vector<double> mine(30000, r + 0.25), gathered(static_cast<size_t>(30000 * n));
  std::vector<WorkHandle> works;
  for (int k = 0; k < 4; ++k)
    works.push_back(scratch->iall_gather(std::span<const double>(mine), std::span<double>(gathered)));
  scratch.reset();
  for (auto& x : works) {
    EXPECT_TRUE(x->is_completed());
    EXPECT_NO_THROW(x->wait());
  }
  for (int p = 0; p < n; ++p) EXPECT_EQ(gathered[static_cast<size_t>(p * 30000 + 29999)], p + 0.25);
}

}  // namespace
}  // namespace loom::dist
