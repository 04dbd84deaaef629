#include "loom/data/loader_options.h"

#include <set>

#include "loom/core/error.h"
#include "loom/core/log.h"

namespace loom::data {

namespace {

using Json = nlohmann::ordered_json;

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

int64_t get_int(const Json& v, const std::string& field) {
  LOOM_CHECK(v.is_number_integer() && !v.is_boolean(), TypeError, field, ": expected an integer, got ",
             shown(v), " (", type_name(v), ")");
  return v.get<int64_t>();
}

bool get_bool(const Json& v, const std::string& field) {
  LOOM_CHECK(v.is_boolean(), TypeError, field, ": expected True or False, got ", shown(v), " (",
             type_name(v), ")");
  return v.get<bool>();
}

std::string get_string(const Json& v, const std::string& field) {
  LOOM_CHECK(v.is_string(), TypeError, field, ": expected a string, got ", shown(v), " (",
             type_name(v), ")");
  return v.get<std::string>();
}

// data_path style lists: strings, or numbers for the weights (YAML `- 0.3` arrives as a float).
std::vector<std::string> get_path_list(const Json& v, const std::string& field) {
  if (v.is_null()) return {};
  if (v.is_string()) return {v.get<std::string>()};
  LOOM_CHECK(v.is_array(), TypeError, field, ": expected a list like ['1.0', '/data/corpus_text_document'], got ",
             shown(v), " (", type_name(v), ")");
  std::vector<std::string> out;
  for (size_t i = 0; i < v.size(); ++i) {
    const Json& e = v[i];
    if (e.is_string()) {
      out.push_back(e.get<std::string>());
    } else if (e.is_number() && !e.is_boolean()) {
      out.push_back(e.dump());
    } else {
      LOOM_THROW(TypeError, field, "[", i, "]: expected a weight or a dataset prefix, got ", shown(e),
                 " (", type_name(e), ")");
    }
  }
  return out;
}

}  // namespace

MegatronDataConfig MegatronDataConfig::from_json(const Json& json, const std::string& field) {
  MegatronDataConfig c;
  LOOM_CHECK(json.is_object(), TypeError, field, ": expected a map of dataset options, got ", shown(json),
             " (", type_name(json), ")");
  bool has_seq_length = false;
  for (auto it = json.begin(); it != json.end(); ++it) {
    const std::string& key = it.key();
    const Json& v = it.value();
    const std::string f = field + "." + key;
    if (key == "seed" || key == "random_seed") {
      c.seed = get_int(v, f);
      LOOM_CHECK(c.seed >= 0 && c.seed <= 0xffffffffLL, ConfigError, f, ": ", c.seed,
                 " is outside the numpy seed range [0, 4294967295]");
    } else if (key == "seq_length" || key == "sequence_length") {
      c.seq_length = get_int(v, f);
      LOOM_CHECK(c.seq_length > 1, ConfigError, f, ": must be an integer greater than 1, got ", c.seq_length);
      has_seq_length = true;
    } else if (key == "data_path") {
      c.data_path = get_path_list(v, f);
    } else if (key == "split") {
      if (!v.is_null()) c.split = get_string(v, f);
    } else if (key == "train_data_path") {
      c.train_data_path = get_path_list(v, f);
    } else if (key == "valid_data_path") {
      c.valid_data_path = get_path_list(v, f);
    } else if (key == "test_data_path") {
      c.test_data_path = get_path_list(v, f);
    } else if (key == "path_to_cache") {
      if (!v.is_null()) c.path_to_cache = get_string(v, f);
    } else if (key == "num_dataset_builder_threads") {
      c.num_dataset_builder_threads = get_int(v, f);
      LOOM_CHECK(c.num_dataset_builder_threads >= 1, ConfigError, f, ": must be at least 1, got ",
                 c.num_dataset_builder_threads);
    } else if (key == "mmap_bin_files") {
      if (!v.is_null()) c.mmap_bin_files = get_bool(v, f);
    } else if (key == "reset_position_ids") {
      c.reset_position_ids = get_bool(v, f);
    } else if (key == "reset_attention_mask") {
      c.reset_attention_mask = get_bool(v, f);
    } else if (key == "eod_mask_loss") {
      c.eod_mask_loss = get_bool(v, f);
    } else if (key == "create_attention_mask") {
      c.create_attention_mask = get_bool(v, f);
    } else if (key == "create_compressed_eod_mask") {
      c.create_compressed_eod_mask = get_bool(v, f);
    } else if (key == "eod_pad_length" || key == "compressed_eod_mask_length") {
      c.eod_pad_length = get_int(v, f);
      LOOM_CHECK(c.eod_pad_length >= 1, ConfigError, f, ": must be at least 1, got ", c.eod_pad_length);
    } else if (key == "drop_last_partial_validation_sequence") {
      c.drop_last_partial_validation_sequence = get_bool(v, f);
    } else if (key == "add_extra_token_to_sequence") {
      c.add_extra_token_to_sequence = get_bool(v, f);
    } else if (key == "eod") {
      c.eod = get_int(v, f);
    } else if (key == "pad") {
      c.pad = get_int(v, f);
    } else if (key == "s3_cache_path") {
      LOOM_CHECK(v.is_null(), ConfigError, f, ": S3 data loading is not supported; remove the key");
    } else {
      log::warn(f, " is not a BlendedMegatronDatasetDataLoader option and is ignored");
    }
  }
  LOOM_CHECK(has_seq_length, ConfigError, field,
             ".seq_length is required (the number of tokens per sample, e.g. 4096)");
  const bool per_split = !c.train_data_path.empty() || !c.valid_data_path.empty() || !c.test_data_path.empty();
  if (per_split) {
    LOOM_CHECK(c.data_path.empty(), ConfigError, field,
               ".data_path and train_data_path/valid_data_path/test_data_path are incompatible; use one");
    LOOM_CHECK(!c.split.has_value(), ConfigError, field,
               ".split and train_data_path/valid_data_path/test_data_path are incompatible; remove split");
  } else {
    LOOM_CHECK(!c.data_path.empty(), ConfigError, field,
               ".data_path is required: a list of dataset prefixes made by `loom preprocess`, e.g. "
               "['/data/corpus_text_document'] (Loom has no mock data)");
    LOOM_CHECK(c.split.has_value(), ConfigError, field,
               ".split must be provided when data_path is given, e.g. \"1,0,0\" or \"949,50,1\"");
    parse_split(*c.split, field + ".split");       // validate early
    blend_from_list(c.data_path, field + ".data_path");
  }
  return c;
}

LoaderOptions LoaderOptions::from_json(const Json& json, const std::string& field) {
  LOOM_CHECK(json.is_object(), TypeError, field, ": expected a map, got ", shown(json), " (",
             type_name(json), ")");
  LoaderOptions o;
  bool has_config = false;
  const std::string dl_field = field + ".dataloader";
  for (auto it = json.begin(); it != json.end(); ++it) {
    const std::string& key = it.key();
    const Json& v = it.value();
    const std::string f = field + "." + key;
    if (key == "dataloader") {
      LOOM_CHECK(v.is_object(), TypeError, f, ": expected a map, got ", shown(v), " (", type_name(v), ")");
      for (auto d = v.begin(); d != v.end(); ++d) {
        const std::string& dk = d.key();
        const Json& dv = d.value();
        const std::string df = dl_field + "." + dk;
        if (dk == "type") {
          o.type = get_string(dv, df);
        } else if (dk == "datasets_type") {
          o.datasets_type = get_string(dv, df);
        } else if (dk == "sizes") {
          LOOM_CHECK(dv.is_array() && dv.size() <= kNumSplits, TypeError, df,
                     ": expected a list of up to 3 sample counts [train, valid, test], got ", shown(dv));
          for (size_t i = 0; i < dv.size(); ++i) {
            if (dv[i].is_null()) continue;
            const int64_t n = get_int(dv[i], df + "[" + std::to_string(i) + "]");
            LOOM_CHECK(n >= 0, ConfigError, df, "[", i, "]: sample count must be >= 0, got ", n);
            o.sizes[i] = n;
          }
        } else if (dk == "column_names") {
          LOOM_CHECK(dv.is_array(), TypeError, df, ": expected a list of column names, got ", shown(dv));
          static const std::set<std::string> known = {"input_ids", "labels", "loss_mask", "position_ids",
                                                      "attention_mask", "actual_seq_len"};
          o.column_names.clear();
          for (size_t i = 0; i < dv.size(); ++i) {
            const std::string name = get_string(dv[i], df + "[" + std::to_string(i) + "]");
            LOOM_CHECK(known.count(name) == 1, ConfigError, df, "[", i, "]: unknown column '", name,
                       "'; a Megatron GPT dataset provides input_ids, labels, loss_mask, position_ids, "
                       "attention_mask and actual_seq_len");
            o.column_names.push_back(name);
          }
        } else if (dk == "shuffle") {
          o.shuffle = get_bool(dv, df);
        } else if (dk == "python_multiprocessing") {
          get_bool(dv, df);  // accepted for compatibility; Loom's workers are threads
        } else if (dk == "config") {
          o.config = MegatronDataConfig::from_json(dv, df);
          has_config = true;
        } else {
          log::warn(df, " is not a BlendedMegatronDatasetDataLoader option and is ignored");
        }
      }
    } else if (key == "drop_remainder") {
      o.drop_remainder = get_bool(v, f);
    } else if (key == "num_parallel_workers") {
      o.num_parallel_workers = get_int(v, f);
      LOOM_CHECK(o.num_parallel_workers >= 0 && o.num_parallel_workers <= 256, ConfigError, f,
                 ": must be in [0, 256], got ", o.num_parallel_workers);
    } else if (key == "prefetch_size") {
      o.prefetch_size = get_int(v, f);
      LOOM_CHECK(o.prefetch_size >= 1, ConfigError, f, ": must be at least 1, got ", o.prefetch_size);
    } else if (key == "numa_enable" || key == "use_distribute_dataset") {
      get_bool(v, f);  // accepted; NUMA placement is left to the OS, every rank reads its shard
    } else {
      log::warn(f, " is not a train_dataset option and is ignored");
    }
  }
  LOOM_CHECK(json.contains("dataloader"), ConfigError, dl_field,
             " is required: the data source must be provided (type: BlendedMegatronDatasetDataLoader)");
  LOOM_CHECK(o.type == "BlendedMegatronDatasetDataLoader", ConfigError, dl_field, ".type: '", o.type,
             "' is not supported; Loom reads Megatron .bin/.idx datasets with "
             "BlendedMegatronDatasetDataLoader");
  LOOM_CHECK(o.datasets_type == "GPTDataset", ConfigError, dl_field, ".datasets_type: '",
             o.datasets_type, "' is not supported; use GPTDataset");
  LOOM_CHECK(has_config, ConfigError, dl_field,
             ".config is required (seq_length, data_path, split, ...)");
  return o;
}

LoaderOptions LoaderOptions::from_sections(const std::string& type, bool shuffle,
                                          const std::vector<std::string>& column_names,
                                          const Json& dataloader_extras, bool drop_remainder,
                                          int64_t num_parallel_workers, int64_t prefetch_size) {
  Json dataloader = Json::object();
  dataloader["type"] = type;
  dataloader["shuffle"] = shuffle;
  dataloader["column_names"] = column_names;
  if (!dataloader_extras.is_null()) {
    LOOM_CHECK(dataloader_extras.is_object(), TypeError, "train_dataset.dataloader: expected a map, got ",
               shown(dataloader_extras));
    for (auto it = dataloader_extras.begin(); it != dataloader_extras.end(); ++it) dataloader[it.key()] = it.value();
  }
  Json section = Json::object();
  section["dataloader"] = std::move(dataloader);
  section["drop_remainder"] = drop_remainder;
  section["num_parallel_workers"] = num_parallel_workers;
  section["prefetch_size"] = prefetch_size;
  return from_json(section);
}

}  // namespace loom::data
