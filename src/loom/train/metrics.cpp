#include "loom/train/metrics.h"

#include <cmath>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "loom/core/error.h"

namespace loom::train {

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  long long s = static_cast<long long>(seconds + 0.5);
  char buf[64];
  if (s >= 3600) std::snprintf(buf, sizeof(buf), "%lldh%02lldm", s / 3600, (s % 3600) / 60);
  else if (s >= 60) std::snprintf(buf, sizeof(buf), "%lldm%02llds", s / 60, s % 60);
  else std::snprintf(buf, sizeof(buf), "%llds", s);
  return buf;
}

std::string format_eval_line(const EvalMetrics& e) {
  char buf[256];
  std::snprintf(buf, sizeof(buf), "%s at step %lld: loss %.6f, perplexity %.2f (%lld tokens, %.1fs)",
                e.split == "valid" ? "validation" : e.split.c_str(), static_cast<long long>(e.step), e.loss,
                e.perplexity, static_cast<long long>(e.tokens), e.seconds);
  return buf;
}

std::string format_log_line(const StepMetrics& m) {
  char buf[1024];
  std::string line;
  std::snprintf(buf, sizeof(buf), "{ step:[%5lld/%5lld], consumed_samples: %lld, global_batch_size: %lld, loss: %10.6f, per_step_time: %6lldms",
                static_cast<long long>(m.step), static_cast<long long>(m.max_steps), static_cast<long long>(m.consumed_samples),
                static_cast<long long>(m.global_batch_size), m.loss, static_cast<long long>(m.step_time_s * 1000.0 + 0.5));
  line += buf;
  for (const auto& [k, v] : m.extra) {
    std::snprintf(buf, sizeof(buf), ", %s: %10.6f", k.c_str(), v);
    line += buf;
  }
  std::snprintf(buf, sizeof(buf), ", lr: %10.6e, grad_norm: %10.6f, throughput: %6.2fT, tokens/s: %.0f, mfu: %.1f%%, mem: %.2f/%.2f GiB, eta: %s%s }",
                m.lr, m.grad_norm, m.tflops_per_device, m.tokens_per_s, m.mfu * 100.0,
                static_cast<double>(m.mem_current_bytes) / (1 << 30), static_cast<double>(m.mem_peak_bytes) / (1 << 30),
                format_duration(m.eta_s).c_str(), m.skipped ? ", SKIPPED" : "");
  line += buf;
  if (m.skipped) line.insert(line.size() - 2, " (" + m.skip_reason + ")");
  return line;
}

MetricsWriter::MetricsWriter(const std::string& jsonl_path, const std::string& tensorboard_dir, int tensorboard_interval)
    : tensorboard_interval_(std::max(1, tensorboard_interval)) {
  if (!jsonl_path.empty()) {
    jsonl_path_ = jsonl_path;
    jsonl_.open(jsonl_path, std::ios::app);
    LOOM_CHECK(jsonl_.good(), IOError, "cannot open '", jsonl_path, "' for writing metrics");
  }
  if (!tensorboard_dir.empty()) tensorboard_ = std::make_unique<TensorBoardWriter>(tensorboard_dir);
}

namespace {
// JSON has no NaN/Inf: write them as strings so the line stays parseable and the event visible.
nlohmann::ordered_json number(double v) {
  if (std::isfinite(v)) return v;
  return std::isnan(v) ? "nan" : (v > 0 ? "inf" : "-inf");
}
}  // namespace

void MetricsWriter::set_run_field(const std::string& key, const std::string& value) { run_fields_[key] = value; }

