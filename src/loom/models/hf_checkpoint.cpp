#include "loom/models/hf_checkpoint.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "loom/core/error.h"
#include "loom/core/text.h"
#include "loom/core/regular_file.h"
#include "loom/models/hf_config.h"
#include "loom/models/hf_weights.h"
#include "loom/models/safetensors.h"

namespace loom::models {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

namespace {

Json read_json_file(const std::string& path) {
  require_regular_file(path, "Hugging Face file", "config.json and the weight index must be regular files");
  std::ifstream in(path);
  LOOM_CHECK(in.good(), IOError, "cannot open ", path);
  std::stringstream ss;
  ss << in.rdbuf();
  try {
    return Json::parse(ss.str());
  } catch (const nlohmann::json::parse_error& e) {
    LOOM_THROW(CheckpointError, path, ": invalid JSON near byte ", e.byte, ": ", json_error_text(e.what()),
               "; the file must be the config.json saved with the model");
  } catch (const nlohmann::json::exception& e) {  // e.g. a number beyond double
    LOOM_THROW(CheckpointError, path, ": invalid JSON: ", json_error_text(e.what()));
  }
}

void write_text_atomic(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    LOOM_CHECK(out.good(), IOError, "cannot create ", tmp);
    out << text;
    out.flush();
    LOOM_CHECK(out.good(), IOError, "cannot write ", tmp);
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  LOOM_CHECK(!ec, IOError, "cannot rename ", tmp, " to ", path, ": ", ec.message());
}

std::string shard_name(size_t i, size_t n) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "model-%05zu-of-%05zu.safetensors", i + 1, n);
  return buf;
}

}  // namespace

bool is_hf_folder(const std::string& dir) {
  return fs::is_regular_file(fs::path(dir) / "config.json") &&
         (fs::is_regular_file(fs::path(dir) / "model.safetensors") ||
          fs::is_regular_file(fs::path(dir) / "model.safetensors.index.json"));
}

Json read_hf_config(const std::string& dir) {
  const std::string path = (fs::path(dir) / "config.json").string();
  LOOM_CHECK(fs::is_regular_file(path), CheckpointError, dir,
             " is not an HF model folder: config.json is missing");
  Json j = read_json_file(path);
  LOOM_CHECK(j.is_object(), CheckpointError, path, ": must be a JSON object");
  return j;
}

std::map<std::string, Tensor> read_hf_tensors(const std::string& dir, bool copy) {
  const fs::path root(dir);
  const fs::path index_path = root / "model.safetensors.index.json";
  if (!fs::is_regular_file(index_path)) {
    const fs::path single = root / "model.safetensors";
    LOOM_CHECK(fs::is_regular_file(single), CheckpointError, dir,
               " holds neither model.safetensors nor model.safetensors.index.json");
    return read_safetensors(single.string(), nullptr, copy);
  }
  Json index = read_json_file(index_path.string());
  LOOM_CHECK(index.is_object() && index.contains("weight_map") && index["weight_map"].is_object(), CheckpointError,
             index_path.string(), ": needs a \"weight_map\" object {tensor name: shard file}");
  std::map<std::string, std::set<std::string>> by_file;
  for (auto it = index["weight_map"].begin(); it != index["weight_map"].end(); ++it) {
    LOOM_CHECK(it.value().is_string(), CheckpointError, index_path.string(), ": weight_map[\"", it.key(),
               "\"] must be a file name");
    by_file[it.value().get<std::string>()].insert(it.key());
  }
  std::map<std::string, Tensor> out;
  for (const auto& [file, names] : by_file) {
    const fs::path shard = root / file;
    LOOM_CHECK(fs::is_regular_file(shard), CheckpointError, index_path.string(), " names shard ", file,
               " which does not exist in ", dir);
    SafetensorsFile f = SafetensorsFile::open(shard.string());
    for (const auto& name : names)
      LOOM_CHECK(f.contains(name), CheckpointError, shard.string(), ": the index places \"", name,
                 "\" in this shard but it is not there");
    for (const auto& e : f.entries()) {
      LOOM_CHECK(names.count(e.name), CheckpointError, shard.string(), ": tensor \"", e.name,
                 "\" is not listed for this file in model.safetensors.index.json");
      out[e.name] = f.tensor(e.name, copy);
    }
  }
  return out;
}

HfModel load_hf_model(const std::string& dir, const Json& overrides) {
  Json config = read_hf_config(dir);
  LOOM_CHECK(overrides.is_object(), ConfigError, "model overrides must be a mapping");
  for (auto it = overrides.begin(); it != overrides.end(); ++it) config[it.key()] = it.value();
  HfModel m;
  m.args = ModelArgs::from_json(config, "model");
  m.state = from_hf_weights(m.args, read_hf_tensors(dir), dir);
  return m;
}

void save_hf_model(const std::string& dir, const ModelArgs& args, const std::map<std::string, Tensor>& loom_state,
                   const HfSaveOptions& options) {
  Json config = to_hf_config(args);  // first: an unrepresentable model fails before any write
  std::vector<std::pair<std::string, Tensor>> tensors = to_hf_weights(args, loom_state);
  DType stored = DType::f32;
  for (auto& [name, t] : tensors) {
    if (options.dtype && is_floating(t.dtype()) && !name.ends_with("e_score_correction_bias"))
      t = t.to(*options.dtype);
    if (name == "model.embed_tokens.weight") stored = t.dtype();
  }
  config["torch_dtype"] = dtype_name(stored);
  std::error_code ec;
  fs::create_directories(dir, ec);
  LOOM_CHECK(!ec, IOError, "cannot create ", dir, ": ", ec.message());

  std::vector<std::vector<std::pair<std::string, Tensor>>> shards(1);
  int64_t shard_bytes = 0, total = 0;
  for (auto& entry : tensors) {
    const int64_t n = static_cast<int64_t>(entry.second.nbytes());
    if (shard_bytes > 0 && shard_bytes + n > options.max_shard_bytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().push_back(entry);
    shard_bytes += n;
    total += n;
  }
  const std::map<std::string, std::string> meta{{"format", "pt"}};
  // Files left by an earlier export with another shard count would confuse HF's loader.
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string f = e.path().filename().string();
    if (f == "model.safetensors" || f == "model.safetensors.index.json" ||
        (f.starts_with("model-") && f.ends_with(".safetensors")))
      fs::remove(e.path(), ec);
  }
  if (shards.size() == 1) {
    write_safetensors((fs::path(dir) / "model.safetensors").string(), shards[0], meta);
  } else {
    Json index;
    index["metadata"] = Json{{"total_size", total}};
    Json map = Json::object();
    for (size_t i = 0; i < shards.size(); ++i) {
      const std::string file = shard_name(i, shards.size());
      write_safetensors((fs::path(dir) / file).string(), shards[i], meta);
      for (const auto& [name, t] : shards[i]) map[name] = file;
    }
    index["weight_map"] = map;
    write_text_atomic((fs::path(dir) / "model.safetensors.index.json").string(), index.dump(2) + "\n");
  }
  write_text_atomic((fs::path(dir) / "config.json").string(), config.dump(2) + "\n");
}

}  // namespace loom::models
