// train_dataset as the data loader takes it (spec configuration.md "train_dataset" and the
// keys of MindFormers' BlendedMegatronDatasetDataLoader): the typed fields of the
// section plus the dataloader's pass-through keys (datasets_type, sizes, config), each checked
// here once; data::build_data_loader asserts on the result.
#include <algorithm>
#include <set>

#include "loom/config/checks.h"
#include "loom/core/error.h"
#include "loom/data/blend_split.h"
#include "loom/data/dataset_builder.h"

namespace loom::config::detail {

namespace {

constexpr const char* kLoaderType = "BlendedMegatronDatasetDataLoader";

std::string type_name(const Json& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "bool";
  if (v.is_number_integer()) return "int";
  if (v.is_number_float()) return "float";
  if (v.is_string()) return "string";
  if (v.is_array()) return "list";
  return "map";
}

std::string shown(const Json& v) {
  std::string s = v.dump();
  return s.size() > 80 ? s.substr(0, 77) + "..." : s;
}

std::string got(const Json& v) { return shown(v) + " (" + type_name(v) + ")"; }

// Reads the train_dataset keys; problems go to `diag`, what a loader still needs to `gaps`.
class DatasetReader {
 public:
  DatasetReader(Diagnostics& diag, std::vector<std::string>& gaps) : diag_(diag), gaps_(gaps) {}

  std::optional<std::int64_t> get_int(const Json& v, const std::string& path) {
    if (v.is_number_integer()) return v.get<std::int64_t>();
    diag_.error(path, "expected an integer, got " + got(v));
    return std::nullopt;
  }
  std::optional<bool> get_bool(const Json& v, const std::string& path) {
    if (v.is_boolean()) return v.get<bool>();
    diag_.error(path, "expected True or False, got " + got(v));
    return std::nullopt;
  }
  std::optional<std::string> get_string(const Json& v, const std::string& path) {
    if (v.is_string()) return v.get<std::string>();
    diag_.error(path, "expected a string, got " + got(v));
    return std::nullopt;
  }
  // data_path style lists: strings, or numbers for the weights (YAML `- 0.3` arrives as a float).
  std::vector<std::string> get_path_list(const Json& v, const std::string& path) {
    if (v.is_null()) return {};
    if (v.is_string()) return {v.get<std::string>()};
    if (!v.is_array()) {
      diag_.error(path, "expected a list like ['1.0', '/data/corpus_text_document'], got " + got(v));
      return {};
    }
    std::vector<std::string> out;
    for (std::size_t i = 0; i < v.size(); ++i) {
      const Json& e = v[i];
      if (e.is_string())
        out.push_back(e.get<std::string>());
      else if (e.is_number())
        out.push_back(e.dump());
      else
        diag_.error(index_path(path, i), "expected a weight or a dataset prefix, got " + got(e));
    }
    return out;
  }
  void gap(const std::string& path, const std::string& message) { gaps_.push_back(diag_.positioned(path, message)); }
  // A data-layer parser's ConfigError (its message names the field) as a problem of `path`.
  template <class Parse>
  void parse(const std::string& path, Parse&& parse_value) {
    try {
      parse_value();
    } catch (const ConfigError& e) {
      diag_.error_at(diag_.mark_of(path), "", e.what());
    }
  }
  Diagnostics& diag() { return diag_; }

