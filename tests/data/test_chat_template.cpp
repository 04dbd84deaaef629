// Chat templates: the models' templates rendered byte for byte as transformers (Python's jinja2)
// and @huggingface/jinja render them, Jinja semantics checked against renderings Python's jinja2
// made in transformers' environment, and the errors for what Loom does not render.
#include <gtest/gtest.h>

#include "loom/core/error.h"
#include "loom/data/tokenizer/chat_template.h"
#include "loom/data/tokenizer/tokenizer.h"
#include "testing/error_message.h"
#include "tokenizer_test_util.h"

using namespace loom::data;
using namespace loom::data::testing_util;
using loom::testing::message_of;
using ordered_json = nlohmann::ordered_json;

namespace {

std::string render(const std::string& source, const ordered_json& variables = ordered_json::object()) {
  return ChatTemplate(source, "test").render(variables);
}

// Every rendering of the case conversations equals Python jinja2's (what transformers renders)
// and, for the models' own templates, @huggingface/jinja's; its ids are the reference's too.
void check_chats(const std::string& model, const ordered_json& reference, bool compare_javascript) {
  const auto tokenizer = load_tokenizer(tokenizer_folder(model));
  ASSERT_TRUE(tokenizer->has_chat_template());
  ASSERT_FALSE(reference["chats"].empty());
  for (const auto& chat : reference["chats"]) {
    SCOPED_TRACE(model + " chat: " + chat["name"].get<std::string>());
    const ordered_json& variables = chat["variables"];
    ChatOptions options;
    options.add_generation_prompt = variables["add_generation_prompt"];
    for (const auto& [key, value] : variables.items()) {
      if (key != "messages" && key != "add_generation_prompt" && key.find("_token") == std::string::npos) {
        options.variables[key] = value;
      }
    }
    const std::string text = tokenizer->apply_chat_template(variables["messages"], options);
    ASSERT_TRUE(chat.contains("python_text")) << "rerun scripts/get-tokenizers.sh";
    EXPECT_EQ(text, chat["python_text"].get<std::string>());
    if (compare_javascript) {  // the reference ids are those of the JavaScript rendering
      EXPECT_EQ(text, chat["text"].get<std::string>());
      EXPECT_EQ(tokenizer->encode(text, false), chat["ids"].get<std::vector<int64_t>>());
    }
  }
}

}  // namespace

TEST(ChatTemplateReference, Qwen3) {
  LOOM_REFERENCE_OR_SKIP(reference, "qwen3");
  check_chats("qwen3", reference, true);
}

TEST(ChatTemplateReference, Llama31) {
  LOOM_REFERENCE_OR_SKIP(reference, "llama3_1");
  check_chats("llama3_1", reference, true);
}

TEST(ChatTemplateReference, DeepSeekV3) {
  LOOM_REFERENCE_OR_SKIP(reference, "deepseek_v3");
  check_chats("deepseek_v3", reference, true);
}

// The fixture's template exercises loops, namespaces, filters, slices, tests and methods. Where
// @huggingface/jinja departs from Python (it prints booleans as "true", ignores strip's
// argument), transformers' Python rendering is the reference.
TEST(ChatTemplateReference, FixtureTemplateMatchesPythonJinja) {
  LOOM_REFERENCE_OR_SKIP(reference, "byte_fallback");
  check_chats("byte_fallback", reference, false);
}

// Expected strings below were rendered by Python's jinja2 3.1 in transformers' environment
// (trim_blocks, lstrip_blocks, loop controls, transformers' tojson).
TEST(ChatTemplate, WhitespaceControlAsTransformersSetsIt) {
  EXPECT_EQ(render("  {% if true %}\nyes\n  {% endif %}\nend\n"), "yes\nend");
  EXPECT_EQ(render("a  {%- if true -%}  b  {%- endif -%}  c"), "abc");
  EXPECT_EQ(render("{# note #}\nx {{ 'y' }}\n{{- ' z' }}\n"), "x y z");
  EXPECT_EQ(render("  {%+ if true %}kept{% endif %}|{{ 1 }}  {% if true %}mid{% endif %}"), "  kept|1  mid");
  EXPECT_EQ(render("line\r\n{% if true %}\r\nx{% endif %}"), "line\nx");
}

