// The effective configuration as YAML: the same visit() lists that read the sections write
// them, so a field cannot be read but forgotten here. Scalars are written so that both Loom
// (YAML 1.2) and PyYAML (YAML 1.1) read them back with the same type.
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "loom/config/config.h"
#include "loom/config/field_reader.h"
#include "loom/config/yaml_scalar.h"

namespace loom::config {

namespace {

using detail::is_optional;
using detail::is_variant;
using detail::is_vector;
using detail::Section;

void emit_string(YAML::Emitter& out, const std::string& s) {
  // YAML 1.1 readers would also take these words as booleans.
  static const char* const yaml11_words[] = {"yes", "Yes", "YES", "no", "No", "NO", "on", "On", "ON",
                                             "off", "Off", "OFF", "y", "Y", "n", "N"};
  bool quote = s.empty() || !plain_text_stays_string(s);
  for (const char* w : yaml11_words) quote |= s == w;
  if (quote) out << YAML::DoubleQuoted << s;
  else out << s;
}

void emit_json(YAML::Emitter& out, const Json& v) {
  if (v.is_null()) out << YAML::Null;
  else if (v.is_boolean()) out << (v.get<bool>() ? "true" : "false");
  else if (v.is_number_integer()) out << v.get<std::int64_t>();
  else if (v.is_number_float()) out << format_float(v.get<double>());
  else if (v.is_string()) emit_string(out, v.get<std::string>());
  else if (v.is_array()) {
    const bool flat = std::all_of(v.begin(), v.end(), [](const Json& x) { return x.is_primitive(); });
    if (flat) out << YAML::Flow;
    out << YAML::BeginSeq;
    for (const auto& x : v) emit_json(out, x);
    out << YAML::EndSeq;
  } else {
    if (v.empty()) out << YAML::Flow;
    out << YAML::BeginMap;
    for (auto it = v.begin(); it != v.end(); ++it) {
      out << YAML::Key;
      emit_string(out, it.key());
      out << YAML::Value;
      emit_json(out, it.value());
    }
    out << YAML::EndMap;
  }
}

template <class T>
void emit(YAML::Emitter& out, const T& v);

struct FieldWriter {
  YAML::Emitter& out;

