#include "loom/data/tokenizer/jinja/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "loom/core/error.h"

namespace loom::data::jinja {

const Value* Arguments::keyword(const std::string& name) const {
  for (const auto& [k, v] : keywords) {
    if (k == name) return &v;
  }
  return nullptr;
}

Value Value::from_json(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return none();
    case nlohmann::ordered_json::value_t::boolean: return of(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
    case nlohmann::ordered_json::value_t::number_unsigned: return of(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_float: return of(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return of(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      Array a;
      for (const auto& item : j) a.push_back(from_json(item));
      return of(std::move(a));
    }
    case nlohmann::ordered_json::value_t::object: {
      Object o;
      for (const auto& [k, item] : j.items()) o.emplace_back(k, from_json(item));
      return of(std::move(o));
    }
    default: return Value();
  }
}

bool Value::truthy() const {
  switch (kind) {
    case Kind::undefined: case Kind::none: return false;
    case Kind::boolean: return boolean;
    case Kind::integer: return integer != 0;
    case Kind::floating: return floating != 0;
    case Kind::string: return !string.empty();
    case Kind::array: return !array->empty();
    case Kind::object: return !object->empty();
    case Kind::function: return true;
  }
  return false;
}

const Value* Value::find(const std::string& key) const {
  if (kind != Kind::object) return nullptr;
  for (const auto& [k, v] : *object) {
    if (k == key) return &v;
  }
  return nullptr;
}

std::string Value::type_name() const {
  switch (kind) {
    case Kind::undefined: return "undefined";
    case Kind::none: return "NoneType";
    case Kind::boolean: return "bool";
    case Kind::integer: return "int";
    case Kind::floating: return "float";
    case Kind::string: return "str";
    case Kind::array: return is_tuple ? "tuple" : "list";
    case Kind::object: return is_namespace ? "Namespace" : "dict";
    case Kind::function: return "function";
  }
  return "?";
}

bool equals(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) return a.number() == b.number();
  if ((a.kind == Value::Kind::boolean) != (b.kind == Value::Kind::boolean)) {
    // Python: True == 1; a bool and a number compare as numbers.
    const auto as_number = [](const Value& v) { return v.kind == Value::Kind::boolean ? (v.boolean ? 1.0 : 0.0) : v.number(); };
    if ((a.is_number() || a.kind == Value::Kind::boolean) && (b.is_number() || b.kind == Value::Kind::boolean)) {
      return as_number(a) == as_number(b);
    }
    return false;
  }
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Value::Kind::undefined: case Value::Kind::none: return true;
    case Value::Kind::boolean: return a.boolean == b.boolean;
    case Value::Kind::string: return a.string == b.string;
    case Value::Kind::array:
      return a.array->size() == b.array->size() &&
             std::equal(a.array->begin(), a.array->end(), b.array->begin(), equals);
    case Value::Kind::object: {
      if (a.object->size() != b.object->size()) return false;
      for (const auto& [k, v] : *a.object) {
        const Value* other = b.find(k);
        if (other == nullptr || !equals(v, *other)) return false;
      }
      return true;
    }
    case Value::Kind::function: return a.function == b.function;
    default: return false;
  }
}

std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string sci(buf, r.ptr);  // "-1.2345e+02"
  const size_t e = sci.find('e');
  const int exponent = std::stoi(sci.substr(e + 1));
  std::string digits;
  for (size_t i = 0; i < e; ++i) {
    if (std::isdigit(static_cast<unsigned char>(sci[i]))) digits += sci[i];
  }
  const std::string sign = d < 0 ? "-" : "";
  if (exponent < -4 || exponent >= 16) {  // Python's repr switches to exponents here
    std::string mantissa = digits.substr(0, 1) + (digits.size() > 1 ? "." + digits.substr(1) : "");
    char exp[16];
    std::snprintf(exp, sizeof(exp), "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    return sign + mantissa + exp;
  }
  std::string out;
  if (exponent < 0) {
    out = "0." + std::string(static_cast<size_t>(-exponent - 1), '0') + digits;
  } else if (static_cast<size_t>(exponent) + 1 >= digits.size()) {
    out = digits + std::string(static_cast<size_t>(exponent) + 1 - digits.size(), '0') + ".0";
  } else {
    out = digits.substr(0, static_cast<size_t>(exponent) + 1) + "." + digits.substr(static_cast<size_t>(exponent) + 1);
  }
  return sign + out;
}

namespace {

std::string repr_string(const std::string& s) {
  // Python prefers single quotes unless the text holds one and no double quote.
  const bool use_double = s.find('\'') != std::string::npos && s.find('"') == std::string::npos;
  const char quote = use_double ? '"' : '\'';
  std::string out(1, quote);
  for (const char c : s) {
    switch (c) {
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c == quote) {
          out += '\\';
          out += c;
        } else if (static_cast<unsigned char>(c) < 0x20 || c == 0x7F) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\x%02x", static_cast<unsigned char>(c));
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out + quote;
}

std::string json_string(const std::string& s, bool ensure_ascii) {
  std::string out = "\"";
  for (size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20 || (ensure_ascii && c >= 0x80)) {
          uint32_t cp = c;
          if (c >= 0x80) {  // decode the UTF-8 character to escape it as \uXXXX (surrogate pairs)
            const int n = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
            cp = c & (0x3F >> (n - 1));
            for (int k = 1; k < n && i + 1 < s.size(); ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[++i]) & 0x3F);
          }
          char buf[16];
          if (cp >= 0x10000) {
            cp -= 0x10000;
            std::snprintf(buf, sizeof(buf), "\\u%04x\\u%04x", 0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF));
          } else {
            std::snprintf(buf, sizeof(buf), "\\u%04x", cp);
          }
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

}  // namespace

std::string to_str(const Value& v) {
  switch (v.kind) {
    case Value::Kind::undefined: return "";
    case Value::Kind::string: return v.string;
    default: return repr(v);
  }
}

std::string repr(const Value& v) {
  switch (v.kind) {
    case Value::Kind::undefined: return "";
    case Value::Kind::none: return "None";
    case Value::Kind::boolean: return v.boolean ? "True" : "False";
    case Value::Kind::integer: return std::to_string(v.integer);
    case Value::Kind::floating: return float_repr(v.floating);
    case Value::Kind::string: return repr_string(v.string);
    case Value::Kind::array: {
      std::string out = v.is_tuple ? "(" : "[";
      for (size_t i = 0; i < v.array->size(); ++i) out += (i ? ", " : "") + repr((*v.array)[i]);
      if (v.is_tuple && v.array->size() == 1) out += ",";
      return out + (v.is_tuple ? ")" : "]");
    }
    case Value::Kind::object: {
      if (v.is_namespace) return "<Namespace>";
      std::string out = "{";
      size_t i = 0;
      for (const auto& [k, item] : *v.object) out += (i++ ? ", " : "") + repr_string(k) + ": " + repr(item);
      return out + "}";
    }
    case Value::Kind::function: return "<function>";
  }
  return "";
}

std::string to_json(const Value& v, const JsonFormat& f, int depth) {
  const std::string newline = f.indent >= 0 ? "\n" + std::string(static_cast<size_t>(f.indent * (depth + 1)), ' ') : "";
  const std::string closing = f.indent >= 0 ? "\n" + std::string(static_cast<size_t>(f.indent * depth), ' ') : "";
  // With an indent, json.dumps ends items with "," and the newline carries the spacing.
  const std::string item_separator = !f.item_separator.empty() ? f.item_separator : f.indent >= 0 ? "," : ", ";
  switch (v.kind) {
    case Value::Kind::undefined:
      LOOM_THROW(ValueError, "tojson: an undefined value is not JSON serializable");
    case Value::Kind::none: return "null";
    case Value::Kind::boolean: return v.boolean ? "true" : "false";
    case Value::Kind::integer: return std::to_string(v.integer);
    case Value::Kind::floating:
      if (std::isnan(v.floating)) return "NaN";
      if (std::isinf(v.floating)) return v.floating > 0 ? "Infinity" : "-Infinity";
      return float_repr(v.floating);
    case Value::Kind::string: return json_string(v.string, f.ensure_ascii);
    case Value::Kind::array: {
      if (v.array->empty()) return "[]";
      std::string out = "[";
      for (size_t i = 0; i < v.array->size(); ++i) {
        out += (i ? item_separator : "") + newline + to_json((*v.array)[i], f, depth + 1);
      }
      return out + closing + "]";
    }
    case Value::Kind::object: {
      if (v.object->empty()) return "{}";
      Object items = *v.object;
      if (f.sort_keys) std::stable_sort(items.begin(), items.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
      std::string out = "{";
      for (size_t i = 0; i < items.size(); ++i) {
        out += (i ? item_separator : "") + newline + json_string(items[i].first, f.ensure_ascii) + f.key_separator +
               to_json(items[i].second, f, depth + 1);
      }
      return out + closing + "}";
    }
    case Value::Kind::function:
      LOOM_THROW(ValueError, "tojson: a function is not JSON serializable");
  }
  return "";
}

}  // namespace loom::data::jinja