TEST(ChatTemplate, ValuesPrintAndComputeAsInPython) {
  EXPECT_EQ(render("{{ true }} {{ none }} {{ [1, 'a', none] }} {{ {'a': 1, 'b': [true]} }} {{ 1.0 }} {{ 3 / 2 }} "
                   "{{ 1e20 }} {{ 0.0001 }} {{ 2 ** 10 }}"),
            "True None [1, 'a', None] {'a': 1, 'b': [True]} 1.0 1.5 1e+20 0.0001 1024");
  EXPECT_EQ(render("{{ -7 // 2 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 'ab' * 3 }} {{ 'x' ~ 1 ~ none }} {{ 1 == 1.0 }} "
                   "{{ true == 1 }}"),
            "-4 2 -2 ababab x1None True True");
  EXPECT_EQ(render("{{ 'xxhixx'.strip('x') }}|{{ ' a  b\tc '.split() }}|{{ 'a,b,,c'.split(',') }}|"
                   "{{ 'a b c'.split(' ', 1) }}|{{ '\xC3\x9F'.upper() }}|{{ 'hello wORLD'.title() }}|"
                   "{{ 'hELLO'.capitalize() }}"),
            "hi|['a', 'b', 'c']|['a', 'b', '', 'c']|['a', 'b c']|SS|Hello World|Hello");
  EXPECT_EQ(render("{% set block %}inner {{ 1 + 1 }}{% endset %}[{{ block }}]{{ 'yes' if 'b' in {'b': 1} else 'no' }}"
                   "{{ 'x' if false }}|{{ (1, 2) }}|{{ '\xC3\xA9\xF0\x9F\x98\x80" "a'[1] }}{{ '\xC3\xA9\xF0\x9F\x98\x80" "a' | length }}"),
            "[inner 2]yes|(1, 2)|\xF0\x9F\x98\x80" "3");
}

TEST(ChatTemplate, TojsonIsTransformersJsonDumps) {
  const ordered_json x = ordered_json::parse(R"({"b": [1, 2.5, null, true], "a": {}, "c": []})");
  EXPECT_EQ(render("{{ x | tojson }}|{{ x | tojson(indent=2) }}|{{ x | tojson(sort_keys=true) }}|"
                   "{{ x | tojson(separators=(',', ':')) }}|{{ '\xC3\xA9\"\n' | tojson }}|"
                   "{{ '\xC3\xA9' | tojson(ensure_ascii=true) }}",
                   {{"x", x}}),
            "{\"b\": [1, 2.5, null, true], \"a\": {}, \"c\": []}|{\n  \"b\": [\n    1,\n    2.5,\n    null,\n    true\n  ],\n"
            "  \"a\": {},\n  \"c\": []\n}|{\"a\": {}, \"b\": [1, 2.5, null, true], \"c\": []}|"
            "{\"b\":[1,2.5,null,true],\"a\":{},\"c\":[]}|\"\xC3\xA9\\\"\\n\"|\"\\u00e9\"");
}

