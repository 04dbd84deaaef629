// The device seam (kernel_table.h): the CPU table is complete, a device without kernels is a
// DeviceError naming the op and the device, and ops reach whatever table their inputs' device
// registered — a recording table on the meta device receives the calls and the outputs stay on
// meta, which could not happen if an op called kernels::cpu directly (CPU kernels cannot read
// meta tensors).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "loom/autograd/engine.h"
#include "loom/kernels/cpu/cpu_table.h"
#include "loom/kernels/kernel_table.h"
#include "loom/ops/elementwise.h"
#include "loom/ops/linear.h"
#include "loom/ops/norm.h"
#include "testing/error_message.h"

using namespace loom;
using kernels::KernelTable;

namespace {

constexpr size_t kEntries = sizeof(KernelTable) / sizeof(void (*)());

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

Tensor meta(const Shape& shape) { return Tensor::empty(shape, DType::f32, Device::meta()); }

// ---- A meta "backend" that records which kernels it was asked for ------------------------------

std::vector<std::string>& calls() {
  static std::vector<std::string> log;
  return log;
}

Tensor meta_binary(kernels::BinaryOp, const Tensor& a, const Tensor& b, const char*) {
  calls().push_back("binary");
  EXPECT_TRUE(a.is_meta() && b.is_meta());
  return Tensor::empty(a.shape(), a.dtype(), Device::meta());
}

Tensor meta_sum_to_shape(const Tensor& x, const Shape& shape) {
  calls().push_back("sum_to_shape");
  return Tensor::empty(shape, x.dtype(), Device::meta());
}

void meta_add_(Tensor& dst, const Tensor& src, double alpha) {
  calls().push_back("add_");
  EXPECT_TRUE(dst.is_meta() && src.is_meta());
  EXPECT_EQ(alpha, 1.0);
}

void meta_gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor& c,
               double alpha, double beta) {
  calls().push_back("gemm");
  EXPECT_TRUE(a.is_meta() && b.is_meta() && c.is_meta());
  EXPECT_FALSE(trans_a);
  EXPECT_TRUE(trans_b);  // linear: x · wᵀ
  EXPECT_EQ(alpha, 1.0);
  EXPECT_EQ(beta, 0.0);
}

Tensor meta_rms_norm(const Tensor& x, const Tensor& weight, double eps, DType compute,
                     Tensor& rstd) {
  calls().push_back("rms_norm");
  EXPECT_TRUE(x.is_meta() && weight.is_meta());
  EXPECT_EQ(eps, 1e-6);
  rstd = Tensor::empty({x.numel() / x.size(x.dim() - 1)}, compute, Device::meta());
  return Tensor::empty(x.shape(), x.dtype(), Device::meta());
}

KernelTable recording_meta_table() {
  KernelTable t{};
  t.binary = &meta_binary;
  t.sum_to_shape = &meta_sum_to_shape;
  t.add_ = &meta_add_;
  t.gemm = &meta_gemm;
  t.rms_norm = &meta_rms_norm;
  return t;
}

// Registers the recording table on meta for one test; meta has no kernels again afterwards, as
// the rest of Loom expects (a stray use of a released FSDP parameter must raise).
class MetaKernels : public ::testing::Test {
 protected:
  void SetUp() override {
    calls().clear();
    kernels::register_kernels(DeviceType::meta, recording_meta_table());
  }
  void TearDown() override { kernels::unregister_kernels(DeviceType::meta); }
};

}  // namespace

TEST(KernelTable, CpuTableIsComplete) {
  const std::vector<std::string> names = kernels::kernel_names();
  ASSERT_EQ(names.size(), kEntries);
  EXPECT_EQ(std::set<std::string>(names.begin(), names.end()).size(), kEntries);  // unique
  // Every function pointer the CPU backend provides is set (read in declaration order, which is
  // kernel_names' order).
  const KernelTable cpu = kernels::cpu::kernel_table();
  void (*entries[kEntries])();
  std::memcpy(entries, &cpu, sizeof cpu);
  for (size_t i = 0; i < kEntries; ++i) EXPECT_NE(entries[i], nullptr) << "cpu kernel " << names[i];
  EXPECT_TRUE(kernels::has_kernels(DeviceType::cpu));
  EXPECT_EQ(kernels::missing_kernels(DeviceType::cpu), std::vector<std::string>{});
}