void MetricsWriter::write(const StepMetrics& m) {
  if (jsonl_.is_open()) {
    nlohmann::ordered_json j = {{"step", m.step},
                                {"loss", number(m.loss)},
                                {"lr", number(m.lr)},
                                {"grad_norm", number(m.grad_norm)},
                                {"consumed_samples", m.consumed_samples},
                                {"global_batch_size", m.global_batch_size},
                                {"tokens_per_s", number(m.tokens_per_s)},
                                {"mfu", number(m.mfu)},
                                {"step_time_s", number(m.step_time_s)},
                                {"time_s", number(m.time_s)},
                                {"mem_current_bytes", m.mem_current_bytes},
                                {"mem_peak_bytes", m.mem_peak_bytes}};
    for (const auto& [k, v] : run_fields_) j[k] = v;
    if (m.skipped) {
      j["skipped"] = true;
      j["skip_reason"] = m.skip_reason;
    }
    for (const auto& [k, v] : m.extra) j[k] = number(v);
    for (const auto& [k, v] : pending_) j[k] = number(v);
    jsonl_ << j.dump() << '\n';
    jsonl_.flush();
    // A metrics file cut short (a full disk) would pass for a shorter run: stop instead.
    LOOM_CHECK(jsonl_.good(), IOError, "cannot write '", jsonl_path_, "' at step ", m.step,
               " (the disk may be full): free space or pass --output on another disk, then resume from the last "
               "checkpoint");
  }
  pending_.clear();
  if (tensorboard_ && m.step % tensorboard_interval_ == 0) {
    tensorboard_->add_scalar("loss", m.loss, m.step);
    tensorboard_->add_scalar("lr", m.lr, m.step);
    tensorboard_->add_scalar("grad_norm", m.grad_norm, m.step);
    tensorboard_->add_scalar("throughput/tokens_per_s", m.tokens_per_s, m.step);
    tensorboard_->add_scalar("throughput/mfu", m.mfu, m.step);
    tensorboard_->add_scalar("memory/current_bytes", static_cast<double>(m.mem_current_bytes), m.step);
    tensorboard_->add_scalar("memory/peak_bytes", static_cast<double>(m.mem_peak_bytes), m.step);
    for (const auto& [k, v] : m.extra) tensorboard_->add_scalar(k, v, m.step);
    tensorboard_->flush();
  }
}

void MetricsWriter::write(const EvalMetrics& e) {
  const std::string prefix = e.split == "valid" ? "val" : e.split;
  if (jsonl_.is_open()) {
    nlohmann::ordered_json j = {{"step", e.step},
                                {"eval", e.split},
                                {prefix + "_loss", number(e.loss)},
                                {prefix + "_ppl", number(e.perplexity)},
                                {prefix + "_tokens", e.tokens},
                                {"eval_time_s", number(e.seconds)},
                                {"eval_mem_peak_bytes", e.mem_peak_bytes}};
    for (const auto& [k, v] : run_fields_) j[k] = v;
    jsonl_ << j.dump() << '\n';
    jsonl_.flush();
    LOOM_CHECK(jsonl_.good(), IOError, "cannot write '", jsonl_path_, "' after step ", e.step,
               " (the disk may be full): free space or pass --output on another disk, then resume from the last "
               "checkpoint");
  }
  if (tensorboard_) {
    tensorboard_->add_scalar(prefix + "/loss", e.loss, e.step);
    tensorboard_->add_scalar(prefix + "/ppl", e.perplexity, e.step);
    tensorboard_->flush();
  }
}

void MetricsWriter::write(const std::vector<SampleMetrics>& samples) {
  for (size_t i = 0; i < samples.size(); ++i) {
    const SampleMetrics& s = samples[i];
    if (jsonl_.is_open()) {
      nlohmann::ordered_json j = {{"step", s.step}, {"sample", i}, {"prompt", s.prompt}, {"completion", s.completion}};
      // A model may emit bytes that are not UTF-8 by themselves: kept, as replacement characters.
      jsonl_ << j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << '\n';
    }
    if (tensorboard_) tensorboard_->add_text("samples/" + std::to_string(i), s.prompt + s.completion, s.step);
  }
  if (jsonl_.is_open()) {
    jsonl_.flush();
    LOOM_CHECK(jsonl_.good(), IOError, "cannot write '", jsonl_path_, "' (the disk may be full): free space or pass "
               "--output on another disk, then resume from the last checkpoint");
  }
  if (tensorboard_) tensorboard_->flush();
}

void MetricsWriter::add_scalar(const std::string& tag, double value, int64_t step) {
  pending_[tag] = value;
  if (tensorboard_) tensorboard_->add_scalar(tag, value, step);
}

void MetricsWriter::flush() {
  if (jsonl_.is_open()) jsonl_.flush();
  if (tensorboard_) tensorboard_->flush();
}

}  // namespace loom::train
