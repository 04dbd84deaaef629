// Training callbacks: events around the loop (on_begin … on_end), a registry of callback types
// by name, and the `callbacks:` list of the config ({type: <registered name>, **kwargs}).
// The built-in behaviours (step log line, checkpointing, monitoring) are callbacks too, created
// by the trainer before the user's.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace loom::train {

class Trainer;
struct StepMetrics;

// What every event sees. Pointers stay valid for the whole run.
struct CallbackContext {
  Trainer* trainer = nullptr;
  StepMetrics* metrics = nullptr;  // on_step_end: the step's metrics (callbacks may add `extra`)
};

class Callback {
 public:
  virtual ~Callback() = default;
  virtual std::string name() const = 0;
  virtual void on_begin(CallbackContext&) {}
  virtual void on_train_begin(CallbackContext&) {}
  virtual void on_epoch_begin(CallbackContext&) {}
  virtual void on_step_begin(CallbackContext&) {}
  virtual void on_step_end(CallbackContext&) {}
  virtual void on_epoch_end(CallbackContext&) {}
  virtual void on_train_end(CallbackContext&) {}
  virtual void on_end(CallbackContext&) {}
};

using CallbackFactory = std::function<std::unique_ptr<Callback>(const nlohmann::ordered_json& kwargs)>;

class CallbackRegistry {
 public:
  static CallbackRegistry& instance();
  void add(const std::string& type, CallbackFactory factory);
  bool contains(const std::string& type) const;
  std::vector<std::string> names() const;
  // ConfigError naming `field` and listing the registered names when `type` is unknown.
  std::unique_ptr<Callback> create(const std::string& type, const nlohmann::ordered_json& kwargs,
                                   const std::string& field) const;

 private:
  std::map<std::string, CallbackFactory> factories_;
};

// Registers a type at static-initialisation time: LOOM_REGISTER_CALLBACK("MyCallback", factory).
struct CallbackRegistration {
  CallbackRegistration(const std::string& type, CallbackFactory factory) {
    CallbackRegistry::instance().add(type, std::move(factory));
  }
};

// Reads an integer kwarg (> 0) with a clear error naming `field`.
int64_t positive_int_kwarg(const nlohmann::ordered_json& kwargs, const std::string& key, int64_t fallback,
                           const std::string& field);
// Throws ConfigError when kwargs has keys outside `allowed`.
void check_kwargs(const nlohmann::ordered_json& kwargs, const std::vector<std::string>& allowed,
                  const std::string& type, const std::string& field);

// Makes the built-in callback types known to the registry (safe to call more than once).
void register_builtin_callbacks();

}  // namespace loom::train
