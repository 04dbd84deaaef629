// Collectives for every op and dtype, run by mpirun at 1, 2, 3 and 4 ranks (tests/dist/CMakeLists.txt).
// Values depend on the rank so that every rank can predict the result.
#include <gtest/gtest.h>

#include <bit>
#include <cstring>
#include <vector>

#include "loom/dist/runtime.h"

namespace loom::dist {
namespace {

ProcessGroup& world() { return *Runtime::get()->world(); }

template <typename T>
std::vector<T> values(int64_t count, int rank) {
  std::vector<T> v(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) v[static_cast<size_t>(i)] = static_cast<T>(static_cast<float>((rank + 1) * (i % 13 + 1)));
  return v;
}

template <typename T>
void check_all_reduce(int64_t count) {
  ProcessGroup& g = world();
  const int n = g.size();
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::max, ReduceOp::min}) {
    std::vector<T> v = values<T>(count, g.rank());
    g.all_reduce(std::span<T>(v), op);
    for (int64_t i = 0; i < count; ++i) {
      const double base = static_cast<double>(i % 13 + 1);
      const double expected = op == ReduceOp::sum ? base * n * (n + 1) / 2 : op == ReduceOp::max ? base * n : base;
      ASSERT_EQ(static_cast<double>(static_cast<float>(v[static_cast<size_t>(i)])), expected)
          << "op " << reduce_op_name(op) << " dtype " << dtype_name(dtype_of<T>::value) << " count " << count
          << " element " << i;
    }
  }
}

TEST(Collectives, AllReduceEveryDtypeAndOpSmallAndLarge) {
  for (int64_t count : {int64_t{1}, int64_t{7}, int64_t{40001}}) {
    check_all_reduce<float>(count);
    check_all_reduce<double>(count);
    check_all_reduce<bf16>(count);
    check_all_reduce<int64_t>(count);
    check_all_reduce<int32_t>(count);
  }
}

TEST(Collectives, FloatSumsRunInRankOrder) {
  // ((x0 + x1) + x2) + x3 with values whose sum depends on the order: the result must be the
  // bits of the sequential rank-order sum (what one process accumulating micro-batches gets).
  ProcessGroup& g = world();
  const int n = g.size();
  auto x = [](int r, int i) { return (r % 2 ? -1.0f : 1.0f) * (1.0f + 1e-7f * static_cast<float>(i)) * (r == 0 ? 1e8f : 1.0f + r * 0.3f); };
  for (int64_t count : {int64_t{5}, int64_t{30000}}) {
    std::vector<float> v(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) v[static_cast<size_t>(i)] = x(g.rank(), static_cast<int>(i));
    g.all_reduce(std::span<float>(v));
    for (int64_t i = 0; i < count; ++i) {
      float expected = x(0, static_cast<int>(i));
      for (int r = 1; r < n; ++r) expected = expected + x(r, static_cast<int>(i));
      ASSERT_EQ(std::bit_cast<uint32_t>(v[static_cast<size_t>(i)]), std::bit_cast<uint32_t>(expected)) << i;
    }
  }
}

TEST(Collectives, Bf16SumsAccumulateInFp32) {
  // 1 + (n-1)·2⁻⁸: adding 2⁻⁸ to 1 in bf16 rounds back to 1 every time; accumulated in fp32 and
  // rounded once, the sum moves (n >= 3).
  ProcessGroup& g = world();
  const int n = g.size();
  std::vector<bf16> v(3, bf16(g.rank() == 0 ? 1.0f : 0.00390625f));
  g.all_reduce(std::span<bf16>(v));
  const float expected = round_to_bf16(1.0f + static_cast<float>(n - 1) * 0.00390625f);
  for (const bf16& x : v) EXPECT_EQ(static_cast<float>(x), expected);
  if (n >= 3) {
    EXPECT_GT(expected, 1.0f);
  }
}

template <typename T>
void check_reduce_scatter(int64_t chunk) {
  ProcessGroup& g = world();
  const int n = g.size();
  std::vector<T> in = values<T>(chunk * n, g.rank());
  std::vector<T> out(static_cast<size_t>(chunk));
  g.reduce_scatter(std::span<const T>(in), std::span<T>(out));
  for (int64_t i = 0; i < chunk; ++i) {
    const int64_t global = g.rank() * chunk + i;
    const double expected = static_cast<double>(global % 13 + 1) * n * (n + 1) / 2;
    ASSERT_EQ(static_cast<double>(static_cast<float>(out[static_cast<size_t>(i)])), expected)
        << dtype_name(dtype_of<T>::value) << " element " << i;
  }
}

TEST(Collectives, ReduceScatterEveryDtype) {
  for (int64_t chunk : {int64_t{0}, int64_t{1}, int64_t{1000}}) {
    check_reduce_scatter<float>(chunk);
    check_reduce_scatter<double>(chunk);
    check_reduce_scatter<bf16>(chunk);
    check_reduce_scatter<int64_t>(chunk);
    check_reduce_scatter<int32_t>(chunk);
  }
}

