// Module tree: dotted paths, registration defaults, meta construction and materialisation,
// state_dict round trip and load errors, forward wrappers.
#include <gtest/gtest.h>

#include "loom/autograd/engine.h"
#include "loom/core/allocator.h"
#include "loom/nn/linear.h"
#include "loom/ops/reduce.h"

using namespace loom;
using namespace loom::nn;

namespace {
class TwoLayer : public Module {
 public:
  explicit TwoLayer(Device device = Device::meta()) : Module("TwoLayer") {
    layers = register_module("layers", std::make_shared<ModuleList>());
    LinearOptions o;
    o.device = device;
    o.bias = true;
    layers->append(std::make_shared<Linear>(4, 8, o));
    o.bias = false;
    layers->append(std::make_shared<Linear>(8, 2, o));
  }
  Tensor forward(const Tensor& x) {
    Tensor h = std::static_pointer_cast<Linear>(layers->at(0))->forward(x);
    return std::static_pointer_cast<Linear>(layers->at(1))->forward(h);
  }
  std::shared_ptr<ModuleList> layers;
};
}  // namespace

TEST(Module, DottedNamesAndWeightDecayDefaults) {
  TwoLayer m;
  auto params = m.named_parameters();
  ASSERT_EQ(params.size(), 3u);
  EXPECT_EQ(params[0].first, "layers.0.weight");
  EXPECT_EQ(params[1].first, "layers.0.bias");
  EXPECT_EQ(params[2].first, "layers.1.weight");
  EXPECT_TRUE(params[0].second->weight_decay);
  EXPECT_FALSE(params[1].second->weight_decay);  // biases (and 1-D) are not decayed by default
  auto modules = m.named_modules();
  EXPECT_EQ(modules[0].first, "");
  EXPECT_EQ(modules[1].first, "layers");
  EXPECT_EQ(modules[2].first, "layers.0");
  EXPECT_NE(m.find_module("layers.1"), nullptr);
  EXPECT_EQ(m.find_module("layers.2"), nullptr);
  EXPECT_EQ(m.find_parameter("layers.1.weight")->global_shape, Shape({2, 8}));
  EXPECT_EQ(m.num_parameters(), 4 * 8 + 8 + 8 * 2);
}

TEST(Module, MetaConstructionAllocatesNothingUntilMaterialised) {
  const int64_t before = memory_stats().current_bytes;
  TwoLayer m;
  EXPECT_EQ(memory_stats().current_bytes, before);
  EXPECT_FALSE(m.is_materialized());
  m.materialize(7);
  EXPECT_TRUE(m.is_materialized());
  EXPECT_GT(memory_stats().current_bytes, before);
  // Same seed and names → same values; biases start at zero.
  TwoLayer m2;
  m2.materialize(7);
  EXPECT_EQ(m.find_parameter("layers.0.weight")->tensor.to_float_vector(),
            m2.find_parameter("layers.0.weight")->tensor.to_float_vector());
  EXPECT_EQ(m.find_parameter("layers.0.bias")->tensor.to_float_vector(), std::vector<float>(8, 0.f));
  TwoLayer m3;
  m3.materialize(8);
  EXPECT_NE(m.find_parameter("layers.0.weight")->tensor.to_float_vector(),
            m3.find_parameter("layers.0.weight")->tensor.to_float_vector());
}

TEST(Module, StateDictRoundTripAndLoadErrors) {
  TwoLayer a, b;
  a.materialize(1);
  b.materialize(2);
  b.load_state_dict(a.state_dict());
  EXPECT_EQ(a.find_parameter("layers.1.weight")->tensor.to_float_vector(),
            b.find_parameter("layers.1.weight")->tensor.to_float_vector());
  auto sd = a.state_dict();
  sd.erase("layers.0.bias");
  sd["layers.1.weight"] = Tensor::zeros({3, 8});
  sd["extra.weight"] = Tensor::zeros({1});
  try {
    b.load_state_dict(sd, true, "ckpt/model.safetensors");
    FAIL();
  } catch (const CheckpointError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("cannot load ckpt/model.safetensors into the model (3 problems)"), std::string::npos) << msg;
    EXPECT_NE(msg.find("missing: layers.0.bias [8]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("shape mismatch: layers.1.weight is [3, 8] in the source but [2, 8] in the model"), std::string::npos) << msg;
    EXPECT_NE(msg.find("unexpected: extra.weight [1]"), std::string::npos) << msg;
  }
}

TEST(Module, ForwardWrappersComposeAroundTheBody) {
  TwoLayer m;
  m.materialize(3);
  std::vector<std::string> calls;
  Module* l0 = m.find_module("layers.0");
  l0->add_forward_wrapper([&](const TensorFn& inner, const std::vector<Tensor>& in) {
    calls.push_back("a-before");
    auto out = inner(in);
    calls.push_back("a-after");
    return out;
  });
  l0->add_forward_wrapper([&](const TensorFn& inner, const std::vector<Tensor>& in) {
    calls.push_back("b-before");
    auto out = inner(in);
    calls.push_back("b-after");
    return out;
  });
  Tensor y = m.forward(Tensor::ones({3, 4}));
  EXPECT_EQ(calls, (std::vector<std::string>{"b-before", "a-before", "a-after", "b-after"}));
  autograd::backward(ops::sum(y));
  EXPECT_TRUE(m.find_parameter("layers.0.weight")->tensor.grad().defined());
  m.zero_grad();
  EXPECT_FALSE(m.find_parameter("layers.0.weight")->tensor.grad().defined());
}