 private:
  Diagnostics& diag_;
  std::vector<std::string>& gaps_;
};

data::MegatronDataConfig read_megatron_config(const Json& json, const std::string& field, DatasetReader& r) {
  data::MegatronDataConfig c;
  Diagnostics& diag = r.diag();
  if (!json.is_object()) {
    diag.error(field, "expected a map of dataset options, got " + got(json));
    return c;
  }
  bool has_seq_length = false;
  auto set_int = [&](std::int64_t& out, const Json& v, const std::string& f) {
    if (auto n = r.get_int(v, f)) out = *n;
  };
  auto set_bool = [&](bool& out, const Json& v, const std::string& f) {
    if (auto b = r.get_bool(v, f)) out = *b;
  };
  for (auto it = json.begin(); it != json.end(); ++it) {
    const std::string& key = it.key();
    const Json& v = it.value();
    const std::string f = child_path(field, key);
    if (key == "seed" || key == "random_seed") {
      if (auto seed = r.get_int(v, f)) {
        if (*seed >= 0 && *seed <= 0xffffffffLL) c.seed = *seed;
        else diag.error(f, std::to_string(*seed) + " is outside the numpy seed range [0, 4294967295]");
      }
    } else if (key == "seq_length" || key == "sequence_length") {
      has_seq_length = true;
      if (auto n = r.get_int(v, f)) {
        if (*n > 1) c.seq_length = *n;
        else diag.error(f, "must be an integer greater than 1, got " + std::to_string(*n));
      }
    } else if (key == "data_path") {
      c.data_path = r.get_path_list(v, f);
    } else if (key == "split") {
      if (!v.is_null()) c.split = r.get_string(v, f);
    } else if (key == "train_data_path") {
      c.train_data_path = r.get_path_list(v, f);
    } else if (key == "valid_data_path") {
      c.valid_data_path = r.get_path_list(v, f);
    } else if (key == "test_data_path") {
      c.test_data_path = r.get_path_list(v, f);
    } else if (key == "path_to_cache") {
      if (!v.is_null())
        if (auto s = r.get_string(v, f)) c.path_to_cache = *s;
    } else if (key == "num_dataset_builder_threads") {
      if (auto n = r.get_int(v, f)) {
        if (*n >= 1) c.num_dataset_builder_threads = *n;
        else diag.error(f, "must be at least 1, got " + std::to_string(*n));
      }
    } else if (key == "mmap_bin_files") {
      if (!v.is_null()) set_bool(c.mmap_bin_files, v, f);
    } else if (key == "reset_position_ids") {
      set_bool(c.reset_position_ids, v, f);
    } else if (key == "reset_attention_mask") {
      set_bool(c.reset_attention_mask, v, f);
    } else if (key == "eod_mask_loss") {
      set_bool(c.eod_mask_loss, v, f);
    } else if (key == "create_attention_mask") {
      set_bool(c.create_attention_mask, v, f);
    } else if (key == "create_compressed_eod_mask") {
      set_bool(c.create_compressed_eod_mask, v, f);
    } else if (key == "eod_pad_length" || key == "compressed_eod_mask_length") {
      if (auto n = r.get_int(v, f)) {
        if (*n >= 1) c.eod_pad_length = *n;
        else diag.error(f, "must be at least 1, got " + std::to_string(*n));
      }
    } else if (key == "drop_last_partial_validation_sequence") {
      set_bool(c.drop_last_partial_validation_sequence, v, f);
    } else if (key == "add_extra_token_to_sequence") {
      set_bool(c.add_extra_token_to_sequence, v, f);
    } else if (key == "eod") {
      set_int(c.eod, v, f);
    } else if (key == "pad") {
      set_int(c.pad, v, f);
    } else if (key == "s3_cache_path") {
      if (!v.is_null()) diag.error(f, "S3 data loading is not supported; remove the key");
    } else {
      diag.key_warn(f, "is not a " + std::string(kLoaderType) + " option and is ignored");
    }
  }
  if (!has_seq_length)
    r.gap(child_path(field, "seq_length"),
          field + ".seq_length is required (the number of tokens per sample, e.g. 4096)");
  const bool per_split = !c.train_data_path.empty() || !c.valid_data_path.empty() || !c.test_data_path.empty();
  if (per_split) {
    if (!c.data_path.empty())
      diag.error_at(diag.mark_of(child_path(field, "data_path")), "",
                    field + ".data_path and train_data_path/valid_data_path/test_data_path are incompatible; use one");
    if (c.split)
      diag.error_at(diag.mark_of(child_path(field, "split")), "",
                    field + ".split and train_data_path/valid_data_path/test_data_path are incompatible; remove split");
  } else if (c.data_path.empty()) {
    r.gap(child_path(field, "data_path"),
          field + ".data_path is required: a list of dataset prefixes made by `loom preprocess`, e.g. "
                  "['/data/corpus_text_document'] (Loom has no mock data)");
  } else if (!c.split) {
    r.gap(child_path(field, "split"),
          field + ".split must be provided when data_path is given, e.g. \"1,0,0\" or \"949,50,1\"");
  } else {
    r.parse(child_path(field, "split"), [&] { data::parse_split(*c.split, child_path(field, "split")); });
    r.parse(child_path(field, "data_path"), [&] { data::blend_from_list(c.data_path, child_path(field, "data_path")); });
  }
  return c;
}

}  // namespace

LoaderReading read_loader_options(const TrainConfig& config, Diagnostics& diag) {
  LoaderReading out;
  DatasetReader r(diag, out.gaps);
  const TrainDatasetConfig& t = config.train_dataset;
  const DataloaderConfig& d = t.dataloader;
  data::LoaderOptions& o = out.options;
  const std::string dl = "train_dataset.dataloader";
  o.type = d.type;
  o.shuffle = d.shuffle;
  o.drop_remainder = t.drop_remainder;
  o.num_parallel_workers = t.num_parallel_workers;
  o.prefetch_size = t.prefetch_size;
  static const std::set<std::string> known_columns = {"input_ids", "labels", "loss_mask", "position_ids",
                                                      "attention_mask", "actual_seq_len"};
  o.column_names.clear();
  for (std::size_t i = 0; i < d.column_names.size(); ++i) {
    const std::string& name = d.column_names[i];
    if (known_columns.count(name))
      o.column_names.push_back(name);
    else
      diag.error(index_path(dl + ".column_names", i),
                 "unknown column '" + name + "'; a Megatron GPT dataset provides input_ids, labels, loss_mask, "
                 "position_ids, attention_mask and actual_seq_len");
  }
  // The dataloader type is required (check_sections says so when it is missing).
  if (!d.type.empty() && d.type != kLoaderType)
    r.gap(dl + ".type", dl + ".type: '" + d.type + "' is not supported; Loom reads Megatron .bin/.idx datasets with " +
                            kLoaderType);

  const std::vector<std::string> fixed = {"type", "shuffle", "column_names", "python_multiprocessing"};
  bool has_config = false;
  for (auto it = d.extras.begin(); it != d.extras.end(); ++it) {
    const std::string& key = it.key();
    const Json& v = it.value();
    const std::string f = child_path(dl, key);
    if (key == "datasets_type") {
      if (auto s = r.get_string(v, f)) {
        o.datasets_type = *s;
        if (*s != "GPTDataset") r.gap(f, f + ": '" + *s + "' is not supported; use GPTDataset");
      }
    } else if (key == "sizes") {
      if (!v.is_array() || v.size() > data::kNumSplits) {
        diag.error(f, "expected a list of up to 3 sample counts [train, valid, test], got " + shown(v));
        continue;
      }
      for (std::size_t i = 0; i < v.size(); ++i) {
        if (v[i].is_null()) continue;
        const auto n = r.get_int(v[i], index_path(f, i));
        if (!n) continue;
        if (*n >= 0) o.sizes[i] = *n;
        else diag.error(index_path(f, i), "sample count must be >= 0, got " + std::to_string(*n));
      }
    } else if (key == "config") {
      o.config = read_megatron_config(v, f, r);
      has_config = true;
    } else if (const std::string near = closest_match(key, fixed); !near.empty()) {
      diag.warn(f, "is passed to the data loader unchecked; did you mean '" + near + "'?");
    } else {
      diag.key_warn(f, "is not a " + std::string(kLoaderType) + " option and is ignored");
    }
  }
  if (!has_config) r.gap(dl + ".config", dl + ".config is required (seq_length, data_path, split, ...)");
  // The spec: training.seed unifies initialisation and data shuffling; an explicit
  // dataloader.config.seed keeps its own value.
  const bool data_seed = has_config && d.extras["config"].is_object() &&
                         (d.extras["config"].contains("seed") || d.extras["config"].contains("random_seed"));
  o.shuffle_seed = data_seed ? o.config.seed : config.training.seed;
  // Megatron's dense [S, S] mask (create_attention_mask, the reference's default) is causal, or
  // causal within documents with reset_attention_mask; Loom builds that compressed form instead.
  if (has_config && o.config.create_attention_mask && !o.config.create_compressed_eod_mask)
    diag.note(dl + ".config.create_attention_mask is True: Loom builds no dense seq_length x seq_length mask; the "
              "attention is causal by itself" +
              std::string(o.config.reset_attention_mask
                              ? ", and reset_attention_mask's document mask is passed as the documents' ends (the "
                                "compressed form create_compressed_eod_mask gives)"
                              : "") +
              ", with the same losses as the dense mask");
  // Without a loss_mask column the loss mask is input_ids != pad (MindFormers' CrossEntropyLoss),
  // so the dataset's own loss-mask options have nothing to act on.
  const bool mask_column = std::find(o.column_names.begin(), o.column_names.end(), "loss_mask") != o.column_names.end();
  if (!mask_column && o.config.eod_mask_loss)
    diag.warn(dl + ".config.eod_mask_loss",
              "is True but " + dl + ".column_names lists no loss_mask, so the loss counts every position whose input "
              "is not pad (input_ids != pad, the reference's rule without a loss_mask column) and EOD positions are "
              "not masked; add loss_mask to column_names");
  return out;
}

std::int64_t resolve_seq_length(const models::ModelArgs& model, const data::MegatronDataConfig& data,
                                Diagnostics& diag) {
  if (data.seq_length > 0 && model.seq_length > 0 && data.seq_length != model.seq_length)
    diag.error("train_dataset.dataloader.config.seq_length",
               "is " + std::to_string(data.seq_length) + " but model.seq_length is " +
                   std::to_string(model.seq_length) + "; the model is fed the dataset's samples, so both must give "
                   "the same length: write one value in both, or delete model.seq_length");
  return data.seq_length > 0 ? data.seq_length : std::max<std::int64_t>(model.seq_length, 0);
}

void check_evaluation(const TrainConfig& config, const LoaderReading& loader, Diagnostics& diag) {
  if (config.training.eval_interval <= 0 || !loader.gaps.empty()) return;
  const std::string gap = data::split_gap(loader.options.config, loader.options.sizes, data::Split::valid);
  if (!gap.empty())
    diag.error("training.eval_interval", "is " + std::to_string(config.training.eval_interval) +
                                             " but there is no validation data to evaluate: " + gap + ". Give the "
                                             "validation split a share (e.g. split: \"98,2,0\") or "
                                             "valid_data_path, or set training.eval_interval: 0");
}

}  // namespace loom::config::detail
