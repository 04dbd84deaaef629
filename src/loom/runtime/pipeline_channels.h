// Point to point between pipeline stages: the transport half of the pipeline executor
// (pipeline_schedule.h has the other).
//
// Activations go from virtual stage s to s + 1 and their grads back, over the "pp" group, tagged
// by the receiving stage and direction, so the messages of one channel match in micro-batch
// order. The first message of each channel carries the shape and dtype (agreed once, kept for the
// run); the receiver allocates what the sender sends, so a channel can never overrun its buffer.
//
// Sends are non-blocking (isend) and never waited on before the step ends: a rank that blocked
// on its send until the peer reached the matching receive could wait for a peer that waits for
// it (tests/runtime/test_pipeline_order.cpp replays that rule and finds the cycle under
// interleaving), while a send in flight only needs the peer to get there eventually, which the
// data dependencies guarantee. On CPU the transfers are memcpys through shared memory (or
// loopback TCP) driven by MPI's progress engine in the comm thread.
#pragma once

#include <deque>
#include <map>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "loom/core/tensor.h"
#include "loom/dist/pipeline.h"
#include "loom/dist/work.h"

namespace loom::runtime {

// A posted receive: its buffer is valid once work completes.
struct PipelineReceive {
  Tensor buffer;
  dist::WorkHandle work;
};

class PipelineChannels {
 public:
  explicit PipelineChannels(dist::PipelineStage& stage);
  // Every send must end before the process group does.
  ~PipelineChannels();
  PipelineChannels(const PipelineChannels&) = delete;
  PipelineChannels& operator=(const PipelineChannels&) = delete;

  // A chunk's output to the virtual stage that runs on it.
  void send_activation(const Tensor& output, int to_stage);
  // The grad of `to_stage`'s output back to it.
  void send_grad(const Tensor& grad, int to_stage);
  // Post the receive of the activation virtual stage `stage` runs on, or of the grad of its
  // output. A channel's first message (its shape and dtype) is read blocking: before it was
  // agreed and with may_block false, nothing is posted and nullopt comes back.
  std::optional<PipelineReceive> receive_activation(int stage, bool may_block);
  std::optional<PipelineReceive> receive_grad(int stage, bool may_block);

  // Forgets the sends that completed (their tensors are released as they complete).
  void drop_completed_sends();
  // Waits for every send in flight: the end of a step.
  void wait_for_sends();

 private:
  void send(const Tensor& t, int tag, int to_stage);
  std::optional<PipelineReceive> receive(int tag, int from_stage, bool may_block);

  dist::PipelineStage& stage_;
  std::map<int, std::pair<Shape, DType>> agreed_;  // tag -> shape and dtype
  std::set<int> announced_;                        // tags whose header was sent
  std::deque<std::vector<int64_t>> headers_;       // header buffers in flight
  std::vector<dist::WorkHandle> sends_;            // sends not yet waited on
};

}  // namespace loom::runtime
