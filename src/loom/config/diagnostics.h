// Collects every problem of a configuration so that one run reports all of them, each on its
// own line: "<file>:<line>:<col>: <dotted.path>: <what is wrong and how to fix it>".
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "loom/config/config_node.h"
#include "loom/core/error.h"
#include "loom/core/text.h"

namespace loom {
// The configuration cannot be read at all: missing file, not UTF-8 text, not YAML, too large,
// too deep. `loom check-config` exits 2 for these and 1 for every other ConfigError.
class ConfigReadError : public ConfigError { using ConfigError::ConfigError; };
}  // namespace loom

namespace loom::config {

class Diagnostics {
 public:
  explicit Diagnostics(std::string source = "<config>", std::shared_ptr<const SourceMarks> marks = nullptr)
      : source_(std::move(source)), marks_(marks ? std::move(marks) : std::make_shared<const SourceMarks>()) {}

  // Remembers the position of every node under `root` so messages can point at it.
  void index_marks(const ConfigNode& root);
  // The positions indexed (TrainConfig keeps them for checks run after loading).
  const std::shared_ptr<const SourceMarks>& marks() const { return marks_; }
  // The recorded position of the value at `path` (or of its key, for messages about the key
  // itself), else of its nearest recorded ancestor.
  SourceMark mark_of(const std::string& path, bool key = false) const;

  // A problem with the value at `path`.
  void error(const std::string& path, const std::string& message);
  void warn(const std::string& path, const std::string& message);
  // A problem with the key at `path` (unknown, misplaced).
  void key_error(const std::string& path, const std::string& message);
  void key_warn(const std::string& path, const std::string& message);
  // Errors at an explicit position (used while the tree is being built).
  void error_at(const SourceMark& mark, const std::string& path, const std::string& message);
  void warn_at(const SourceMark& mark, const std::string& path, const std::string& message);
  // Something a check could not do (e.g. layer ranges when the model does not say its depth).
  void note(const std::string& message);
  // A note about the key at `path`, with its position.
  void key_note(const std::string& path, const std::string& message);
  // `message` (which names what it is about) prefixed with the position of `path`, as errors are
  // written, without recording it.
  std::string positioned(const std::string& path, const std::string& message, bool key = false) const;

  bool has_errors() const { return !errors_.empty(); }
  const std::vector<std::string>& errors() const { return errors_; }
  const std::vector<std::string>& warnings() const { return warnings_; }
  const std::vector<std::string>& notes() const { return notes_; }
  const std::string& source() const { return source_; }

  // Throws ConfigError listing every error, one per line; does nothing if there are none.
  void throw_if_errors() const;

 private:
  std::string format(const SourceMark& mark, const std::string& path, const std::string& message) const;
  static void index(SourceMarks& marks, const ConfigNode& node, const std::string& path);

  std::string source_;
  std::shared_ptr<const SourceMarks> marks_;
  std::vector<std::string> errors_;
  std::vector<std::string> warnings_;
  std::vector<std::string> notes_;
};

// Did-you-mean hints (loom/core/text.h; optim's messages use them too).
using loom::closest_match;
using loom::closest_matches;
using loom::did_you_mean;

}  // namespace loom::config