TEST(KernelTable, DeviceWithoutKernelsRaisesDeviceErrorNamingOpAndDevice) {
  ASSERT_FALSE(kernels::has_kernels(DeviceType::meta));
  const Tensor a = meta({2, 3});
  EXPECT_THROW(ops::add(a, a), DeviceError);
  const std::string msg = loom::testing::message_of([&] { ops::add(a, a); });
  EXPECT_TRUE(contains(msg, "add: ")) << msg;
  EXPECT_TRUE(contains(msg, "device meta")) << msg;
  EXPECT_TRUE(contains(msg, "materialise")) << msg;  // what to do
  const std::string norm = loom::testing::message_of([&] { ops::rms_norm(a, meta({3}), 1e-6, DType::f32); });
  EXPECT_TRUE(contains(norm, "rms_norm: ") && contains(norm, "device meta")) << norm;
}

TEST(KernelTable, CpuKernelsCannotBeUnregistered) {
  EXPECT_THROW(kernels::unregister_kernels(DeviceType::cpu), ValueError);
  EXPECT_TRUE(kernels::has_kernels(DeviceType::cpu));
}

TEST_F(MetaKernels, OpsCallTheTableOfTheirInputsDeviceAndAllocateOutputsThere) {
  Tensor sum = ops::add(meta({2, 3}), meta({2, 3}));
  EXPECT_TRUE(sum.is_meta());
  EXPECT_EQ(sum.shape(), Shape({2, 3}));

  // linear allocates its output itself, then hands it to the device's gemm.
  Tensor y = ops::linear(meta({4, 7, 3}), meta({5, 3}), Tensor());
  EXPECT_TRUE(y.is_meta());
  EXPECT_EQ(y.shape(), Shape({4, 7, 5}));

  Tensor n = ops::rms_norm(meta({4, 8}), meta({8}), 1e-6, DType::f32);
  EXPECT_TRUE(n.is_meta());
  EXPECT_EQ(n.shape(), Shape({4, 8}));
  EXPECT_EQ(calls(), (std::vector<std::string>{"binary", "gemm", "rms_norm"}));
}

TEST_F(MetaKernels, BackwardAndGradAccumulationUseTheSameTable) {
  Tensor x = meta({2, 3});
  x.set_requires_grad(true);
  Tensor y = ops::add(x, x);
  autograd::backward(y, meta({2, 3}));
  // add's backward reduces each grad to its input's shape; the two grads of x are summed by
  // the engine through the table's add_.
  EXPECT_EQ(calls(), (std::vector<std::string>{"binary", "sum_to_shape", "sum_to_shape", "add_"}));
  ASSERT_TRUE(x.grad().defined());
  EXPECT_TRUE(x.grad().is_meta());
  EXPECT_EQ(x.grad().shape(), Shape({2, 3}));
}

TEST_F(MetaKernels, NullEntriesRaiseDeviceErrorNamingTheKernelAndDevice) {
  const std::vector<std::string> missing = kernels::missing_kernels(DeviceType::meta);
  EXPECT_EQ(missing.size(), kEntries - 5);
  for (const char* given : {"binary", "sum_to_shape", "add_", "gemm", "rms_norm"})
    EXPECT_EQ(std::count(missing.begin(), missing.end(), given), 0) << given;
  EXPECT_EQ(std::count(missing.begin(), missing.end(), "unary"), 1);

  const Tensor a = meta({2, 3});
  EXPECT_THROW(ops::exp(a), DeviceError);
  const std::string msg = loom::testing::message_of([&] { ops::exp(a); });
  EXPECT_TRUE(contains(msg, "kernel 'unary'")) << msg;
  EXPECT_TRUE(contains(msg, "device meta")) << msg;
  EXPECT_TRUE(contains(msg, "kernels/meta/")) << msg;  // where to implement it
  EXPECT_EQ(calls(), std::vector<std::string>{});
}
