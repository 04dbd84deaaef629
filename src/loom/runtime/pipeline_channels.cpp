#include "loom/runtime/pipeline_channels.h"

#include "loom/core/trace.h"

namespace loom::runtime {

namespace {

// Tags of the pp group's messages: by receiving virtual stage and direction, so that each
// channel's messages match in micro-batch order.
int activation_tag(int to_stage) { return 2 * to_stage; }
int grad_tag(int to_stage) { return 2 * to_stage + 1; }

// The first message of a channel: rank (number of dims), dtype, dims.
constexpr size_t kHeaderSize = 2 + Shape::kMaxDims;

}  // namespace

PipelineChannels::PipelineChannels(dist::PipelineStage& stage) : stage_(stage) {}

PipelineChannels::~PipelineChannels() {
  for (auto& w : sends_) {
    try {
      w->wait();
    } catch (...) {
    }
  }
}

void PipelineChannels::send_activation(const Tensor& output, int to_stage) {
  send(output, activation_tag(to_stage), to_stage);
}

void PipelineChannels::send_grad(const Tensor& grad, int to_stage) { send(grad, grad_tag(to_stage), to_stage); }

std::optional<PipelineReceive> PipelineChannels::receive_activation(int stage, bool may_block) {
  return receive(activation_tag(stage), stage - 1, may_block);
}

std::optional<PipelineReceive> PipelineChannels::receive_grad(int stage, bool may_block) {
  return receive(grad_tag(stage), stage + 1, may_block);
}

void PipelineChannels::send(const Tensor& t, int tag, int to_stage) {
  Tensor c = t.contiguous();
  const int peer = stage_.rank_of_stage(to_stage);
  if (!announced_.contains(tag)) {
    std::vector<int64_t> header(kHeaderSize, 0);
    header[0] = c.dim();
    header[1] = static_cast<int64_t>(c.dtype());
    for (int d = 0; d < c.dim(); ++d) header[2 + static_cast<size_t>(d)] = c.size(d);
    headers_.push_back(std::move(header));
    sends_.push_back(stage_.pp_group().isend(std::span<const int64_t>(headers_.back()), peer, tag));
    announced_.insert(tag);
  }
  sends_.push_back(stage_.pp_group().isend(c, peer, tag));
}

std::optional<PipelineReceive> PipelineChannels::receive(int tag, int from_stage, bool may_block) {
  const int peer = stage_.rank_of_stage(from_stage);
  if (!agreed_.contains(tag)) {
    if (!may_block) return std::nullopt;
    std::vector<int64_t> header(kHeaderSize);
    stage_.pp_group().recv(std::span<int64_t>(header), peer, tag);
    Shape shape;
    for (int64_t d = 0; d < header[0]; ++d) shape.push_back(header[2 + static_cast<size_t>(d)]);
    agreed_[tag] = {shape, static_cast<DType>(header[1])};
  }
  const auto& [shape, dtype] = agreed_.at(tag);
  Tensor buffer = Tensor::empty(shape, dtype);
  return PipelineReceive{buffer, stage_.pp_group().irecv(buffer, peer, tag)};
}

void PipelineChannels::drop_completed_sends() {
  std::erase_if(sends_, [](const dist::WorkHandle& w) { return w->is_completed(); });
}

void PipelineChannels::wait_for_sends() {
  LOOM_TRACE("step", "pipeline send wait");
  for (auto& w : sends_) w->wait();
  sends_.clear();
  headers_.clear();
}

}  // namespace loom::runtime
