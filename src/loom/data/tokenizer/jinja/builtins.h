// The filters, tests, methods and global functions chat templates call, each with jinja2's or
// Python's behaviour (transformers' own tojson, raise_exception and strftime_now included).
// An unknown one is a DataError naming it; `line` is where the template calls it.
#pragma once

#include <string>

#include "loom/data/tokenizer/jinja/value.h"

namespace loom::data::jinja {

Value apply_filter(const std::string& name, const Value& target, const Arguments& args, int line);
bool apply_test(const std::string& name, const Value& target, const Arguments& args, int line);
// `target.name` for a str or dict method (bound to target); undefined when there is none.
Value method(const Value& target, const std::string& name, int line);
// namespace, raise_exception, range, strftime_now, dict.
Object global_functions();

// Python's str helpers the interpreter needs too.
size_t code_point_count(const std::string& s);
// The code points of s as UTF-8 strings (for indexing, slicing and iteration).
std::vector<std::string> code_points(const std::string& s);
std::string python_strip(const std::string& s, const Value* chars, bool left, bool right);

}  // namespace loom::data::jinja
