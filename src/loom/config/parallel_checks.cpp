// parallelism rules that hold for every world size: parallel_training.md ("Parallelism
// Configuration Limitations", CP methods, mask compression, EP dispatcher, SP) and the
// reference ParallelismConfig.__post_init__.

#include "loom/config/checks.h"
#include "loom/config/layer_spec.h"

namespace loom::config::detail {

namespace {

void one_of(const std::string& value, const std::vector<std::string>& allowed, const std::string& path,
            Diagnostics& diag) {
  for (const auto& a : allowed)
    if (a == value) return;
  std::string list;
  for (std::size_t i = 0; i < allowed.size(); ++i) list += (i ? ", " : "") + ("'" + allowed[i] + "'");
  diag.error(path, "must be one of " + list + ", got '" + value + "'" + did_you_mean(value, allowed));
}

}  // namespace

ParallelChecks check_parallelism(const TrainConfig& c, const models::ModelArgs& model,
                                 const data::MegatronDataConfig& data, std::int64_t seq_length_resolved,
                                 Diagnostics& diag) {
  const ParallelismConfig& p = c.parallelism;
  const std::string P = "parallelism.";
  const std::pair<const char*, int> degrees[] = {{"tensor_parallel", p.tensor_parallel},
                                                 {"context_parallel", p.context_parallel},
                                                 {"pipeline_parallel", p.pipeline_parallel},
                                                 {"expert_parallel", p.expert_parallel},
                                                 {"pipeline_parallel_interleave_num", p.pipeline_parallel_interleave_num},
                                                 {"npu_nums_per_device", p.npu_nums_per_device}};
  bool degrees_ok = true;
  for (const auto& [name, value] : degrees)
    if (value < 1) {
      diag.error(P + name, "must be >= 1, got " + std::to_string(value));
      degrees_ok = false;
    }
  const bool shard_ok = p.data_parallel_shard == -1 || p.data_parallel_shard >= 1;
  if (!shard_ok)
    diag.error(P + "data_parallel_shard", "must be -1 (shard over every data-parallel rank) or a positive shard "
                                          "degree, got " + std::to_string(p.data_parallel_shard));
  if (p.dense_fsdp_shard_size && *p.dense_fsdp_shard_size < 1)
    diag.error(P + "dense_fsdp_shard_size", "must be >= 1 or null, got " + std::to_string(*p.dense_fsdp_shard_size));

  one_of(p.reshard_after_forward_policy, {"always", "never", "default"}, P + "reshard_after_forward_policy", diag);
  one_of(p.context_parallel_method, {"colossal", "ulysses", "hybrid"}, P + "context_parallel_method", diag);
  one_of(p.moe_token_dispatcher_type, {"alltoall", "alltoall_deredundancy"}, P + "moe_token_dispatcher_type", diag);
  one_of(p.pipeline_parallel_p2p_transport, {"auto", "plain"}, P + "pipeline_parallel_p2p_transport", diag);

  // Reference ParallelismConfig.__post_init__.
  if (p.moe_token_dispatcher_type == "alltoall_deredundancy" && p.expert_parallel < p.npu_nums_per_device)
    diag.error(P + "expert_parallel",
               "moe_token_dispatcher_type 'alltoall_deredundancy' requires expert_parallel >= npu_nums_per_device, "
               "got expert_parallel " + std::to_string(p.expert_parallel) + " < npu_nums_per_device " +
                   std::to_string(p.npu_nums_per_device) + "; raise expert_parallel or use 'alltoall'");
  // Nodes are blocks of npu_nums_per_device ep ranks (dist/expert_parallel.h): a partial node has
  // no peer of every index.
  if (p.moe_token_dispatcher_type == "alltoall_deredundancy" && p.npu_nums_per_device >= 1 &&
      p.expert_parallel >= p.npu_nums_per_device && p.expert_parallel % p.npu_nums_per_device != 0)
    diag.error(P + "npu_nums_per_device",
               "moe_token_dispatcher_type 'alltoall_deredundancy' groups the expert_parallel ranks into nodes of "
               "npu_nums_per_device, so expert_parallel (" + std::to_string(p.expert_parallel) +
                   ") must be a multiple of npu_nums_per_device (" + std::to_string(p.npu_nums_per_device) +
                   "); set npu_nums_per_device to the ranks per node, a divisor of expert_parallel");

  // SP cannot be switched off (parallel_training.md §6): the reference raises for TP without SP,
  // Loom accepts the field and says what really happens.
  if (p.tensor_parallel > 1 && !p.sequence_parallel && c.is_explicit(P + "sequence_parallel"))
    diag.warn(P + "sequence_parallel", "is false but tensor_parallel is " + std::to_string(p.tensor_parallel) +
                                           ": sequence parallelism always comes with tensor parallelism and "
                                           "cannot be disabled; the field is ignored");
  // With TP the field carries no information (SP is on anyway); without TP it asks for SP,
  // which conflicts with CP and is ignored (parallel_training.md §6 note).
  if (p.context_parallel > 1 && p.sequence_parallel && p.tensor_parallel == 1)
    diag.warn(P + "sequence_parallel", "sequence parallelism conflicts with context parallelism "
                                       "(context_parallel > 1); the sequence_parallel field is ignored");
  if (c.is_explicit(P + "pipeline_parallel_microbatch_size"))
    diag.warn(P + "pipeline_parallel_microbatch_size",
              "is computed, not configured: it is overwritten with num_accumulation_steps = global_batch_size // "
              "(data_parallel * local_batch_size); change the batch sizes instead");

  // Context parallelism (parallel_training.md §3, reference _validate_cp_method).
  const auto heads = known_size(model.num_attention_heads);
  const auto seq_length = known_size(seq_length_resolved);
  const int cp = p.context_parallel;
  // Loom's all-to-all splits the heads with or without async (dist/context_parallel.h), each tp
  // rank's H/tp; fewer KV heads than the degree are repeated. With async the spec names the rule
  // (num_attention_heads % ulysses_degree == 0): its message when that is what fails.
  auto ulysses_heads = [&](int u) {
    const int tp = p.tensor_parallel;
    const std::string method = "'" + p.context_parallel_method + "'";
    if (heads && tp >= 1 && *heads % (static_cast<int64_t>(tp) * u) != 0) {
      if (p.context_parallel_async && *heads % u != 0)
        diag.error(P + "context_parallel_async", p.context_parallel_method + " with context_parallel_async requires "
                                                 "num_attention_heads % ulysses_degree == 0, got "
                                                 "model.num_attention_heads " + std::to_string(*heads) +
                                                     " and ulysses degree " + std::to_string(u));
      else
        diag.error(P + "context_parallel_method", method + " requires the attention heads per tensor-parallel rank "
                                                  "(model.num_attention_heads " + std::to_string(*heads) + " / "
                                                  "tensor_parallel " + std::to_string(tp) + ") to be divisible by the "
                                                  "ulysses degree " + std::to_string(u) + ": the all-to-all splits "
                                                  "the heads; use 'colossal' or change the degree");
    }
    const auto kv = model.multi_latent_attention ? heads : known_size(model.num_key_value_heads);
    if (kv && tp >= 1 && (*kv >= tp || tp % *kv != 0)) {
      const int64_t local_kv = std::max<int64_t>(*kv / tp, 1);
      if (local_kv % u != 0 && u % local_kv != 0)
        diag.error(P + "context_parallel_method", method + " requires the KV heads per tensor-parallel rank (" +
                                                      std::to_string(local_kv) + ") and the ulysses degree " +
                                                      std::to_string(u) + " to divide one another (fewer KV heads "
                                                      "than the degree are repeated)");
    }
  };
  if (cp > 1) {
    if (p.context_parallel_method == "ulysses") {
      if (p.ulysses_degree_in_cp && *p.ulysses_degree_in_cp != cp)
        diag.error(P + "ulysses_degree_in_cp", "context_parallel_method 'ulysses' requires ulysses_degree_in_cp == "
                                               "context_parallel (" + std::to_string(cp) + "), got " +
                                                   std::to_string(*p.ulysses_degree_in_cp) + "; set it to " +
                                                   std::to_string(cp) + " or leave it null");
      ulysses_heads(p.ulysses_degree_in_cp.value_or(cp));
    } else if (p.context_parallel_method == "hybrid") {
      if (!p.ulysses_degree_in_cp)
        diag.error(P + "ulysses_degree_in_cp", "context_parallel_method 'hybrid' requires ulysses_degree_in_cp with "
                                               "1 < ulysses_degree_in_cp < context_parallel (" + std::to_string(cp) +
                                                   ") and context_parallel % ulysses_degree_in_cp == 0");
      else if (const int u = *p.ulysses_degree_in_cp; !(u > 1 && u < cp && cp % u == 0))
        diag.error(P + "ulysses_degree_in_cp", "context_parallel_method 'hybrid' requires 1 < ulysses_degree_in_cp < "
                                               "context_parallel and context_parallel % ulysses_degree_in_cp == 0, got "
                                               "ulysses_degree_in_cp " + std::to_string(u) + " with context_parallel " +
                                                   std::to_string(cp));
      else
        ulysses_heads(*p.ulysses_degree_in_cp);
    }
    if (p.context_parallel_mask_type != "causal")
      diag.error(P + "context_parallel_mask_type", "only 'causal' is supported with context parallelism, got '" +
                                                     p.context_parallel_mask_type + "'");
    // Mask compression is required (parallel_training.md §3.3), with the reference's message.
    const bool eod_compressed = data.create_compressed_eod_mask, dense_mask = data.create_attention_mask;
    if (!model.use_attn_mask_compression && !eod_compressed)
      diag.error(P + "context_parallel",
                 "Context parallel (context_parallel > 1) requires a compressed attention mask. Please enable "
                 "use_attn_mask_compression for non-eod data, or create_compressed_eod_mask for eod data. "
                 "(model.use_attn_mask_compression: true, or train_dataset.dataloader.config."
                 "create_compressed_eod_mask: true with create_attention_mask: false)");
    else if (eod_compressed && dense_mask)
      diag.warn("train_dataset.dataloader.config.create_attention_mask",
                "should be false with create_compressed_eod_mask and context parallelism: the dense "
                "seq_length x seq_length mask is built for nothing");
    if (seq_length && *seq_length % cp != 0)
      diag.error(P + "context_parallel", "seq_length " + std::to_string(*seq_length) +
                                             " must be divisible by context_parallel (" + std::to_string(cp) +
                                             "): each CP rank takes 1/context_parallel of the sequence");
    else if (seq_length && p.context_parallel_load_balance && *seq_length % (2 * cp) != 0)
      diag.error(P + "context_parallel",
                 "seq_length " + std::to_string(*seq_length) + " must be divisible by 2 * context_parallel (" +
                     std::to_string(2 * cp) + "): the load-balanced split cuts each sequence into 2 * "
                     "context_parallel chunks; pad seq_length, or set parallelism.context_parallel_load_balance: "
                     "false for the contiguous split");
  } else if (p.ulysses_degree_in_cp || p.context_parallel_method != "colossal") {
    if (c.is_explicit(P + "ulysses_degree_in_cp") && p.ulysses_degree_in_cp)
      diag.warn(P + "ulysses_degree_in_cp", "has no effect while context_parallel is 1");
  }

  // Model sizes every TP/EP split needs (not in the spec's list, but true of any implementation;
  // dist/tensor_parallel.h says what is split how).
  const int tp = p.tensor_parallel;
  const std::string tp_str = std::to_string(tp);
  if (tp > 1 && heads && *heads % tp != 0)
    diag.error(P + "tensor_parallel", "model.num_attention_heads (" + std::to_string(*heads) +
                                          ") must be divisible by tensor_parallel (" + tp_str +
                                          "): tensor parallelism splits the attention heads");
  const auto vocab = known_size(model.vocab_size);
  if (tp > 1 && vocab && *vocab % tp != 0)
    diag.error(P + "tensor_parallel", "model.vocab_size (" + std::to_string(*vocab) + ") must be divisible by "
               "tensor_parallel (" + tp_str + "): the embedding and the output head are split over the vocabulary; "
               "pad vocab_size up to a multiple of " + tp_str);
  const auto kv_heads = known_size(model.num_key_value_heads);
  if (tp > 1 && !model.multi_latent_attention && kv_heads && *kv_heads % tp != 0 && tp % *kv_heads != 0)
    diag.error(P + "tensor_parallel", "model.num_key_value_heads (" + std::to_string(*kv_heads) + ") and "
               "tensor_parallel (" + tp_str + ") must divide one another: each rank keeps whole KV heads, or "
               "tensor_parallel / num_key_value_heads ranks share one");
  const auto ffn = known_size(model.intermediate_size);
  if (tp > 1 && model.has_dense_layers() && ffn && *ffn % tp != 0)
    diag.error(P + "tensor_parallel", "model.intermediate_size (" + std::to_string(*ffn) + ") must be divisible by "
               "tensor_parallel (" + tp_str + "): the dense MLP's gate, up and down projections are split over it");
  if (tp > 1 && cp >= 1 && seq_length && *seq_length % cp == 0 && (*seq_length / cp) % tp != 0)
    diag.error(P + "tensor_parallel", "the sequence length per CP rank (" + std::to_string(*seq_length / cp) +
                                          ") must be divisible by tensor_parallel (" + std::to_string(tp) +
                                          "): sequence parallelism, which comes with TP, splits it over the TP ranks");
  const auto experts = known_size(model.num_experts);
  if (p.expert_parallel > 1 && experts && *experts % p.expert_parallel != 0)
    diag.error(P + "expert_parallel", "the number of routed experts (" + std::to_string(*experts) +
                                          ") must be divisible by expert_parallel (" +
                                          std::to_string(p.expert_parallel) + ")");

  ParallelChecks out;
  if (cp > 1 && p.context_parallel_async && p.context_parallel_method == "colossal")
    diag.warn(P + "context_parallel_async", "has no effect with context_parallel_method 'colossal': the ring always "
                                            "posts the next K/V block's transfer before the current block's compute "
                                            "(async posts Ulysses' and hybrid's all-to-alls ahead)");
  // overlap_b_f interleaves one micro-batch's backward with another's forward so that the expert
  // all-to-all of one meets the other's compute; the reference turns it off for dense models.
  const bool overlap_b_f = p.pipeline_parallel > 1 && p.pipeline_parallel_overlap_b_f && model.is_moe();
  if (p.pipeline_parallel > 1 && p.pipeline_parallel_overlap_b_f && !model.is_moe())
    diag.warn(P + "pipeline_parallel_overlap_b_f", "has no effect for a dense model (no routed experts, so no "
                                                   "expert all-to-all to overlap): it is turned off, as in the "
                                                   "reference");
  out.degrees_valid = degrees_ok && shard_ok;
  if (degrees_ok) out.pipeline = plan_pipeline(p, known_size(model.num_layers), c, diag);
  if (out.pipeline) out.pipeline->overlap_b_f = overlap_b_f;
  return out;
}

}  // namespace loom::config::detail
