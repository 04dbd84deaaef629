#include "loom/dist/sharded_checkpoint.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>

#include "loom/core/error.h"
#include "loom/core/text.h"
#include "loom/core/regular_file.h"
#include "loom/core/trace.h"
#include "loom/models/safetensors.h"

namespace loom::dist {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

namespace {

const char* reference_dtype_name(DType d) {
  // MindSpore's str(dtype), as the reference writes it.
  switch (d) {
    case DType::f32: return "Float32";
    case DType::bf16: return "BFloat16";
    case DType::f16: return "Float16";
    case DType::f64: return "Float64";
    case DType::i32: return "Int32";
    case DType::i64: return "Int64";
    case DType::u8: return "UInt8";
    case DType::boolean: return "Bool";
  }
  return "?";
}

std::vector<int64_t> dims_of(const Shape& s) {
  std::vector<int64_t> out;
  for (int i = 0; i < s.ndim(); ++i) out.push_back(s[i]);
  return out;
}

Shape shape_of(const std::vector<int64_t>& v) {
  Shape s;
  for (int64_t x : v) s.push_back(x);
  return s;
}

std::string shape_id_offset(const std::vector<int64_t>& v) {
  std::string s = "(";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + ")";
}

// One chunk as a rank announces it to the others.
struct Described {
  int rank;
  std::string name;
  std::string dtype;
  std::vector<int64_t> global_shape, offset, local_shape;
  bool optimizer;
  int64_t bytes;
  std::vector<int64_t> local_offset;  // where it sits in the stored tensor; empty: it is the whole tensor
  size_t entry;                       // index into the announcing rank's entries
};

Json read_json_file(const fs::path& path) {
  require_regular_file(path.string(), "checkpoint file", "a checkpoint's metadata must be a regular file");
  std::ifstream in(path);
  LOOM_CHECK(in.good(), CheckpointError, "cannot read '", path.string(), "'");
  try {
    return Json::parse(in);
  } catch (const std::exception& e) {
    LOOM_THROW(CheckpointError, "'", path.string(), "' is not valid JSON (", json_error_text(e.what()),
               "); the checkpoint is damaged: load an earlier iteration");
  }
}

struct Holder {
  std::string file;
  std::vector<int64_t> local_offset;  // empty: the stored tensor is exactly the chunk
};

struct Chunk {
  std::vector<int64_t> offset, shape;
  std::vector<Holder> holders;  // candidates holding it
};

struct SavedTensor {
  std::vector<int64_t> global_shape;
  std::vector<Chunk> chunks;
};

// What a checkpoint folder holds: from metadata.json, or (one-process checkpoints) every
// tensor of every safetensors file, whole.
std::map<std::string, SavedTensor> read_layout(const fs::path& dir) {
  std::map<std::string, SavedTensor> out;
  const fs::path meta_path = dir / "metadata.json";
  if (fs::exists(meta_path)) {
    const Json meta = read_json_file(meta_path);
    LOOM_CHECK(meta.contains("state_dict_metadata") && meta.contains("storage_data"), CheckpointError, "'",
               meta_path.string(), "' lacks state_dict_metadata or storage_data; the file is damaged");
    const Json& storage = meta["storage_data"];
    // Keys and types as the save writes them; anything else is a damaged file, named as such.
    try {
    for (auto& [name, m] : meta["state_dict_metadata"].items()) {
      SavedTensor t;
      t.global_shape = m.at("global_shape").get<std::vector<int64_t>>();
      for (auto& c : m.at("chunk")) {
        Chunk chunk;
        chunk.offset = c.at("global_offset").get<std::vector<int64_t>>();
        chunk.shape = c.at("local_shape").get<std::vector<int64_t>>();
        bool fits = chunk.offset.size() == t.global_shape.size() && chunk.shape.size() == t.global_shape.size();
        for (size_t a = 0; fits && a < t.global_shape.size(); ++a)
          fits = chunk.offset[a] >= 0 && chunk.shape[a] >= 0 && t.global_shape[a] >= 0 &&
                 chunk.offset[a] <= t.global_shape[a] - chunk.shape[a];
        LOOM_CHECK(fits, CheckpointError, "'", meta_path.string(), "': a chunk of '", name, "' at ",
                   c.at("global_offset").dump(), " of shape ", c.at("local_shape").dump(), " does not lie inside its ",
                   m.at("global_shape").dump(), " tensor; the file is damaged");
        const std::string id = shard_id(name, chunk.offset);
        if (storage.contains(id))
          for (auto& s : storage[id])
            chunk.holders.push_back({s.at("file_name").get<std::string>(),
                                     s.contains("local_offset") ? s["local_offset"].get<std::vector<int64_t>>()
                                                                : std::vector<int64_t>{}});
        LOOM_CHECK(!chunk.holders.empty(), CheckpointError, "'", meta_path.string(), "': no file holds shard ", id);
        for (const auto& h : chunk.holders)
          LOOM_CHECK(!h.file.empty() && h.file.find('/') == std::string::npos && h.file != "." && h.file != "..",
                     CheckpointError, "'", meta_path.string(), "': shard ", id, " names file '", h.file,
                     "', which is not a file of the checkpoint folder; the file is damaged");
        t.chunks.push_back(std::move(chunk));
      }
      out[name] = std::move(t);
    }
    } catch (const nlohmann::json::exception& e) {
      LOOM_THROW(CheckpointError, "'", meta_path.string(), "' is not the metadata a save writes (",
                 json_error_text(e.what()),
                 "); the file is damaged");
    }
    return out;
  }
  std::vector<fs::path> files;
  for (auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".safetensors") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  LOOM_CHECK(!files.empty(), CheckpointError, "checkpoint '", dir.string(), "' has no metadata.json and no *.safetensors files");
  for (const auto& f : files) {
    const auto file = models::SafetensorsFile::open(f.string());
    for (const auto& e : file.entries()) {
      LOOM_CHECK(!out.count(e.name), CheckpointError, "checkpoint '", dir.string(), "' has no metadata.json and '", e.name,
                 "' appears in two files (the second is '", f.filename().string(),
                 "'): a multi-process checkpoint needs its metadata.json");
      SavedTensor t;
      t.global_shape = dims_of(e.shape);
      t.chunks.push_back({std::vector<int64_t>(t.global_shape.size(), 0), t.global_shape, {{f.filename().string(), {}}}});
      out[e.name] = std::move(t);
    }
  }
  return out;
}

// Deterministic balanced assignment: items in order, each to the candidate with the fewest bytes
// so far (ties: lowest index).
template <typename Item>
std::vector<int> balance(const std::vector<Item>& items, const std::function<std::vector<int>(const Item&)>& candidates,
                         const std::function<int64_t(const Item&)>& bytes, int num_owners) {
  std::vector<int64_t> load(static_cast<size_t>(num_owners), 0);
  std::vector<int> owner;
  for (const Item& it : items) {
    int best = -1;
    for (int c : candidates(it))
      if (best < 0 || load[static_cast<size_t>(c)] < load[static_cast<size_t>(best)]) best = c;
    owner.push_back(best);
    load[static_cast<size_t>(best)] += bytes(it);
  }
  return owner;
}

}  // namespace

std::string shard_id(const std::string& name, const std::vector<int64_t>& offset) {
  std::string s = "('" + name + "', (";
  for (size_t i = 0; i < offset.size(); ++i) s += (i ? ", " : "") + std::to_string(offset[i]);
  if (offset.size() == 1) s += ",";
  return s + "))";
}

ShardedTensorEntry whole_entry(std::string name, const Tensor& t, bool optimizer) {
  ShardedTensorEntry e;
  e.name = std::move(name);
  e.local = t;
  e.global_shape = t.shape();
  e.pieces = nn::Placement().pieces(t.shape());
  e.optimizer = optimizer;
  return e;
}

std::vector<ShardedTensorEntry> checkpoint_entries(nn::Module& module, const std::map<std::string, Tensor>& model_state,
                                                   const std::map<std::string, Tensor>& optimizer_state) {
  std::map<std::string, nn::Parameter*> params;
  for (auto& [name, p] : module.named_parameters()) params[name] = p;
  auto entry = [&](const std::string& key, const std::string& param, const Tensor& t, bool optimizer) {
    auto it = params.find(param);
    if (it == params.end()) return whole_entry(key, t, optimizer);
    const nn::Parameter& p = *it->second;
    LOOM_CHECK(t.shape() == p.local_shape(), ShapeError, "checkpoint entry '", key, "' is ", t.shape().str(),
               " but parameter '", param, "' holds ", p.local_shape().str(), " on this rank");
    return ShardedTensorEntry{key, t, p.global_shape, p.pieces(), optimizer};
  };
  std::vector<ShardedTensorEntry> out;
  for (const auto& [name, t] : model_state) out.push_back(entry(name, name, t, false));
  for (const auto& [key, t] : optimizer_state) {
    std::string param = key;
    for (const char* prefix : {"main_param.", "adam_m.", "adam_v.", "muon_m."})
      if (key.rfind(prefix, 0) == 0) param = key.substr(std::strlen(prefix));
    out.push_back(param == key ? whole_entry(key, t, true) : entry(key, param, t, true));
  }
  return out;
}

ShardedSave prepare_sharded_save(ProcessGroup& world, const std::vector<ShardedTensorEntry>& entries,
                                 const CheckpointFileName& file_name, bool remove_redundancy) {
  LOOM_TRACE("io", "sharded save plan");
  Json mine = Json::array();
  for (size_t k = 0; k < entries.size(); ++k) {
    const ShardedTensorEntry& e = entries[k];
    int64_t covered = 0;
    for (const nn::Piece& p : e.pieces) covered += p.shape.numel();
    LOOM_CHECK(e.local.defined() && covered == e.local.numel(), ShapeError, "checkpoint entry '", e.name, "': tensor ",
               e.local.defined() ? e.local.shape().str() : std::string("(undefined)"), " has ",
               e.local.defined() ? e.local.numel() : 0, " elements but its pieces cover ", covered);
    const bool whole = e.pieces.size() == 1 && e.pieces[0].shape == e.local.shape();
    const int64_t es = static_cast<int64_t>(dtype_size(e.local.dtype()));
    for (const nn::Piece& p : e.pieces)
      mine.push_back({e.name, reference_dtype_name(e.local.dtype()), dims_of(e.global_shape), p.global_offset,
                      dims_of(p.shape), e.optimizer, p.shape.numel() * es,
                      whole ? Json(nullptr) : Json(p.local_offset), k});
  }
  const std::vector<std::string> all = all_gather_strings(world, mine.dump());

  // Who holds each chunk.
  std::vector<Described> described;
  std::map<std::string, std::vector<size_t>> holders;  // shard id → indices into described
  for (int r = 0; r < static_cast<int>(all.size()); ++r) {
    for (auto& j : Json::parse(all[static_cast<size_t>(r)])) {
      Described d;
      d.rank = r;
      d.name = j[0].get<std::string>();
      d.dtype = j[1].get<std::string>();
      d.global_shape = j[2].get<std::vector<int64_t>>();
      d.offset = j[3].get<std::vector<int64_t>>();
      d.local_shape = j[4].get<std::vector<int64_t>>();
      d.optimizer = j[5].get<bool>();
      d.bytes = j[6].get<int64_t>();
      if (!j[7].is_null()) d.local_offset = j[7].get<std::vector<int64_t>>();
      d.entry = j[8].get<size_t>();
      holders[shard_id(d.name, d.offset)].push_back(described.size());
      described.push_back(std::move(d));
    }
  }
  // Who writes it: every holder, or (remove_redundancy) one, balancing bytes across ranks.
  std::set<size_t> writes;
  if (!remove_redundancy) {
    for (size_t i = 0; i < described.size(); ++i) writes.insert(i);
  } else {
    std::vector<std::vector<size_t>> groups;
    for (auto& [id, idx] : holders) groups.push_back(idx);
    const auto owner = balance<std::vector<size_t>>(
        groups, [&](const std::vector<size_t>& g) {
          std::vector<int> ranks;
          for (size_t i : g) ranks.push_back(described[i].rank);
          return ranks;
        },
        [&](const std::vector<size_t>& g) { return described[g[0]].bytes; }, world.size());
    for (size_t k = 0; k < groups.size(); ++k)
      for (size_t i : groups[k])
        if (described[i].rank == owner[k]) writes.insert(i);
  }

  // A rank stores an entry's whole local tensor when it writes any of its chunks.
  ShardedSave out;
  for (size_t i : writes) {
    if (described[i].rank != world.rank()) continue;
    const ShardedTensorEntry& e = entries[described[i].entry];
    (e.optimizer ? out.optimizer : out.model)[e.name] = e.local;
  }
  if (world.rank() != 0) return out;

  Json state = Json::object(), storage = Json::object();
  for (const Described& d : described) {
    if (!state.contains(d.name)) {
      std::vector<int64_t> frag(d.global_shape.size(), 1);
      state[d.name] = {{"properties",
                        {{"dtype", d.dtype}, {"replica_id", 0}, {"allow_shape_mismatch", false}, {"allow_to_save", true}}},
                       {"global_shape", d.global_shape},
                       {"axis_fragmentations", frag},
                       {"layout", nullptr},
                       {"chunk", Json::array()}};
    }
    Json& entry = state[d.name];
    bool known = false;
    for (auto& c : entry["chunk"]) known = known || (c["global_offset"] == Json(d.offset) && c["local_shape"] == Json(d.local_shape));
    if (!known) {
      entry["chunk"].push_back({{"global_offset", d.offset}, {"local_shape", d.local_shape}});
      // Pieces along each axis: distinct offsets.
      for (size_t a = 0; a < d.global_shape.size(); ++a) {
        std::set<int64_t> offs;
        for (auto& c : entry["chunk"]) offs.insert(c["global_offset"][a].get<int64_t>());
        entry["axis_fragmentations"][a] = static_cast<int64_t>(offs.size());
      }
    }
  }
  for (auto& [id, idx] : holders) {
    std::vector<int> group;
    for (size_t i : idx) group.push_back(described[i].rank);
    Json files = Json::array();
    for (size_t i : idx) {
      if (!writes.count(i)) continue;
      Json file = {{"file_name", file_name(described[i].optimizer, described[i].rank, world.size())},
                   {"storage_rank", described[i].rank},
                   {"rank_group", group}};
      if (!described[i].local_offset.empty()) file["local_offset"] = described[i].local_offset;
      files.push_back(std::move(file));
    }
    storage[id] = files;
  }
  out.metadata = {{"state_dict_metadata", state}, {"storage_data", storage}};
  return out;
}

void load_resharded(const std::string& dir_str, std::vector<ShardedTensorEntry>& entries, bool load_optimizer,
                    ProcessGroup* replicate_group, bool load_balanced) {
  LOOM_TRACE("io", "resharded load");
  const fs::path dir(dir_str);
  const std::map<std::string, SavedTensor> layout = read_layout(dir);
  std::map<std::string, models::SafetensorsFile> open_files;
  auto file = [&](const std::string& name) -> const models::SafetensorsFile& {
    auto it = open_files.find(name);
    if (it == open_files.end()) {
      LOOM_CHECK(fs::exists(dir / name), CheckpointError, "checkpoint '", dir.string(), "' is incomplete: '", name,
                 "' is missing");
      it = open_files.emplace(name, models::SafetensorsFile::open((dir / name).string())).first;
    }
    return it->second;
  };

  std::vector<size_t> wanted;
  for (size_t i = 0; i < entries.size(); ++i)
    if (load_optimizer || !entries[i].optimizer) wanted.push_back(i);
  // load_balanced: replicas need the same shards; each reads a balanced part and broadcasts it.
  const bool balanced = load_balanced && replicate_group && replicate_group->size() > 1;
  std::vector<int> reader(wanted.size(), -1);
  if (balanced) {
    const int n = replicate_group->size();
    std::vector<int> everyone(static_cast<size_t>(n));
    for (int r = 0; r < n; ++r) everyone[static_cast<size_t>(r)] = r;
    reader = balance<size_t>(wanted, [&](const size_t&) { return everyone; },
                             [&](const size_t& i) { return static_cast<int64_t>(entries[i].local.nbytes()); }, n);
  }

  std::vector<std::string> problems;
  for (size_t w = 0; w < wanted.size(); ++w) {
    ShardedTensorEntry& e = entries[wanted[w]];
    if (balanced && reader[w] != replicate_group->rank()) continue;
    auto it = layout.find(e.name);
    if (it == layout.end()) {
      problems.push_back("missing: " + e.name);
      continue;
    }
    if (it->second.global_shape != dims_of(e.global_shape)) {
      problems.push_back("shape mismatch: " + e.name + " is " + shape_of(it->second.global_shape).str() +
                         " in the checkpoint but " + e.global_shape.str() + " in the model");
      continue;
    }
    LOOM_CHECK(e.local.defined(), ShapeError, "load of '", e.name, "': the target tensor must be allocated");
    int64_t covered = 0;
    const int nd = e.global_shape.ndim();
    for (const nn::Piece& piece : e.pieces) {
      for (const Chunk& c : it->second.chunks) {
        // Overlap of the saved chunk with this piece of what the rank holds now.
        std::vector<int64_t> lo(static_cast<size_t>(nd)), len(static_cast<size_t>(nd));
        bool empty = false;
        for (size_t a = 0; a < static_cast<size_t>(nd); ++a) {
          const int64_t mine_lo = piece.global_offset[a], mine_hi = mine_lo + piece.shape[static_cast<int>(a)];
          const int64_t c_lo = c.offset[a], c_hi = c_lo + c.shape[a];
          lo[a] = std::max(mine_lo, c_lo);
          len[a] = std::min(mine_hi, c_hi) - lo[a];
          empty = empty || len[a] <= 0;
        }
        if (empty) continue;
        const Holder* holder = nullptr;
        for (const auto& h : c.holders)
          if (fs::exists(dir / h.file)) {
            holder = &h;
            break;
          }
        LOOM_CHECK(holder != nullptr, CheckpointError, "checkpoint '", dir.string(), "' is incomplete: shard ",
                   shard_id(e.name, c.offset), " is in '", c.holders.front().file, "', which is missing");
        const models::SafetensorsFile& f = file(holder->file);
        LOOM_CHECK(f.contains(e.name), CheckpointError, "'", (dir / holder->file).string(), "' should hold '", e.name,
                   "' (metadata.json says so) but does not; the checkpoint is damaged");
        Tensor src = f.tensor(e.name);
        // A file's dtype label that disagrees with the model is a damaged file or another model's:
        // converting would load garbage (the label's bytes read as another type).
        LOOM_CHECK(src.dtype() == e.local.dtype(), CheckpointError, "'", (dir / holder->file).string(), "': '",
                   e.name, "' is stored as ", dtype_name(src.dtype()), " but the model holds it as ",
                   dtype_name(e.local.dtype()), "; resume with the params_dtype the checkpoint was saved with, or "
                   "the file is damaged");
        // The stored tensor is the chunk itself, or (several chunks per rank) holds it at local_offset.
        std::vector<int64_t> at = holder->local_offset;
        if (at.empty()) {
          LOOM_CHECK(dims_of(src.shape()) == c.shape, CheckpointError, "'", (dir / holder->file).string(), "': '", e.name,
                     "' is ", src.shape().str(), " but metadata.json says ", shape_of(c.shape).str());
          at.assign(static_cast<size_t>(nd), 0);
        }
        bool inside = src.dim() == nd && at.size() == static_cast<size_t>(nd);
        for (int a = 0; inside && a < nd; ++a)
          inside = at[static_cast<size_t>(a)] >= 0 &&
                   at[static_cast<size_t>(a)] + c.shape[static_cast<size_t>(a)] <= src.size(a);
        LOOM_CHECK(inside, CheckpointError, "'", (dir / holder->file).string(), "': '", e.name, "' is ", src.shape().str(),
                   " and cannot hold the chunk at ", shape_id_offset(at), " of ", shape_of(c.shape).str(),
                   " that metadata.json names; the checkpoint is damaged");
        Tensor dst = e.local;
        int64_t volume = 1;
        for (int a = 0; a < nd; ++a) {
          const size_t u = static_cast<size_t>(a);
          src = src.narrow(a, at[u] + lo[u] - c.offset[u], len[u]);
          dst = dst.narrow(a, piece.local_offset[u] + lo[u] - piece.global_offset[u], len[u]);
          volume *= len[u];
        }
        dst.copy_(src);
        covered += volume;
      }
    }
    if (covered != e.local.numel())
      problems.push_back("incomplete: " + e.name + " (" + std::to_string(covered) + " of " +
                         std::to_string(e.local.numel()) + " elements of this rank's shard are in the checkpoint)");
  }
  if (!problems.empty()) {
    std::string text = "cannot load checkpoint '" + dir.string() + "' (" + std::to_string(problems.size()) + " problem" +
                       (problems.size() > 1 ? "s" : "") + "):";
    for (size_t i = 0; i < problems.size() && i < 50; ++i) text += "\n  " + problems[i];
    if (problems.size() > 50) text += "\n  ... and " + std::to_string(problems.size() - 50) + " more";
    LOOM_THROW(CheckpointError, text,
               "\nCheck that it was saved from the same model configuration (or set checkpoint.no_load_optim: True "
               "when only the optimizer state differs).");
  }
  if (balanced)
    for (size_t w = 0; w < wanted.size(); ++w) {
      Tensor& t = entries[wanted[w]].local;
      if (is_comm_dtype(t.dtype()) && t.is_contiguous()) replicate_group->broadcast(t, reader[w]);
      else LOOM_THROW(DTypeError, "load_balanced: '", entries[wanted[w]].name, "' (", dtype_name(t.dtype()),
                      ") cannot be broadcast; set checkpoint.load_balanced: False");
    }
}

}  // namespace loom::dist