TEST(Collectives, ReduceScatterMaxMin) {
  ProcessGroup& g = world();
  const int n = g.size();
  std::vector<float> in(static_cast<size_t>(2 * n));
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(g.rank() * 10 + static_cast<int>(i));
  std::vector<float> mx(2), mn(2);
  g.reduce_scatter(std::span<const float>(in), std::span<float>(mx), ReduceOp::max);
  g.reduce_scatter(std::span<const float>(in), std::span<float>(mn), ReduceOp::min);
  EXPECT_EQ(mx[0], static_cast<float>((n - 1) * 10 + 2 * g.rank()));
  EXPECT_EQ(mn[1], static_cast<float>(2 * g.rank() + 1));
}

template <typename T>
void check_all_gather(int64_t chunk) {
  ProcessGroup& g = world();
  const int n = g.size();
  std::vector<T> in = values<T>(chunk, g.rank());
  std::vector<T> out(static_cast<size_t>(chunk * n));
  g.all_gather(std::span<const T>(in), std::span<T>(out));
  for (int r = 0; r < n; ++r)
    for (int64_t i = 0; i < chunk; ++i)
      ASSERT_EQ(static_cast<float>(out[static_cast<size_t>(r * chunk + i)]), static_cast<float>((r + 1) * (i % 13 + 1)))
          << dtype_name(dtype_of<T>::value) << " rank " << r << " element " << i;
}

TEST(Collectives, AllGatherEveryDtype) {
  for (int64_t chunk : {int64_t{0}, int64_t{3}, int64_t{5000}}) {
    check_all_gather<float>(chunk);
    check_all_gather<double>(chunk);
    check_all_gather<bf16>(chunk);
    check_all_gather<int64_t>(chunk);
    check_all_gather<int32_t>(chunk);
  }
}

template <typename T>
void check_all_to_all_v() {
  // Rank r sends p+1 elements valued 16·r + p to each rank p; so it receives r+1 from each.
  ProcessGroup& g = world();
  const int n = g.size(), r = g.rank();
  std::vector<int64_t> send_counts(static_cast<size_t>(n)), recv_counts(static_cast<size_t>(n), r + 1);
  std::vector<T> in;
  for (int p = 0; p < n; ++p) {
    send_counts[static_cast<size_t>(p)] = p + 1;
    for (int k = 0; k <= p; ++k) in.push_back(static_cast<T>(static_cast<float>(16 * r + p)));
  }
  std::vector<T> out(static_cast<size_t>(n * (r + 1)));
  g.all_to_all_v(std::span<const T>(in), send_counts, std::span<T>(out), recv_counts);
  for (int p = 0; p < n; ++p)
    for (int k = 0; k <= r; ++k)
      ASSERT_EQ(static_cast<float>(out[static_cast<size_t>(p * (r + 1) + k)]), static_cast<float>(16 * p + r))
          << dtype_name(dtype_of<T>::value);
}

TEST(Collectives, AllToAllVEveryDtype) {
  check_all_to_all_v<float>();
  check_all_to_all_v<double>();
  check_all_to_all_v<bf16>();
  check_all_to_all_v<int64_t>();
  check_all_to_all_v<int32_t>();
}

// Uneven counts with empty directions (an expert-parallel dispatch where most ranks send nothing
// to most others): first everyone sends only to rank 0, then only rank 0 sends, to everyone. A
// direction with nothing to move must exchange no message, or the empty one left over from the
// first exchange is taken for the second's data.
TEST(Collectives, AllToAllVWithEmptyDirections) {
  ProcessGroup& g = world();
  const int n = g.size(), r = g.rank();
  std::vector<int64_t> to_zero(static_cast<size_t>(n), 0), from_all(static_cast<size_t>(n), 0);
  to_zero[0] = r + 1;
  if (r == 0)
    for (int p = 0; p < n; ++p) from_all[static_cast<size_t>(p)] = p + 1;
  std::vector<float> in(static_cast<size_t>(r + 1), static_cast<float>(r)), out(r == 0 ? static_cast<size_t>(n * (n + 1) / 2) : 0);
  g.all_to_all_v(std::span<const float>(in), to_zero, std::span<float>(out), from_all);
  for (int p = 0, at = 0; r == 0 && p < n; ++p)
    for (int k = 0; k <= p; ++k) ASSERT_EQ(out[static_cast<size_t>(at++)], static_cast<float>(p));
  // The reverse: rank 0 sends p+1 values 100+p to each p.
  std::vector<float> back_in;
  for (int p = 0; r == 0 && p < n; ++p) back_in.insert(back_in.end(), static_cast<size_t>(p + 1), 100.f + p);
  std::vector<float> back(static_cast<size_t>(r + 1), -1.f);
  g.all_to_all_v(std::span<const float>(back_in), from_all, std::span<float>(back), to_zero);
  for (float v : back) ASSERT_EQ(v, 100.f + r);
}

