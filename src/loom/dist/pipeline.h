// Pipeline parallelism (spec parallel_training.md §4; MindFormers' pipeline_parallel.py): the
// decoder layers are split over the pp ranks of the mesh axis "pp", and each rank runs only its
// part of every micro-batch, passing the hidden state forward and its grad back to the neighbouring
// stage. This file is the stage split, applied to a built CausalLM from outside; the order in which
// the stages run their micro-batches is the pipeline schedule's (runtime/pipeline_order.h,
// runtime/pipeline_schedule.h).
//
// Virtual stages. With pipeline_parallel = p and pipeline_parallel_interleave_num = v the layers
// form p·v consecutive virtual stages; virtual stage s lives on pp rank s % p as its chunk s / p,
// so rank i holds chunks i, p + i, 2p + i, ... (Megatron's interleaving). Which layers each
// virtual stage gets is resolved once from pipeline_parallel_layers_per_stage ('auto': L/(p·v)
// each; or the explicit list, uneven allowed) by the configuration (config::plan_pipeline); the
// trainer hands it over as a PipelineLayout.
//
//   virtual stage 0        the embedding, then its layers
//   virtual stage p·v - 1  its layers, then the MTP layers (DeepSeek-V3), the final norm, the
//                          output head and the loss
//   every other stage      its layers only
//
// What a rank holds. The model is built on the meta device, so nothing is allocated before the
// split: apply_pipeline() drops every module the rank does not run (CausalLM::keep_parts), and
// only the kept parameters are materialised. Names and layer indices stay global
// ("decoder.layers.5" is layer 5 on whichever rank holds it), so initialisation by global index
// gives every parameter its one-process value, and the sharded checkpoint writes each stage's
// layers under their global names: a checkpoint saved under one pp/v/layer list (or one
// process) loads under any other.
//
// Shared embedding. When the output head is tied to the embedding (tie_word_embeddings) or MTP
// embeds its shifted inputs, the last stage needs the embedding matrix too. Both the first and
// the last stage keep one copy of `embedding.word_embeddings.weight` with the same initial
// values; after the step's last backward each copy's grad is replaced by the sum of the two
// (reduce_shared_grads, over a group of those two ranks), so both take the same update and stay
// equal, as the reference's embedding group does. The grad norm counts the weight once: its
// replica factor is 2 (shared_copies).
//
// Activations between stages are [B, S, D] (under tensor parallelism the local [B, S/t, D]
// sequence piece: tp rank k of one stage talks to tp rank k of the next). The schedule sends them
// and their grads point to point over the "pp" group; the shape and dtype are agreed once, on the
// first micro-batch, and reused (a data loader gives every micro-batch the same shape).
//
// Everything else works per stage, from outside as before: tensor parallelism is applied first
// (the split keeps its wrapped modules), the memory policy wraps the kept layers by their global
// indices, FSDP/HSDP shards each stage's parameters over its own fsdp group (with
// reshard_after_forward_policy 'default' meaning never under pp, so the parameters stay gathered
// across the micro-batches in flight). Loss scaling stays ParallelModel::backward_scale,
// 1/(world/(pp·tp)): the pp ranks of one data shard train the same samples and the loss is
// formed once, on the last stage.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "loom/dist/device_mesh.h"
#include "loom/nn/module.h"

namespace loom::dist {

// The layers of every virtual stage, as the configuration resolved them.
struct PipelineLayout {
  int pipeline_parallel = 1;  // p
  int chunks = 1;             // v: chunks per rank (pipeline_parallel_interleave_num)
  // Inclusive [first, last] decoder layer indices of virtual stage s, s = 0 .. p·v - 1.
  std::vector<std::pair<int64_t, int64_t>> stage_layers;
  int num_virtual_stages() const { return pipeline_parallel * chunks; }
};

// One model chunk of this rank: virtual stage chunk·p + pp_rank.
struct PipelineChunk {
  int virtual_stage = 0;
  int64_t first_layer = 0;
  int64_t last_layer = -1;  // first_layer - 1 when the stage holds no decoder layer
  bool first = false;       // embeds the batch
  bool last = false;        // runs the head and forms the loss
};

class PipelineStage {
 public:
  int pp_rank() const { return pp_rank_; }
  int pp_size() const { return layout_.pipeline_parallel; }
  int num_chunks() const { return layout_.chunks; }
  const PipelineLayout& layout() const { return layout_; }
  // This rank's chunks, by chunk index (virtual stage chunk·p + pp_rank).
  const std::vector<PipelineChunk>& chunks() const { return chunks_; }
  // Whether this rank holds the last virtual stage (the loss).
  bool holds_loss() const { return chunks_.back().last; }
  // The pp rank (in the "pp" group) that runs virtual stage s.
  int rank_of_stage(int virtual_stage) const { return virtual_stage % layout_.pipeline_parallel; }
  ProcessGroup& pp_group() { return *pp_group_; }

  // After the step's last backward (and FSDP's reductions): each copy of a parameter held by
  // the first and the last stage gets the sum of both copies' grads.
  void reduce_shared_grads();
  // How many stages hold a copy of `param` (2 for the shared embedding, else 1).
  int shared_copies(const std::string& param) const;

 private:
  friend std::shared_ptr<PipelineStage> apply_pipeline(nn::Module&, DeviceMesh&, const PipelineLayout&);
  PipelineLayout layout_;
  int pp_rank_ = 0;
  std::vector<PipelineChunk> chunks_;
  std::shared_ptr<ProcessGroup> pp_group_;
  // The first and the last stage's ranks of this pipeline; null where no parameter is shared.
  std::shared_ptr<ProcessGroup> shared_group_;
  std::vector<std::pair<std::string, nn::Parameter*>> shared_params_;
};

// Keeps on this rank only its chunks' parts of `model` (an nn::CausalLM on the meta device: the
// split asserts nothing was allocated yet), after tensor parallelism, before the memory policy
// and FSDP. Collective over the mesh's "pp" group (it forms the shared-embedding group). The
// layout must cover the model's decoder layers in order, and p must equal the mesh's pp.
std::shared_ptr<PipelineStage> apply_pipeline(nn::Module& model, DeviceMesh& mesh, const PipelineLayout& layout);

}  // namespace loom::dist
