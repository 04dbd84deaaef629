#include "loom/data/tokenizer/chat_template.h"

#include "loom/core/error.h"
#include "loom/data/tokenizer/jinja/interpreter.h"
#include "loom/data/tokenizer/jinja/parser.h"

namespace loom::data {

ChatTemplate::ChatTemplate(const std::string& source, const std::string& origin) : origin_(origin) {
  try {
    body_ = jinja::parse(jinja::tokenize(source));
  } catch (const DataError& e) {
    LOOM_THROW(DataError, origin_, ": chat_template ", e.what(),
               " (Loom renders the Jinja subset of docs/data.md; rewrite that part of the template)");
  }
}

std::string ChatTemplate::render(const nlohmann::ordered_json& variables) const {
  LOOM_CHECK(variables.is_object(), DataError, "chat template variables must be a JSON object");
  jinja::Object globals;
  for (const auto& [name, value] : variables.items()) globals.emplace_back(name, jinja::Value::from_json(value));
  try {
    jinja::Interpreter interpreter(globals);
    return interpreter.render(body_);
  } catch (const DataError& e) {
    LOOM_THROW(DataError, origin_, ": chat_template ", e.what());
  }
}

}  // namespace loom::data
