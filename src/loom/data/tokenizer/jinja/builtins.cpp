#include "loom/data/tokenizer/jinja/builtins.h"

#include <algorithm>
#include <ctime>

#include <unicode/uchar.h>
#include <unicode/unistr.h>

#include "loom/core/error.h"
#include "loom/data/tokenizer/unicode.h"

namespace loom::data::jinja {

namespace {

uint32_t decode_code_point(const std::string& c) {
  const auto lead = static_cast<unsigned char>(c[0]);
  const size_t n = c.size();
  uint32_t cp = n == 1 ? lead : lead & (0x7Fu >> n);
  for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(c[k]) & 0x3F);
  return cp;
}

// Python's str.isspace() code points (what strip() and split() remove by default).
bool is_python_space(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

std::string icu_case(const std::string& s, bool upper) {
  icu::UnicodeString u = icu::UnicodeString::fromUTF8(s);
  if (upper) u.toUpper(); else u.toLower();
  std::string out;
  u.toUTF8String(out);
  return out;
}

// Python's str.title() (capitalize_only: str.capitalize()): a letter after a cased character is
// lowered, any other is raised.
std::string python_title(const std::string& s, bool capitalize_only) {
  std::string out;
  bool previous_cased = false;
  bool first = true;
  for (const auto& c : code_points(s)) {
    out += icu_case(c, capitalize_only ? first : !previous_cased);
    previous_cased = u_hasBinaryProperty(static_cast<UChar32>(decode_code_point(c)), UCHAR_CASED);
    first = false;
  }
  return out;
}

// Python's str.split: on a separator, or (none) on runs of whitespace with no empty parts; after
// max_split splits the rest is one part.
std::vector<std::string> python_split(const std::string& s, const Value& separator, int64_t max_split) {
  std::vector<std::string> parts;
  if (separator.kind == Value::Kind::none || separator.is_undefined()) {
    const auto cps = code_points(s);
    const auto space = [&](size_t k) { return is_python_space(decode_code_point(cps[k])); };
    const auto join = [&](size_t from, size_t to) {
      std::string out;
      for (size_t k = from; k < to; ++k) out += cps[k];
      return out;
    };
    size_t i = 0;
    while (true) {
      while (i < cps.size() && space(i)) ++i;
      if (i == cps.size()) break;
      if (max_split >= 0 && static_cast<int64_t>(parts.size()) == max_split) {
        parts.push_back(join(i, cps.size()));
        break;
      }
      size_t j = i;
      while (j < cps.size() && !space(j)) ++j;
      parts.push_back(join(i, j));
      i = j;
    }
    return parts;
  }
  if (separator.kind != Value::Kind::string || separator.string.empty()) {
    LOOM_THROW(DataError, "split() takes a non-empty string separator or none");
  }
  const std::string& sep = separator.string;
  size_t at = 0;
  while (max_split < 0 || static_cast<int64_t>(parts.size()) < max_split) {
    const size_t next = s.find(sep, at);
    if (next == std::string::npos) break;
    parts.push_back(s.substr(at, next - at));
    at = next + sep.size();
  }
  parts.push_back(s.substr(at));
  return parts;
}

std::string replace(const std::string& s, const std::string& from, const std::string& to, int64_t count) {
  if (from.empty()) return s;
  std::string out;
  size_t at = 0;
  for (int64_t n = 0; count < 0 || n < count; ++n) {
    const size_t next = s.find(from, at);
    if (next == std::string::npos) break;
    out += s.substr(at, next - at) + to;
    at = next + from.size();
  }
  return out + s.substr(at);
}

Value argument(const Arguments& a, size_t index, const std::string& name, const Value& fallback) {
  if (index < a.positional.size()) return a.positional[index];
  if (const Value* v = a.keyword(name)) return *v;
  return fallback;
}

Value required_string(const Arguments& a, size_t index, const std::string& name, const std::string& what) {
  Value v = argument(a, index, name, Value());
  if (v.kind != Value::Kind::string) LOOM_THROW(DataError, what, " expects a string for ", name, ", got ", v.type_name());
  return v;
}

bool starts_or_ends(const std::string& s, const Value& affix, bool start) {
  const auto check = [&](const std::string& x) {
    return x.size() <= s.size() && (start ? s.compare(0, x.size(), x) == 0 : s.compare(s.size() - x.size(), x.size(), x) == 0);
  };
  if (affix.kind == Value::Kind::string) return check(affix.string);
  if (affix.kind == Value::Kind::array) {
    return std::any_of(affix.array->begin(), affix.array->end(), [&](const Value& v) { return v.kind == Value::Kind::string && check(v.string); });
  }
  LOOM_THROW(DataError, start ? "startswith" : "endswith", "() takes a string or a tuple of strings, got ", affix.type_name());
}

Value string_method(const std::string& s, const std::string& name) {
  auto bind = [](auto fn) { return Value::of(Function(fn)); };
  if (name == "startswith" || name == "endswith") {
    return bind([s, start = name == "startswith"](const Arguments& a) {
      return Value::of(starts_or_ends(s, argument(a, 0, "prefix", Value()), start));
    });
  }
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    return bind([s, left = name != "rstrip", right = name != "lstrip"](const Arguments& a) {
      const Value chars = argument(a, 0, "chars", Value::none());
      return Value::of(python_strip(s, chars.kind == Value::Kind::none ? nullptr : &chars, left, right));
    });
  }
  if (name == "split") {
    return bind([s](const Arguments& a) {
      const Value max = argument(a, 1, "maxsplit", Value::of(int64_t{-1}));
      Array parts;
      for (auto& p : python_split(s, argument(a, 0, "sep", Value::none()), max.integer)) parts.push_back(Value::of(std::move(p)));
      return Value::of(std::move(parts));
    });
  }
  if (name == "upper" || name == "lower") return bind([s, up = name == "upper"](const Arguments&) { return Value::of(icu_case(s, up)); });
  if (name == "title" || name == "capitalize") {
    return bind([s, first = name == "capitalize"](const Arguments&) { return Value::of(python_title(s, first)); });
  }
  if (name == "replace") {
    return bind([s](const Arguments& a) {
      const Value count = argument(a, 2, "count", Value::of(int64_t{-1}));
      return Value::of(replace(s, required_string(a, 0, "old", "replace()").string,
                               required_string(a, 1, "new", "replace()").string, count.integer));
    });
  }
  if (name == "join") {
    return bind([s](const Arguments& a) {
      const Value items = argument(a, 0, "iterable", Value());
      if (items.kind != Value::Kind::array) LOOM_THROW(DataError, "join() takes a list, got ", items.type_name());
      std::string out;
      for (size_t i = 0; i < items.array->size(); ++i) out += (i ? s : "") + to_str((*items.array)[i]);
      return Value::of(std::move(out));
    });
  }
  return Value();
}

Value dict_method(const Value& target, const std::string& name) {
  if (name == "items" || name == "keys" || name == "values") {
    return Value::of(Function([target, name](const Arguments&) {
      Array out;
      for (const auto& [k, v] : *target.object) {
        if (name == "keys") {
          out.push_back(Value::of(k));
        } else if (name == "values") {
          out.push_back(v);
        } else {
          Value pair = Value::of(Array{Value::of(k), v});
          pair.is_tuple = true;
          out.push_back(std::move(pair));
        }
      }
      return Value::of(std::move(out));
    }));
  }
  if (name == "get") {
    return Value::of(Function([target](const Arguments& a) {
      const Value key = argument(a, 0, "key", Value());
      if (key.kind == Value::Kind::string) {
        if (const Value* v = target.find(key.string)) return *v;
      }
      return argument(a, 1, "default", Value::none());
    }));
  }
  return Value();
}

}  // namespace

size_t code_point_count(const std::string& s) {
  size_t n = 0;
  for (const char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

std::vector<std::string> code_points(const std::string& s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    const size_t n = std::min(utf8_length(static_cast<unsigned char>(s[i])), s.size() - i);
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

std::string python_strip(const std::string& s, const Value* chars, bool left, bool right) {
  const auto cps = code_points(s);
  std::vector<std::string> set;
  if (chars) set = code_points(chars->string);
  const auto strip_it = [&](const std::string& c) {
    return chars ? std::find(set.begin(), set.end(), c) != set.end() : is_python_space(decode_code_point(c));
  };
  size_t b = 0, e = cps.size();
  while (left && b < e && strip_it(cps[b])) ++b;
  while (right && e > b && strip_it(cps[e - 1])) --e;
  std::string out;
  for (size_t i = b; i < e; ++i) out += cps[i];
  return out;
}

Value method(const Value& target, const std::string& name, int line) {
  if (target.kind == Value::Kind::string) return string_method(target.string, name);
  if (target.kind == Value::Kind::object && !target.is_namespace) return dict_method(target, name);
  return Value();
}

}  // namespace loom::data::jinja
