// Distributed checkpoints (docs/distributed.md "Checkpoints"): saved under one layout, loaded
// under another (4 ranks → 2 → 1 and 1 → 4), model and AdamW state equal to the one-process
// values, training continuing identically; remove_redundancy writes each shard once;
// load_balanced reads each shard once per replicate group.
#include <gtest/gtest.h>

#include <bit>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>

#include "../dist_test_util.h"
#include "loom/dist/fsdp.h"
#include "loom/dist/runtime.h"
#include "loom/dist/sharded_checkpoint.h"
#include "loom/models/safetensors.h"
#include "loom/optim/adamw.h"

namespace loom::dist {
namespace {

namespace fs = std::filesystem;

std::string file_name(bool optimizer, int rank, int world) {
  char buf[96];
  std::snprintf(buf, sizeof(buf), "checkpoint-%s-%07d-%07d.safetensors", optimizer ? "opt" : "model", rank, world);
  return buf;
}

// A folder every rank of `group` agrees on (rank 0 picks it).
std::string shared_dir(ProcessGroup& group, const std::string& tag) {
  int64_t id = group.rank() == 0 ? static_cast<int64_t>(std::random_device{}()) : 0;
  group.broadcast(std::span<int64_t>(&id, 1), 0);
  const fs::path dir = fs::temp_directory_path() / ("loom-dist-" + tag + "-" + std::to_string(id));
  if (group.rank() == 0) fs::create_directories(dir);
  group.barrier();
  return dir.string();
}

// What CheckpointManager does with a ShardedSave.
void write(ProcessGroup& group, const std::string& dir, const std::vector<ShardedTensorEntry>& entries, bool remove_redundancy) {
  ShardedSave s = prepare_sharded_save(group, entries, file_name, remove_redundancy);
  models::write_safetensors(dir + "/" + file_name(false, group.rank(), group.size()), s.model);
  models::write_safetensors(dir + "/" + file_name(true, group.rank(), group.size()), s.optimizer);
  if (group.rank() == 0) std::ofstream(dir + "/metadata.json") << s.metadata.dump(2);
  group.barrier();
}

struct ShardedRun {
  models::BuiltModel model;
  std::shared_ptr<FullyShardedModel> fsdp;
  std::unique_ptr<optim::AdamW> opt;
  std::shared_ptr<DeviceMesh> mesh;
};

optim::AdamWOptions adam() {
  optim::AdamWOptions o;
  o.learning_rate = 1e-2;
  return o;
}

ShardedRun sharded_run(std::shared_ptr<ProcessGroup> group, int data_parallel_shard = -1) {
  ShardedRun r{models::build_model(testing::dist_tiny_llama()), nullptr, nullptr, nullptr};
  ParallelDegrees d;
  d.data_parallel_shard = data_parallel_shard;
  r.mesh = std::make_shared<DeviceMesh>(group, ParallelDims::infer(group->size(), d));
  r.fsdp = apply_fsdp(*r.model.model, r.mesh, {});
  r.fsdp->materialize(17);
  optim::NamedParams shards;
  for (auto& [n, t] : r.model.model->local_parameters()) shards.push_back({n, t});
  r.opt = std::make_unique<optim::AdamW>(shards, adam());
  return r;
}

// One step on a global batch of `global_micro` micro-batches starting at `first`.
double sharded_step(ShardedRun& r, int64_t global_micro, int64_t first) {
  const int dp = r.mesh->world_size(), rank = r.mesh->rank();
  const int64_t A = global_micro / dp;
  r.fsdp->zero_grad();
  double loss = 0;
  for (int64_t j = 0; j < A; ++j) {
    nn::LMOutput out = r.model.model->forward(testing::micro_batch(25, 2, 5, first + j * dp + rank));
    Tensor scaled = A > 1 ? ops::scale(out.loss, 1.0 / static_cast<double>(A)) : out.loss;
    autograd::backward(scaled, Tensor::full(scaled.shape(), 1.0 / dp));
    loss += out.loss.item() / static_cast<double>(A);
  }
  r.fsdp->finish_backward();
  r.opt->step();
  return r.mesh->world().all_reduce_scalar(loss) / dp;
}

struct Plain {
  models::BuiltModel model;
  std::unique_ptr<optim::AdamW> opt;
};

Plain plain_run() {
  Plain p{models::build_model(testing::dist_tiny_llama()), nullptr};
  p.model.model->materialize(17);
  optim::NamedParams full;
  for (auto& [n, prm] : p.model.model->named_parameters()) full.push_back({n, prm->tensor});
  p.opt = std::make_unique<optim::AdamW>(full, adam());
  return p;
}

double plain_step(Plain& p, int64_t global_micro, int64_t first) {
  const double loss = testing::reference_step(*p.model.model, 25, 2, 5, first, global_micro, nullptr);
  p.opt->step();
  return loss;
}

std::vector<ShardedTensorEntry> entries_of(ShardedRun& r) {
  return checkpoint_entries(*r.model.model, r.model.model->state_dict(), r.opt->state_dict());
}

// Loads `dir` into a run: the shards in place, then the optimizer's own load (global_step,
// masters) as the trainer does.
void load_into(ShardedRun& r, const std::string& dir, ProcessGroup* replicate = nullptr, bool balanced = false) {
  auto entries = entries_of(r);
  load_resharded(dir, entries, true, replicate, balanced);
  std::map<std::string, Tensor> opt_state;
  for (auto& e : entries)
    if (e.optimizer) opt_state[e.name] = e.local;
  r.opt->load_state_dict(opt_state);
}

// Every model and optimizer tensor of the run against the full tensors `full` (exact when tol 0).
void expect_matches(ShardedRun& r, const std::map<std::string, Tensor>& full, double tol, const std::string& when) {
  for (auto& e : entries_of(r)) {
    const Tensor& ref = full.at(e.name);
    // FSDP shards are one piece: rows [offset, offset + local rows) of the full tensor.
    Tensor want = ref.dim() ? ref.narrow(0, e.pieces.empty() ? 0 : e.pieces[0].global_offset[0], e.local.size(0)) : ref;
    auto a = e.local.contiguous().to_double_vector(), b = want.contiguous().to_double_vector();
    ASSERT_EQ(a.size(), b.size()) << e.name << " " << when;
    for (size_t i = 0; i < a.size(); ++i) {
      if (tol == 0) ASSERT_EQ(a[i], b[i]) << e.name << " [" << i << "] " << when;
      else ASSERT_NEAR(a[i], b[i], tol) << e.name << " [" << i << "] " << when;
    }
  }
}

std::map<std::string, Tensor> full_state(Plain& p) {
  auto s = p.model.model->state_dict();
  for (auto& [k, v] : p.opt->state_dict()) s[k] = v;
  return s;
}

void expect_matches_plain(ShardedRun& r, Plain& p, const std::string& when, double tol = 0) {
  expect_matches(r, full_state(p), tol, when);
}

TEST(CheckpointMpi, SaveAtWorldLoadAtHalfAndOneAndContinueIdentically) {
  auto world = Runtime::get()->world();
  const int n = world->size();
  if (n < 2) GTEST_SKIP() << "needs 2 or more ranks";
  const int64_t G = 4;  // global batch: 4 micro-batches at every layout
  ShardedRun saved = sharded_run(world);
  Plain plain = plain_run();
  EXPECT_NEAR(sharded_step(saved, G, 0), plain_step(plain, G, 0), 1e-6);
  const std::string dir = shared_dir(*world, "reshard");
  write(*world, dir, entries_of(saved), false);

  // Every rank alone first: the full saved state. With one micro-batch per rank (4 ranks) the
  // saved run is bit-identical to one process; with two, grads were summed (g0+g1)+(g2+g3).
  std::map<std::string, Tensor> saved_full;
  {
    std::shared_ptr<ProcessGroup> alone(world->split("world", {world->rank()}));
    ShardedRun one = sharded_run(alone);
    load_into(one, dir);
    expect_matches_plain(one, plain, "loaded at 1 rank", n == 4 ? 0.0 : 1e-5);
    for (auto& e : entries_of(one)) saved_full[e.name] = e.local.clone();
  }
  // Half the ranks (2 when 4 run), then every rank alone.
  std::vector<int> half;
  const int h = n / 2;
  for (int r = 0; r < n; ++r)
    if ((r < h) == (world->rank() < h)) half.push_back(r);
  for (int size : {h, 1}) {
    SCOPED_TRACE("resumed at " + std::to_string(size) + " ranks");
    std::vector<int> members = size == 1 ? std::vector<int>{world->rank()} : half;
    std::shared_ptr<ProcessGroup> group(world->split("world", members));
    ShardedRun resumed = sharded_run(group);
    load_into(resumed, dir);
    EXPECT_EQ(resumed.opt->global_step(), 1);
    expect_matches(resumed, saved_full, 0, "after load");
    // fp32, deterministic: the next steps follow the one-process run.
    Plain cont = plain_run();
    cont.model.model->load_state_dict(plain.model.model->state_dict());
    cont.opt->load_state_dict(plain.opt->state_dict());
    for (int64_t step = 1; step <= 2; ++step)
      EXPECT_NEAR(sharded_step(resumed, G, step * G), plain_step(cont, G, step * G), 1e-6) << "step " << step;
  }
  world->barrier();
  if (world->rank() == 0) fs::remove_all(dir);
}

TEST(CheckpointMpi, OneProcessCheckpointLoadsSharded) {
  auto world = Runtime::get()->world();
  Plain plain = plain_run();
  plain_step(plain, 4, 0);
  const std::string dir = shared_dir(*world, "from1");
  if (world->rank() == 0) {  // what a one-process run writes: full tensors, no metadata.json
    models::write_safetensors(dir + "/" + file_name(false, 0, 1), plain.model.model->state_dict());
    models::write_safetensors(dir + "/" + file_name(true, 0, 1), plain.opt->state_dict());
  }
  world->barrier();
  ShardedRun r = sharded_run(world);
  load_into(r, dir);
  expect_matches_plain(r, plain, "loaded from one process");
  world->barrier();
  if (world->rank() == 0) fs::remove_all(dir);
}

TEST(CheckpointMpi, MetadataNamesEveryShardAndItsFile) {
  auto world = Runtime::get()->world();
  ShardedRun r = sharded_run(world);
  ShardedSave s = prepare_sharded_save(*world, entries_of(r), file_name, false);
  if (world->rank() != 0) {
    EXPECT_TRUE(s.metadata.is_null());
    return;
  }
  const auto& m = s.metadata["state_dict_metadata"]["decoder.layers.0.mlp.linear_fc1.weight"];
  EXPECT_EQ(m["global_shape"], nlohmann::ordered_json({44, 18}));
  EXPECT_EQ(m["properties"]["dtype"], "Float32");
  EXPECT_EQ(m["chunk"].size(), static_cast<size_t>(world->size()));
  EXPECT_EQ(m["axis_fragmentations"][0], world->size());
  const int64_t c = (44 + world->size() - 1) / world->size();
  const auto& files = s.metadata["storage_data"][shard_id("decoder.layers.0.mlp.linear_fc1.weight", {c, 0})];
  ASSERT_EQ(files.size(), world->size() > 1 ? 1u : 0u);
  if (world->size() > 1) {
    EXPECT_EQ(files[0]["file_name"], file_name(false, 1, world->size()));
    EXPECT_EQ(files[0]["storage_rank"], 1);
  }
  EXPECT_TRUE(s.metadata["state_dict_metadata"].contains("adam_m.decoder.layers.0.mlp.linear_fc1.weight"));
  EXPECT_EQ(s.metadata["state_dict_metadata"]["global_step"]["chunk"].size(), 1u);
}

TEST(CheckpointMpi, RemoveRedundancyWritesEachShardOnceAndLoadBalancedReadsIt) {
  auto world = Runtime::get()->world();
  if (world->size() != 4) GTEST_SKIP() << "needs 4 ranks";
  ShardedRun hsdp = sharded_run(world, 2);  // 2 replicas x 2 shards
  Plain plain = plain_run();
  sharded_step(hsdp, 4, 0);
  plain_step(plain, 4, 0);
  const std::string dir = shared_dir(*world, "dedup");
  ShardedSave s = prepare_sharded_save(*world, entries_of(hsdp), file_name, true);
  ShardedSave all = prepare_sharded_save(*world, entries_of(hsdp), file_name, false);
  const int64_t mine = static_cast<int64_t>(s.model.size() + s.optimizer.size());
  const int64_t total = world->all_reduce_scalar(mine), redundant = world->all_reduce_scalar(
      static_cast<int64_t>(all.model.size() + all.optimizer.size()));
  // Shards of parameters are held twice (2 replicas); global_step by all 4 ranks.
  EXPECT_LT(total, redundant);
  write(*world, dir, entries_of(hsdp), true);
  if (world->rank() == 0) {
    auto meta = nlohmann::ordered_json::parse(std::ifstream(dir + "/metadata.json"));
    for (auto& [id, files] : meta["storage_data"].items()) EXPECT_EQ(files.size(), 1u) << id;
  }
  // HSDP sums (g0+g1)+(g2+g3): close to, not bitwise, the one-process step.
  for (bool balanced : {false, true}) {
    ShardedRun again = sharded_run(world, 2);
    load_into(again, dir, &again.mesh->group("dp_replicate"), balanced);
    expect_matches_plain(again, plain, balanced ? "load_balanced" : "plain load", 1e-5);
  }
  ShardedRun pure = sharded_run(world, -1);  // and into another layout
  load_into(pure, dir);
  expect_matches_plain(pure, plain, "HSDP checkpoint into pure FSDP", 1e-5);
  world->barrier();
  if (world->rank() == 0) fs::remove_all(dir);
}

TEST(CheckpointMpi, BlockShardedFusedTensorsReshardAcrossLayouts) {
  // A fused [4n, 3] tensor whose gate rows [0, 2n) and up rows [2n, 4n) are split like two
  // separate tensors (what tensor parallelism does to fc1): rank r holds gate rows [2r, 2r+2)
  // and up rows [2n+2r, 2n+2r+2), two pieces of one [4, 3] local tensor. Saved so, it loads as
  // contiguous rows on each rank and whole on a rank alone.
  auto world = Runtime::get()->world();
  const int n = world->size(), r = world->rank();
  const int64_t rows = 4 * n;
  std::vector<float> values(static_cast<size_t>(rows * 3));
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i);
  const Tensor full = Tensor::from_vector(values, {rows, 3});
  nn::Placement fused;
  fused.add({rows, 3}, nn::AxisPlacement::shard("tp", 0, {{2 * r, 2}, {2 * n + 2 * r, 2}}));
  ShardedTensorEntry mine{"fc1", Tensor::zeros({4, 3}), {rows, 3}, fused.pieces({rows, 3}), false};
  for (const nn::Piece& p : mine.pieces)
    mine.local.narrow(0, p.local_offset[0], p.shape[0]).copy_(full.narrow(0, p.global_offset[0], p.shape[0]));
  const std::string dir = shared_dir(*world, "fused");
  write(*world, dir, {mine}, false);

  std::vector<ShardedTensorEntry> rows_of_rank{{"fc1", Tensor::zeros({4, 3}), {rows, 3}, {{{0, 0}, {4 * r, 0}, {4, 3}}}, false}};
  load_resharded(dir, rows_of_rank, false);
  EXPECT_EQ(rows_of_rank[0].local.to_float_vector(), full.narrow(0, 4 * r, 4).contiguous().to_float_vector());
  std::vector<ShardedTensorEntry> whole{whole_entry("fc1", Tensor::zeros({rows, 3}))};
  load_resharded(dir, whole, false);
  EXPECT_EQ(whole[0].local.to_float_vector(), values);
  world->barrier();
  if (world->rank() == 0) fs::remove_all(dir);
}

}  // namespace
}  // namespace loom::dist
