#include <cmath>

#include "loom/config/checks.h"
#include "loom/config/config.h"
#include "loom/config/field_reader.h"
#include "loom/config/overrides.h"
#include "loom/core/log.h"

namespace loom::config {

namespace {

// No field of a configuration means anything by .inf or .nan: a non-finite learning rate, decay
// or epsilon would train to NaN (range rules such as `>= 0` let .inf through). One rule for every
// number in the file, typed or passed through; the model section's reader has the same rule.
void reject_non_finite(const ConfigNode& node, const std::string& path, Diagnostics& diag) {
  if (node.kind == ConfigNode::Kind::floating && !std::isfinite(node.floating)) {
    diag.error(path, "is " + node.text + ", which is not a finite number; write a finite value");
  } else if (node.is_list()) {
    for (std::size_t i = 0; i < node.items.size(); ++i) reject_non_finite(node.items[i], index_path(path, i), diag);
  } else if (node.is_map()) {
    for (const auto& e : node.entries)
      if (!(path.empty() && e.key == "model")) reject_non_finite(e.value, child_path(path, e.key), diag);
  }
}

}  // namespace

LoadedConfig load_config_text(const std::string& yaml, const std::string& source, const LoadOptions& options) {
  Diagnostics diag(source);
  ConfigNode root = parse_config_text(yaml, source, diag, options.limits);
  for (const auto& text : options.overrides) {
    try {
      // Applied to a copy so that a failing override leaves no half-created path behind.
      ConfigNode edited = root;
      apply_override(edited, parse_override(text));
      root = std::move(edited);
    } catch (const ConfigReadError&) {
      throw;
    } catch (const ConfigError& e) {
      const std::string where = "--set " + text;
      std::string message = e.what();
      if (message.rfind(where + ": ", 0) == 0) message = message.substr(where.size() + 2);
      diag.error_at(SourceMark{where, 0, 0}, "", message);
    }
  }
  diag.index_marks(root);
  reject_non_finite(root, "", diag);

  LoadedConfig loaded;
  TrainConfig& config = loaded.config;
  config.source = source;
  config.marks = diag.marks();
  detail::ReadContext ctx{diag, config.explicit_fields};
  detail::read_value(ctx, root, "", config);
  const bool typed_cleanly = !diag.has_errors();

  // The sections optim reads, first: everything after sees the scheduler by its class name and the
  // optimizer's values as the run uses them.
  detail::read_option_sections(config, diag);
  // A mistyped batch size or degree would be replaced by its default and then produce
  // misleading layout errors; the layout waits until the values themselves are right.
  std::optional<int> world_size = options.world_size;
  if (world_size && !typed_cleanly) {
    diag.note("parallel layout not checked: fix the errors above first");
    world_size.reset();
  }
  loaded.resolved = detail::resolve(config, world_size, diag);
  diag.throw_if_errors();
  loaded.warnings = diag.warnings();
  loaded.notes = diag.notes();
  return loaded;
}

LoadedConfig load_config_checked(const std::string& path, const LoadOptions& options) {
  const std::string text = read_config_file(path, options.limits);
  return load_config_text(text, path, options);
}

LoadedConfig load_config(const std::string& path, const LoadOptions& options) {
  LoadedConfig loaded = load_config_checked(path, options);
  for (const auto& w : loaded.warnings) log::warn(w);
  for (const auto& n : loaded.notes) log::info("note: ", n);
  return loaded;
}

}  // namespace loom::config
