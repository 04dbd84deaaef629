// Distributed checkpoints in MindFormers' layout (docs/distributed.md "Checkpoints"): every rank
// writes the local tensors it holds into its own <prefix>-model|opt-<rank>-<world>.safetensors
// under the plain tensor names; rank 0 writes metadata.json with each tensor's global shape and
// every chunk's global offset, and, per chunk, which files hold it ("storage_data", keyed like the
// reference: "('<name>', (<offset>, ...))"). A chunk is one piece of a placement (nn/placement.h):
// a local tensor that is one box of the global tensor is one chunk, as in the reference; a local
// tensor made of several boxes (a block-sharded fused tensor) is stored whole and each of its
// chunks records where it sits in the stored tensor ("local_offset", a Loom extension). Loading
// reads metadata.json and copies, for each tensor this rank needs, the overlap of every saved chunk
// with every piece it holds now: a checkpoint saved under any layout loads under any other (4 ranks
// → 2 → 1 and back). A checkpoint without metadata.json (one process) holds full tensors.
//
// remove_redundancy: a chunk held by several ranks (HSDP replicas, replicated buffers) is
// written once, by the holder with the fewest bytes assigned so far (BalancedSaveStrategy), so
// the files together hold each chunk exactly once. load_balanced: ranks that need identical
// shards (the replicate group) split the reading and broadcast what they read.
//
// These functions build what train::CheckpointManager writes and reads; it owns the files'
// atomicity, common.json and "latest".
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "loom/dist/process_group.h"
#include "loom/nn/module.h"

namespace loom::dist {

struct ShardedTensorEntry {
  std::string name;
  Tensor local;                   // what this rank holds
  Shape global_shape;
  std::vector<nn::Piece> pieces;  // where `local` sits in the global tensor (placement pieces)
  bool optimizer = false;         // goes to the opt file, not the model file
};

// An entry for a tensor this rank holds whole (one process, replicated buffers, scalars).
ShardedTensorEntry whole_entry(std::string name, const Tensor& t, bool optimizer = false);

// Entries for `module`'s state (Module::state_dict: local tensors) plus its optimizer's state:
// parameters take the pieces of their placements, and so do the optimizer keys main_param.<p>,
// adam_m.<p>, adam_v.<p>, muon_m.<p> of parameter p; buffers and anything else (global_step)
// are whole on every rank.
std::vector<ShardedTensorEntry> checkpoint_entries(nn::Module& module, const std::map<std::string, Tensor>& model_state,
                                                   const std::map<std::string, Tensor>& optimizer_state);

// File name of a rank's model or optimizer file (the trainer's naming).
using CheckpointFileName = std::function<std::string(bool optimizer, int rank, int world)>;

struct ShardedSave {
  std::map<std::string, Tensor> model;      // this rank's model file
  std::map<std::string, Tensor> optimizer;  // this rank's optimizer file
  nlohmann::ordered_json metadata;          // metadata.json on rank 0; null elsewhere
};

// Collective over `world`: decides what this rank writes and builds the metadata.
ShardedSave prepare_sharded_save(ProcessGroup& world, const std::vector<ShardedTensorEntry>& entries,
                                 const CheckpointFileName& file_name, bool remove_redundancy);

// Fills each entry's `local` tensor (allocated, shaped like its pieces) from the checkpoint
// folder `dir`. Optimizer entries are skipped when load_optimizer is false. CheckpointError
// naming the folder and the tensors when something is missing, mis-shaped or not covered.
// With load_balanced, collective over `replicate_group` (every member passes the same entries).
void load_resharded(const std::string& dir, std::vector<ShardedTensorEntry>& entries, bool load_optimizer,
                    ProcessGroup* replicate_group = nullptr, bool load_balanced = false);

// The reference's shard id: str((name, tuple(global_offset))) in Python.
std::string shard_id(const std::string& name, const std::vector<int64_t>& global_offset);

}  // namespace loom::dist