  template <class T>
  void operator()(const char* name, const T& field) {
    // Optional sections that were not given stay out of the file (context, lora_config).
    if constexpr (is_optional<T>::value) {
      if constexpr (Section<typename T::value_type>)
        if (!field) return;
    }
    out << YAML::Key << name << YAML::Value;
    emit(out, field);
  }
  template <class T>
  void alias(const char*, const char*, const T&) {}
};

template <class T>
void emit(YAML::Emitter& out, const T& v) {
  if constexpr (std::is_same_v<T, bool>) out << (v ? "true" : "false");
  else if constexpr (std::is_integral_v<T>) out << static_cast<std::int64_t>(v);
  else if constexpr (std::is_floating_point_v<T>) out << format_float(v);
  else if constexpr (std::is_same_v<T, std::string>) emit_string(out, v);
  else if constexpr (std::is_same_v<T, Json>) emit_json(out, v);
  else if constexpr (std::is_same_v<T, LayerSpecs>) {
    out << YAML::Flow << YAML::BeginSeq;
    for (const auto& s : v.specs) emit_string(out, s);
    out << YAML::EndSeq;
  } else if constexpr (std::is_same_v<T, ModuleSelectMap>) {
    out << YAML::BeginMap;
    for (const auto& e : v.entries) {
      out << YAML::Key;
      emit_string(out, e.pattern);
      out << YAML::Value;
      emit(out, e.layers);
    }
    out << YAML::EndMap;
  } else if constexpr (std::is_same_v<T, PipelineLayersPerStage>) {
    if (v.is_auto) {
      out << "auto";
    } else if (!v.nested_ints.empty()) {
      out << YAML::BeginSeq;
      for (const auto& ids : v.nested_ints) emit(out, ids);
      out << YAML::EndSeq;
    } else {
      out << YAML::BeginSeq;
      for (const auto& s : v.stages) out << YAML::DoubleQuoted << s;
      out << YAML::EndSeq;
    }
  } else if constexpr (is_vector<T>::value) {
    using Item = typename T::value_type;
    constexpr bool flat = std::is_arithmetic_v<Item> || std::is_same_v<Item, std::string> || is_vector<Item>::value;
    if (flat || v.empty()) out << YAML::Flow;
    out << YAML::BeginSeq;
    for (const auto& x : v) emit(out, x);
    out << YAML::EndSeq;
  } else if constexpr (is_optional<T>::value) {
    if (v) emit(out, *v);
    else out << YAML::Null;
  } else if constexpr (is_variant<T>::value) {
    std::visit([&](const auto& x) { emit(out, x); }, v);
  } else if constexpr (Section<T>) {
    out << YAML::BeginMap;
    FieldWriter writer{out};
    T::visit(v, writer);
    if constexpr (T::kAllowExtra) {
      for (auto it = v.extras.begin(); it != v.extras.end(); ++it) {
        out << YAML::Key;
        emit_string(out, it.key());
        out << YAML::Value;
        emit_json(out, it.value());
      }
    }
    out << YAML::EndMap;
  }
}

// Writes the top-level sections; parallelism without pipeline_parallel_microbatch_size, which
// is derived from the batch sizes and would read back as a user setting.
struct SkipMicrobatch {
  FieldWriter& w;
  template <class T>
  void operator()(const char* n, const T& f) {
    if (std::string(n) != "pipeline_parallel_microbatch_size") w(n, f);
  }
  template <class T>
  void alias(const char*, const char*, const T&) {}
};

struct TopWriter {
  YAML::Emitter& out;
  FieldWriter fields{out};
  template <class T>
  void operator()(const char* name, const T& field) { fields(name, field); }
  void operator()(const char* name, const ParallelismConfig& p) {
    out << YAML::Key << name << YAML::Value << YAML::BeginMap;
    SkipMicrobatch skip{fields};
    ParallelismConfig::visit(p, skip);
    out << YAML::EndMap;
  }
  template <class T>
  void alias(const char*, const char*, const T&) {}
};

// Values as they take effect, so that the file says what ran and loads again without warnings.
TrainConfig effective_view(const TrainConfig& c) {
  TrainConfig v = c;
  ParallelismConfig& p = v.parallelism;
  p.sequence_parallel = p.sequence_parallel || p.tensor_parallel > 1;
  std::string schedule = p.pipeline_parallel_schedule;
  std::transform(schedule.begin(), schedule.end(), schedule.begin(), [](unsigned char ch) { return std::tolower(ch); });
  if (p.pipeline_parallel > 1 && schedule == "1f1b" && p.pipeline_parallel_interleave_num > 1)
    schedule = "interleaved_1f1b";
  p.pipeline_parallel_schedule = schedule;
  // The fields Loom does not act on (inert_fields.cpp), as what Loom does.
  v.training.deterministic = true;
  p.data_parallel_shard_strategy = "optim_grads_params";
  p.dense_fsdp_shard_size.reset();
  p.enable_mc2 = false;
  p.enable_loss_parallel = p.tensor_parallel > 1;
  p.expert_parallel_async_d2h = false;
  p.expert_parallel_use_safe_tokens = false;
  p.pipeline_parallel_p2p_transport = "plain";
  p.pipeline_parallel_enable_dxdw_split = false;
  v.train_dataset.use_distribute_dataset = false;
  v.train_dataset.numa_enable = false;
  v.train_dataset.dataloader.python_multiprocessing = false;
  v.profiler.mstx = false;
  v.profiler.with_stack = false;
  v.profiler.profile_cpu = true;
  v.checkpoint.save_global_layout_cache = true;
  v.checkpoint.load_worker_number = 1;
  v.checkpoint.reshard_worker_num = 1;
  return v;
}

}  // namespace

std::string effective_config_yaml(const TrainConfig& config) {
  const TrainConfig view = effective_view(config);
  YAML::Emitter out;
  out.SetIndent(2);
  out.SetNullFormat(YAML::LowerNull);
  out << YAML::BeginMap;
  TopWriter top{out};
  TrainConfig::visit(view, top);
  for (auto it = view.extras.begin(); it != view.extras.end(); ++it) {
    out << YAML::Key;
    emit_string(out, it.key());
    out << YAML::Value;
    emit_json(out, it.value());
  }
  out << YAML::EndMap;
  std::string header = "# Effective Loom configuration";
  if (!config.source.empty()) header += " of " + config.source;
  header += " (defaults filled in, overrides applied)\n";
  return header + out.c_str() + "\n";
}

void write_effective_config(const TrainConfig& config, const std::string& path) {
  const std::string text = effective_config_yaml(config);
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) LOOM_THROW(IOError, tmp, ": cannot be created to write the effective configuration (check the directory)");
    f << text;
    f.flush();
    if (!f) LOOM_THROW(IOError, tmp, ": write failed (disk full?)");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) LOOM_THROW(IOError, "cannot rename ", tmp, " to ", path, ": ", ec.message());
}

}  // namespace loom::config
