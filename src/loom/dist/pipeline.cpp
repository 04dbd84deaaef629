#include "loom/dist/pipeline.h"

#include "loom/autograd/grad_mode.h"
#include "loom/nn/causal_lm.h"

namespace loom::dist {

namespace {
const char* const kSharedEmbedding = "embedding.word_embeddings.weight";
}  // namespace

std::shared_ptr<PipelineStage> apply_pipeline(nn::Module& model, DeviceMesh& mesh, const PipelineLayout& layout) {
  auto* lm = dynamic_cast<nn::CausalLM*>(&model);
  LOOM_CHECK(lm != nullptr, ValueError, "apply_pipeline: the model is a ", model.type_name(),
             ", but pipeline stages split an nn::CausalLM");
  LOOM_ASSERT(!model.is_materialized() || model.num_parameters() == 0,
              "apply_pipeline: the model must be built on the meta device so that no rank holds all of it");
  const int p = layout.pipeline_parallel;
  LOOM_ASSERT(p == mesh.size("pp"), "apply_pipeline: the layout has ", p, " stages but the mesh's pp axis has ",
              mesh.size("pp"), " ranks");
  LOOM_ASSERT(static_cast<int>(layout.stage_layers.size()) == layout.num_virtual_stages(),
              "apply_pipeline: the layout lists ", layout.stage_layers.size(), " virtual stages, not p·v = ",
              layout.num_virtual_stages());
  int64_t next = 0;
  for (const auto& [first, last] : layout.stage_layers) {
    LOOM_ASSERT(first == next && last >= first - 1, "apply_pipeline: the virtual stages must cover the layers in order");
    next = last + 1;
  }
  LOOM_ASSERT(next == lm->config().num_layers, "apply_pipeline: the virtual stages cover ", next, " layers, the model has ",
              lm->config().num_layers);

  auto stage = std::shared_ptr<PipelineStage>(new PipelineStage());
  stage->layout_ = layout;
  stage->pp_rank_ = mesh.group("pp").rank();
  stage->pp_group_ = mesh.group_ptr("pp");
  const int last_stage = layout.num_virtual_stages() - 1;
  for (int c = 0; c < layout.chunks; ++c) {
    PipelineChunk chunk;
    chunk.virtual_stage = c * p + stage->pp_rank_;
    chunk.first_layer = layout.stage_layers[static_cast<size_t>(chunk.virtual_stage)].first;
    chunk.last_layer = layout.stage_layers[static_cast<size_t>(chunk.virtual_stage)].second;
    chunk.first = chunk.virtual_stage == 0;
    chunk.last = chunk.virtual_stage == last_stage;
    stage->chunks_.push_back(chunk);
  }
  const bool embedding = stage->chunks_.front().first;
  const bool head = stage->chunks_.back().last;
  const auto& chunks = stage->chunks_;
  lm->keep_parts(
      [&chunks](int64_t layer) {
        for (const PipelineChunk& c : chunks)
          if (layer >= c.first_layer && layer <= c.last_layer) return true;
        return false;
      },
      embedding, head);

  // The embedding the last stage keeps for the tied head or MTP is shared with the first stage.
  // With p == 1 one rank holds both ends and the weight once: nothing to share.
  if (p > 1 && lm->head_uses_embedding()) {
    const bool holds_end = embedding || head;
    std::vector<int> members = holds_end ? std::vector<int>{0, p - 1} : std::vector<int>{stage->pp_rank_};
    std::shared_ptr<ProcessGroup> group(mesh.group("pp").split_subgroup("pp_shared_embedding", members));
    if (holds_end) {
      stage->shared_group_ = std::move(group);
      nn::Parameter* weight = model.find_parameter(kSharedEmbedding);
      LOOM_ASSERT(weight != nullptr, "apply_pipeline: the shared embedding ", kSharedEmbedding, " is missing");
      stage->shared_params_.emplace_back(kSharedEmbedding, weight);
    }
  }
  return stage;
}

void PipelineStage::reduce_shared_grads() {
  if (!shared_group_) return;
  autograd::NoGradGuard no_grad;
  for (auto& [name, p] : shared_params_) {
    if (!p->trainable) continue;
    Tensor local = p->local();
    // A stage whose copy got no grad (a frozen path) still joins the sum with zeros.
    if (!local.grad().defined()) local.set_grad(Tensor::zeros(local.shape(), local.dtype()));
    Tensor& g = local.mutable_grad();
    LOOM_ASSERT(g.is_contiguous(), "the shared embedding's grad must be contiguous to be summed over the stages");
    shared_group_->all_reduce(g);
  }
}

int PipelineStage::shared_copies(const std::string& param) const {
  for (const auto& [name, p] : shared_params_)
    if (name == param) return 2;
  return 1;
}

}  // namespace loom::dist