TEST(ChatTemplate, ScopesLoopsAndNamespaces) {
  EXPECT_EQ(render("{% set x = 1 %}{% for i in [1, 2] %}{% set x = x + i %}{{ x }}{% endfor %}|{{ x }}"), "23|1");
  EXPECT_EQ(render("{% set ns = namespace(total=0) %}{% for i in range(4) %}{% set ns.total = ns.total + i %}"
                   "{% endfor %}{{ ns.total }}"),
            "6");
  EXPECT_EQ(render("{% for a, b in [[1, 'x'], [2, 'y']] %}{{ loop.index }}{{ a }}{{ b }}{{ loop.revindex0 }}"
                   "{% if loop.first %}F{% endif %}{% if loop.last %}L{% endif %}{% endfor %}"
                   "{% for i in [] %}no{% else %}empty{% endfor %}"),
            "11x1F22y0Lempty");
  const ordered_json m = {{"m", {{"role", "user"}}}};
  EXPECT_EQ(render("{{ m.missing }}|{{ m.missing is defined }}|{{ m.get('k', 'dflt') }}|{{ m['role'] }}|"
                   "{{ m.role | default('none') }}|{{ m.nope | default('dflt') }}|{{ m | length }}|"
                   "{{ m.items() | list | length }}",
                   m),
            "|False|dflt|user|user|dflt|1|1");
  const ordered_json msgs = {{"msgs", ordered_json::parse(R"([{"role": "user", "content": "a"},
      {"role": "assistant", "content": "b"}, {"role": "user", "content": "c"}])")}};
  EXPECT_EQ(render("{{ msgs | selectattr('role', 'equalto', 'user') | map(attribute='content') | join('/') }}|"
                   "{{ msgs | map(attribute='role') | first }}|{{ msgs[-1].content | upper }}|{{ 'abc' | reverse }}|"
                   "{{ [3, 1] | last }}",
                   msgs),
            "a/c|user|C|cba|1");
}

TEST(ChatTemplate, LoopHelpersAndTests) {
  EXPECT_EQ(render("{% for x in 'abc' %}{{ loop.previtem | default('-') }}{{ x }}{{ loop.nextitem | default('-') }}"
                   "{{ loop.cycle('o', 'e') }} {% endfor %}"),
            "-abo abce bc-o ");
  EXPECT_EQ(render("{% for i in range(10) if i is odd %}{{ i }}{% if i > 5 %}{% break %}{% endif %}{% endfor %}|"
                   "{{ range(3) | list | length }}|{{ 'ab' is lower }}{{ 'AB' is upper }}|{{ 10 is divisibleby(5) }}"),
            "1357|3|TrueTrue|True");
  EXPECT_EQ(render("{{ '%' }}{{ 'a' < 'b' }}{{ [1] + [2] }}{{ 'x' if none else 'y' }}{{ none is none }}{{ 1 is number }}"
                   "{{ 'k' is mapping }}"),
            "%True[1, 2]yTrueTrueFalse");
  // transformers' {% generation %} marks assistant text for its masks and renders its content.
  EXPECT_EQ(render("a{% generation %}b{{ 1 }}{% endgeneration %}c"), "ab1c");
}

TEST(ChatTemplate, UnsupportedConstructsNameThemselvesAndTheirLine) {
  const auto error = [](const std::string& source) {
    return message_of([&] { ChatTemplate(source, "m/tokenizer_config.json").render(ordered_json::object()); });
  };
  EXPECT_NE(error("a\nb\n{% macro greet(name) %}hi{% endmacro %}")
                .find("m/tokenizer_config.json: chat_template line 3: the tag {% macro %} is not part of the Jinja subset"),
            std::string::npos);
  EXPECT_NE(error("{{ 'x' }}\n{{ 'a b' | wordcount }}").find("line 2: the filter 'wordcount' is not part of the Jinja"),
            std::string::npos);
  EXPECT_NE(error("{% if 3 is prime %}{% endif %}").find("line 1: the test 'prime' is not part"), std::string::npos);
  EXPECT_NE(error("{% if true %}\nunclosed").find("line 2: the template ends inside a block: expected {% endif %}"),
            std::string::npos);
  EXPECT_NE(error("{% for x in y %}{% endif %}").find("line 1: {% endif %} does not close the block"), std::string::npos);
  EXPECT_NE(error("{{ 'never closed }}").find("line 1: a string literal is never closed"), std::string::npos);
  EXPECT_NE(error("x\n{{ name").find("line 2: a {{ tag is never closed"), std::string::npos);
  EXPECT_NE(error("{# note").find("line 1: a comment {# is never closed"), std::string::npos);
  EXPECT_NE(error("{% for in xs %}{% endfor %}").find("line 1: expected 'in' in the for loop"), std::string::npos);
  EXPECT_NE(error("{{ x ! y }}").find("line 1: unexpected character '!'"), std::string::npos);
  EXPECT_NE(error("{% set a, b = 1, 2 %}").find("unpacking several names"), std::string::npos);
  EXPECT_NE(error("{{ 99999999999999999999 }}").find("the number 99999999999999999999 is out of range"), std::string::npos);
  EXPECT_NE(error("{{ '\\xZZ' }}").find("the \\x escape needs 2 hex digits"), std::string::npos);
  EXPECT_NE(error("\n{{ messages[0].content }}").find("line 2: 'messages' is undefined, so it cannot be indexed"),
            std::string::npos);
  EXPECT_NE(error("{{ 'a' + 1 }}").find("unsupported operand types for +: 'str' and 'int'"), std::string::npos);
  EXPECT_NE(error("{{ raise_exception('Conversation roles must alternate') }}")
                .find("line 1: the template raised an error: Conversation roles must alternate"),
            std::string::npos);
}

TEST(ChatTemplate, TokenizerPassesSpecialTokensAndVariables) {
  const auto t = load_tokenizer(fixture_tokenizer("byte_fallback"));
  const ordered_json messages = ordered_json::parse(R"([{"role": "user", "content": "hello there"}])");
  ChatOptions options;
  options.add_generation_prompt = true;
  const std::string text = t->apply_chat_template(messages, options);
  EXPECT_EQ(text.rfind("<s>[USER first #0] hello there", 0), 0u) << text;
  EXPECT_EQ(text.substr(text.size() - 11), "<assistant>");
  EXPECT_NE(message_of([&] { t->apply_chat_template(ordered_json::object()); }).find("\"messages\" must be a list"),
            std::string::npos);
}