template <typename T>
void check_send_recv(int64_t count) {
  ProcessGroup& g = world();
  const int n = g.size(), r = g.rank();
  if (n == 1) return;
  const int right = (r + 1) % n, left = (r - 1 + n) % n;
  std::vector<T> out = values<T>(count, r), in(static_cast<size_t>(count));
  if (r % 2 == 0) {
    g.send(std::span<const T>(out), right, 7);
    g.recv(std::span<T>(in), left, 7);
  } else {
    g.recv(std::span<T>(in), left, 7);
    g.send(std::span<const T>(out), right, 7);
  }
  const std::vector<T> expected = values<T>(count, left);
  for (int64_t i = 0; i < count; ++i)
    ASSERT_EQ(static_cast<float>(in[static_cast<size_t>(i)]), static_cast<float>(expected[static_cast<size_t>(i)]));
}

TEST(Collectives, SendRecvRingEveryDtype) {
  for (int64_t count : {int64_t{1}, int64_t{100000}}) {
    check_send_recv<float>(count);
    check_send_recv<double>(count);
    check_send_recv<bf16>(count);
    check_send_recv<int64_t>(count);
    check_send_recv<int32_t>(count);
  }
}

template <typename T>
void check_broadcast() {
  ProcessGroup& g = world();
  for (int root = 0; root < g.size(); ++root) {
    std::vector<T> v = values<T>(33, g.rank());
    g.broadcast(std::span<T>(v), root);
    const std::vector<T> expected = values<T>(33, root);
    for (size_t i = 0; i < v.size(); ++i) ASSERT_EQ(static_cast<float>(v[i]), static_cast<float>(expected[i])) << "root " << root;
  }
}

TEST(Collectives, BroadcastFromEveryRootEveryDtype) {
  check_broadcast<float>();
  check_broadcast<double>();
  check_broadcast<bf16>();
  check_broadcast<int64_t>();
  check_broadcast<int32_t>();
}

TEST(Collectives, TensorOverloadsAndScalars) {
  ProcessGroup& g = world();
  const int n = g.size();
  Tensor t = Tensor::full({2, 3}, static_cast<double>(g.rank() + 1));
  g.all_reduce(t);
  EXPECT_EQ(t.at({1, 2}), n * (n + 1) / 2.0);
  Tensor in = Tensor::full({n * 2}, 1.0), out = Tensor::zeros({2});
  g.reduce_scatter(in, out);
  EXPECT_EQ(out.at({1}), static_cast<double>(n));
  Tensor gathered = Tensor::zeros({n, 2});
  g.all_gather(Tensor::full({2}, static_cast<double>(g.rank())), gathered);
  EXPECT_EQ(gathered.at({n - 1, 1}), static_cast<double>(n - 1));
  EXPECT_EQ(g.all_reduce_scalar(0.5 * (g.rank() + 1)), 0.25 * n * (n + 1));
  EXPECT_EQ(g.all_reduce_scalar(int64_t{g.rank()}, ReduceOp::max), int64_t{n - 1});
  g.barrier();
}

TEST(Collectives, MismatchedSizesAreErrorsOnEveryRank) {
  ProcessGroup& g = world();
  std::vector<float> in(5), out(2);
  if (g.size() * 2 != 5) {
    EXPECT_THROW(g.reduce_scatter(std::span<const float>(in), std::span<float>(out)), ShapeError);
  }
  Tensor f16 = Tensor::zeros({4}, DType::f16);
  EXPECT_THROW(g.all_reduce(f16), DTypeError);
  try {
    g.all_reduce(f16);
  } catch (const DTypeError& e) {
    EXPECT_NE(std::string(e.what()).find("mesh axis 'world'"), std::string::npos) << e.what();
  }
}

TEST(Collectives, StatsCountTheBytesSent) {
  // Reduce-scatter and all-gather each send (n-1) chunks per rank: the FSDP volume model.
  ProcessGroup& g = world();
  const int n = g.size();
  g.reset_stats();
  std::vector<float> in(static_cast<size_t>(1000 * n)), out(1000);
  g.reduce_scatter(std::span<const float>(in), std::span<float>(out));
  EXPECT_EQ(g.stats().bytes_sent, int64_t{(n - 1) * 1000 * 4});
  g.all_gather(std::span<const float>(out), std::span<float>(in));
  EXPECT_EQ(g.stats().bytes_sent, int64_t{2 * (n - 1) * 1000 * 4});
  EXPECT_EQ(g.stats().bytes_received, int64_t{2 * (n - 1) * 1000 * 4});
}

}  // namespace
}  // namespace loom::dist
