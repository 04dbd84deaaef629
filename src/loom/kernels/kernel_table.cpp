#include "loom/kernels/kernel_table.h"

#include <array>
#include <cstddef>
#include <iterator>
#include <mutex>

#include "loom/kernels/cpu/cpu_table.h"

namespace loom::kernels {

namespace {

// Every entry of KernelTable, once, in declaration order. The static_assert below fails when an
// entry is added to the struct and not here.
#define LOOM_KERNEL_ENTRIES(X)                                                                  \
  X(binary) X(unary) X(affine) X(add_) X(scale_) X(gelu) X(gelu_backward) X(silu_backward)     \
  X(sigmoid_backward) X(swiglu) X(swiglu_backward) X(swiglu_packed) X(swiglu_packed_backward)  \
  X(sum) X(sum_to_shape) X(max_value)                                                           \
  X(embedding) X(embedding_backward) X(gather) X(scatter) X(index_add) X(index_select) X(topk) \
  X(gemm) X(matmul_2d) X(bmm)                                                                   \
  X(attention_forward) X(attention_backward) X(attention_merge) X(attention_decode)             \
  X(cross_entropy_row_weights) X(cross_entropy_forward) X(cross_entropy_backward)               \
  X(linear_cross_entropy_forward) X(linear_cross_entropy_backward)                              \
  X(rms_norm) X(rms_norm_backward) X(layer_norm) X(layer_norm_backward) X(rope)                 \
  X(softmax_last) X(softmax_last_backward)                                                      \
  X(moe_routing) X(moe_permute_rows) X(moe_permute_backward) X(moe_unpermute)                   \
  X(moe_unpermute_backward) X(grouped_gemm) X(grouped_gemm_backward)                            \
  X(sum_squares) X(adamw_update) X(adamw_update_is_finite) X(copy_master_to_param)              \
  X(muon_momentum) X(muon_orthogonalize) X(muon_apply_is_finite) X(muon_apply)

struct EntryInfo {
  const char* name;
  size_t offset;
};

#define LOOM_ENTRY_INFO(e) EntryInfo{#e, offsetof(KernelTable, e)},
constexpr EntryInfo kEntries[] = {LOOM_KERNEL_ENTRIES(LOOM_ENTRY_INFO)};
#undef LOOM_ENTRY_INFO

static_assert(sizeof(KernelTable) == std::size(kEntries) * sizeof(void (*)()),
              "KernelTable has an entry that LOOM_KERNEL_ENTRIES does not list");

constexpr size_t kDeviceTypes = 3;  // cpu, cuda, meta

size_t slot(DeviceType type) { return static_cast<size_t>(type); }

const char* device_type_name(DeviceType type) {
  switch (type) {
    case DeviceType::cpu: return "cpu";
    case DeviceType::cuda: return "cuda";
    case DeviceType::meta: return "meta";
  }
  return "unknown";
}

template <auto Entry>
const char* entry_name() {
  static const KernelTable probe{};
  const auto offset = static_cast<size_t>(reinterpret_cast<const char*>(&(probe.*Entry)) -
                                          reinterpret_cast<const char*>(&probe));
  for (const EntryInfo& e : kEntries)
    if (e.offset == offset) return e.name;
  return "?";
}

[[noreturn]] void throw_missing_kernel(DeviceType type, const char* kernel) {
  const char* dev = device_type_name(type);
  LOOM_THROW(DeviceError, "kernel '", kernel, "' is not implemented for device ", dev,
             ": the ", dev, " kernel table registered with kernels::register_kernels leaves it "
             "null; implement it in kernels/", dev, "/ or run this op on cpu tensors");
}

// What a null entry of a registered table becomes: a kernel with the entry's signature that
// raises DeviceError naming itself and the device.
template <auto Entry, DeviceType Type>
struct MissingKernel;

template <typename R, typename... Args, R (*KernelTable::*Entry)(Args...), DeviceType Type>
struct MissingKernel<Entry, Type> {
  static R call(Args...) { throw_missing_kernel(Type, entry_name<Entry>()); }
};

template <DeviceType Type>
std::vector<std::string> fill_missing(KernelTable& t) {
  std::vector<std::string> missing;
#define LOOM_FILL_MISSING(e)                                   \
  if (t.e == nullptr) {                                        \
    t.e = &MissingKernel<&KernelTable::e, Type>::call;         \
    missing.emplace_back(#e);                                  \
  }
  LOOM_KERNEL_ENTRIES(LOOM_FILL_MISSING)
#undef LOOM_FILL_MISSING
  return missing;
}

std::vector<std::string> fill_missing(DeviceType type, KernelTable& t) {
  switch (type) {
    case DeviceType::cpu: return fill_missing<DeviceType::cpu>(t);
    case DeviceType::cuda: return fill_missing<DeviceType::cuda>(t);
    case DeviceType::meta: return fill_missing<DeviceType::meta>(t);
  }
  LOOM_ASSERT(false, "unknown device type ", static_cast<int>(type));
  return {};
}

struct Registry {
  std::array<KernelTable, kDeviceTypes> tables{};
  std::array<bool, kDeviceTypes> registered{};
  std::array<std::vector<std::string>, kDeviceTypes> missing;
  std::mutex write;

  Registry() { install(DeviceType::cpu, cpu::kernel_table()); }

  void install(DeviceType type, const KernelTable& kernels) {
    KernelTable t = kernels;
    std::vector<std::string> m = fill_missing(type, t);
    std::lock_guard<std::mutex> lock(write);
    tables[slot(type)] = t;
    missing[slot(type)] = std::move(m);
    registered[slot(type)] = true;
  }
};

// Built on first use (thread-safe), with the CPU kernels already in it.
Registry& registry() {
  static Registry r;
  return r;
}

// Out of line, so the lookup itself stays a few instructions.
[[noreturn]] __attribute__((noinline)) void throw_no_kernels(const Device& device, const char* op) {
  LOOM_THROW(DeviceError, op, ": no kernels are registered for device ", device.str(),
             device.is_meta()
                 ? " (meta tensors have shapes but no data: materialise the model on cpu before "
                   "computing on it)"
                 : " in this build (only cpu kernels are built; move the tensors to cpu, or "
                   "register that device's kernels with kernels::register_kernels)");
}

}  // namespace

const KernelTable& table(const Device& device, const char* op) {
  Registry& r = registry();
  if (!r.registered[slot(device.type)]) [[unlikely]] throw_no_kernels(device, op);
  return r.tables[slot(device.type)];
}

void register_kernels(DeviceType type, const KernelTable& kernels) {
  registry().install(type, kernels);
}

void unregister_kernels(DeviceType type) {
  LOOM_CHECK(type != DeviceType::cpu, ValueError,
             "unregister_kernels: the cpu kernels cannot be unregistered (every host-side "
             "computation uses them); register a replacement table instead");
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.write);
  r.registered[slot(type)] = false;
  r.tables[slot(type)] = KernelTable{};
  r.missing[slot(type)].clear();
}

bool has_kernels(DeviceType type) { return registry().registered[slot(type)]; }

std::vector<std::string> missing_kernels(DeviceType type) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.write);
  return r.missing[slot(type)];
}

std::vector<std::string> kernel_names() {
  std::vector<std::string> names;
  for (const EntryInfo& e : kEntries) names.emplace_back(e.name);
  return names;
}

}  // namespace loom::kernels
