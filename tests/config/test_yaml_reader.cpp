// Reading YAML safely: YAML 1.2 scalar typing, and malformed input (tabs, duplicate keys,
// aliases, deep nesting, huge or binary files) ending in a clean error, never a crash or hang.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>

#include "config_test_util.h"
#include "loom/config/yaml_reader.h"
#include "loom/config/yaml_scalar.h"
#include "testing/temp_dir.h"

using namespace loom;
using namespace loom::config;
using loom::config::testing::raw_errors;
using loom::config::testing::with_defaults;

namespace {

ConfigNode parse(const std::string& text) {
  Diagnostics diag("t.yaml");
  ConfigNode root = parse_config_text(text, "t.yaml", diag);
  diag.throw_if_errors();
  return root;
}

std::string read_error(const std::string& text) {
  try {
    Diagnostics diag("t.yaml");
    parse_config_text(text, "t.yaml", diag);
  } catch (const ConfigReadError& e) {
    return e.what();
  }
  return "";
}

ConfigNode scalar(const std::string& text) {
  ConfigNode n;
  std::string err;
  EXPECT_TRUE(resolve_plain_scalar(text, n, &err)) << err;
  return n;
}

}  // namespace

// configuration.md writes `1.e-5`; YAML 1.2 also makes `1e-5` and `1E-5` floats (PyYAML, a
// YAML 1.1 reader, reads `1e-5` as a string: Loom deliberately does better).
TEST(YamlScalar, ExponentFormsAreAllFloats) {
  for (const char* text : {"1.e-5", "1e-5", "1E-5", "1.0e-5", "+1e-5"}) {
    ConfigNode n = scalar(text);
    EXPECT_EQ(n.kind, ConfigNode::Kind::floating) << text;
    EXPECT_DOUBLE_EQ(n.floating, 1e-5) << text;
  }
  EXPECT_DOUBLE_EQ(scalar(".5").floating, 0.5);
  EXPECT_DOUBLE_EQ(scalar("5.").floating, 5.0);
  EXPECT_TRUE(std::isinf(scalar(".inf").floating));
  EXPECT_TRUE(std::isnan(scalar(".nan").floating));
}

TEST(YamlScalar, IntegersBoolsNullsAndStrings) {
  EXPECT_EQ(scalar("42").kind, ConfigNode::Kind::integer);
  EXPECT_EQ(scalar("-7").integer, -7);
  EXPECT_EQ(scalar("0x1F").integer, 31);
  EXPECT_EQ(scalar("0o17").integer, 15);
  EXPECT_EQ(scalar("True").kind, ConfigNode::Kind::boolean);
  EXPECT_TRUE(scalar("TRUE").boolean);
  EXPECT_FALSE(scalar("False").boolean);
  for (const char* n : {"", "~", "null", "Null", "NULL"}) EXPECT_EQ(scalar(n).kind, ConfigNode::Kind::null) << n;
  // YAML 1.2: these are strings (recompute's mode "None" stays a string, as in the reference).
  for (const char* s : {"None", "yes", "no", "on", "off", "0-3", "1_000", "auto"})
    EXPECT_EQ(scalar(s).kind, ConfigNode::Kind::string) << s;
}

TEST(YamlScalar, IntegerTooLargeForInt64IsAnError) {
  ConfigNode n;
  std::string err;
  EXPECT_FALSE(resolve_plain_scalar("99999999999999999999", n, &err));
  EXPECT_NE(err.find("does not fit in 64 bits"), std::string::npos);
  EXPECT_TRUE(resolve_plain_scalar("-9223372036854775808", n, &err));
  EXPECT_EQ(n.integer, INT64_MIN);
}

TEST(YamlScalar, FloatsAreWrittenSoBothYamlVersionsReadFloats) {
  EXPECT_EQ(format_float(1e-5), "1.0e-05");
  EXPECT_EQ(format_float(0.9), "0.9");
  EXPECT_EQ(format_float(1.0), "1.0");
  EXPECT_EQ(format_float(100.0), "100.0");
  EXPECT_EQ(format_float(-2.5e10), "-2.5e+10");
  EXPECT_EQ(format_float(1e300), "1.0e+300");
}

TEST(YamlReader, QuotedScalarsAreStringsAndKeepTheirText) {
  ConfigNode root = parse("a: \"8\"\nb: '1e-5'\nc: \"null\"\nd: 8\n");
  EXPECT_EQ(root.find("a")->kind, ConfigNode::Kind::string);
  EXPECT_TRUE(root.find("a")->quoted);
  EXPECT_EQ(root.find("b")->text, "1e-5");
  EXPECT_EQ(root.find("c")->kind, ConfigNode::Kind::string);
  EXPECT_EQ(root.find("d")->kind, ConfigNode::Kind::integer);
}

TEST(YamlReader, MapsKeepFileOrderAndPositions) {
  ConfigNode root = parse("zeta: 1\nalpha:\n  beta: [1, 2]\n");
  ASSERT_EQ(root.entries.size(), 2u);
  EXPECT_EQ(root.entries[0].key, "zeta");
  EXPECT_EQ(root.entries[1].key, "alpha");
  EXPECT_EQ(root.entries[1].key_mark.line, 2);
  const ConfigNode* beta = root.find("alpha")->find("beta");
  EXPECT_EQ(beta->mark.line, 3);
  EXPECT_EQ(beta->mark.column, 9);
}

// In a flow list `[0-3]` is the string "0-3" (memory_optimization.md writes [0-31] bare).
TEST(YamlReader, BareRangeInFlowListIsAString) {
  ConfigNode root = parse("x: [0-3, 5, '7']\n");
  const auto& items = root.find("x")->items;
  EXPECT_EQ(items[0].kind, ConfigNode::Kind::string);
  EXPECT_EQ(items[0].text, "0-3");
  EXPECT_EQ(items[1].kind, ConfigNode::Kind::integer);
  EXPECT_EQ(items[2].kind, ConfigNode::Kind::string);
}

// yaml-cpp keeps both entries of a repeated key; Loom reports it with both lines.
TEST(YamlReader, DuplicateKeysAreReported) {
  std::string e = raw_errors(with_defaults("training:\n  steps: 10\n  steps: 20\n"));
  EXPECT_NE(e.find("test.yaml:3:3: training.steps: duplicate key 'steps' (first defined at line 2)"),
            std::string::npos)
      << e;
  e = raw_errors(with_defaults("training:\n  steps: 10\ntraining:\n  seed: 1\n"));
  EXPECT_NE(e.find("test.yaml:3:1: training: duplicate key 'training' (first defined at line 1)"), std::string::npos)
      << e;
}

// yaml-cpp reads a lone word as "word: null"; YAML says it is an error.
TEST(YamlReader, LineWithoutColonIsReported) {
  // Last in the file: otherwise YAML folds the next line into a multi-line key (a syntax error).
  std::string e = raw_errors(with_defaults("") + "training:\n  steps: 10\n  deterministic\n");
  EXPECT_NE(e.find("test.yaml:14:3: training.deterministic: 'deterministic' is not a 'key: value' line (missing ':'?)"),
            std::string::npos)
      << e;
  // A flow mapping may list a key without a value.
  EXPECT_NO_THROW(parse("a: {b, c: 1}\n"));
}

TEST(YamlReader, TabsInIndentationAreRejectedWithTheLine) {
  const std::string e = read_error("training:\n\tsteps: 10\n");
  EXPECT_NE(e.find("t.yaml:2:1: tab character in the indentation"), std::string::npos) << e;
  EXPECT_NE(e.find("must use spaces"), std::string::npos);
  // A tab after the key is only separation and is fine.
  EXPECT_EQ(parse("a:\t1\n").find("a")->integer, 1);
}

TEST(YamlReader, AnchorsAliasesAndMergeKeysAreAccepted) {
  ConfigNode root = parse(
      "base: &b {steps: 5, seed: 7}\n"
      "training:\n  <<: *b\n  seed: 9\n"
      "list: &l [1, 2]\ncopy: *l\n");
  const ConfigNode* training = root.find("training");
  EXPECT_EQ(training->find("steps")->integer, 5);
  EXPECT_EQ(training->find("seed")->integer, 9);  // the mapping's own key wins over the merge
  EXPECT_EQ(root.find("copy")->items.size(), 2u);
}

TEST(YamlReader, AliasBombIsRefusedQuickly) {
  std::string bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n";
  for (char c = 'b'; c <= 'j'; ++c)
    bomb += std::string(1, c) + ": &" + c + " [*" + char(c - 1) + ", *" + char(c - 1) + ", *" + char(c - 1) +
            ", *" + char(c - 1) + ", *" + char(c - 1) + ", *" + char(c - 1) + ", *" + char(c - 1) + ", *" +
            char(c - 1) + ", *" + char(c - 1) + ", *" + char(c - 1) + "]\n";
  const auto start = std::chrono::steady_clock::now();
  const std::string e = read_error(bomb);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_NE(e.find("more than 100000 values after expanding aliases"), std::string::npos) << e;
  EXPECT_LT(seconds, 5.0);
}

TEST(YamlReader, AliasInsideItsOwnAnchorIsRefused) {
  const std::string e = read_error("a: &x [1, *x]\n");
  EXPECT_NE(e.find("nested more than 64 levels deep"), std::string::npos) << e;
}

TEST(YamlReader, ThousandDeepFlowNestingIsRefusedBeforeParsing) {
  const std::string deep = "a: " + std::string(1000, '[') + std::string(1000, ']') + "\n";
  const std::string e = read_error(deep);
  EXPECT_NE(e.find("t.yaml:1:1: values are nested more than 64 levels deep"), std::string::npos) << e;
}

TEST(YamlReader, ThousandDeepBlockNestingIsRefusedBeforeParsing) {
  std::string deep;
  for (int i = 0; i < 1000; ++i) deep += std::string(i * 2, ' ') + "k" + std::to_string(i) + ":\n";
  const std::string e = read_error(deep);
  EXPECT_NE(e.find("t.yaml:65:1: values are nested more than 64 levels deep"), std::string::npos) << e;
  std::string seqs;
  for (int i = 0; i < 1000; ++i) seqs += "- ";
  EXPECT_NE(read_error(seqs + "x\n").find("nested more than 64 levels"), std::string::npos);
}

TEST(YamlReader, ModerateNestingAndBracketsInStringsAreFine) {
  EXPECT_NO_THROW(parse("a: [[[1]]]\nb: '[[[[[[[[[[[[[[[['\nc: \"{{{{{{\" # [[[[\n"));
  EXPECT_NO_THROW(parse("text: |\n  [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\nb: 1\n"));
}

TEST(YamlReader, NulBytesMeanABinaryFile) {
  const std::string e = read_error(std::string("training:\n  steps: 1\0\x01\x02", 23));
  EXPECT_NE(e.find("t.yaml:2:11: NUL byte at offset 20: this is a binary file"), std::string::npos) << e;
}

TEST(YamlReader, BinaryGarbageIsRejected) {
  std::string garbage;
  unsigned state = 12345;
  for (int i = 0; i < 4096; ++i) {
    state = state * 1103515245u + 12345u;
    garbage += static_cast<char>((state >> 16) & 0xFF);
  }
  const std::string e = read_error(garbage);
  EXPECT_FALSE(e.empty());
  EXPECT_TRUE(e.find("binary file") != std::string::npos || e.find("invalid UTF-8") != std::string::npos ||
              e.find("control character") != std::string::npos)
      << e;
}

TEST(YamlReader, InvalidUtf8IsRejectedWithItsOffset) {
  EXPECT_NE(read_error("a: caf\xC3\n").find("invalid UTF-8 byte 0xc3 at offset 6"), std::string::npos);
  EXPECT_NE(read_error("a: \xC0\xAF\n").find("invalid UTF-8"), std::string::npos);          // overlong '/'
  EXPECT_NE(read_error("a: \xED\xA0\x80\n").find("invalid UTF-8"), std::string::npos);      // surrogate
  EXPECT_EQ(parse("name: \"caf\xC3\xA9 \xE2\x9C\x93\"\n").find("name")->text, "caf\xC3\xA9 \xE2\x9C\x93");
  EXPECT_NO_THROW(parse("\xEF\xBB\xBF" "a: 1\n"));  // a UTF-8 byte-order mark is fine
  EXPECT_NE(read_error(std::string("\xFF\xFE" "a\0:\0", 6)).find("UTF-16"), std::string::npos);
}

TEST(YamlReader, ControlCharactersAreRejected) {
  EXPECT_NE(read_error("a: 1\x1b[0m\n").find("control character 0x1b"), std::string::npos);
}

TEST(YamlReader, SyntaxErrorsNameTheLine) {
  const std::string e = read_error("training:\n  steps: [1, 2\n");
  EXPECT_NE(e.find("t.yaml:"), std::string::npos);
  EXPECT_NE(e.find("not valid YAML"), std::string::npos) << e;
  EXPECT_NE(read_error("a: b: c\n").find("t.yaml:1:5: not valid YAML: illegal map value"), std::string::npos);
}

// yaml-cpp would silently split this into two documents and keep only the first.
TEST(YamlReader, SeveralDocumentsAreRejected) {
  EXPECT_NE(read_error("- a\nb: 1\n").find("holds 2 YAML documents"), std::string::npos);
  EXPECT_NE(read_error("a: 1\n---\nb: 2\n").find("holds 2 YAML documents"), std::string::npos);
}

TEST(YamlReader, EmptyFileAndNonMappingTopLevel) {
  EXPECT_NE(read_error("").find("the file is empty"), std::string::npos);
  EXPECT_NE(read_error("# only a comment\n").find("the file is empty"), std::string::npos);
  EXPECT_NE(read_error("- a\n- b\n").find("the top level must be a mapping of sections"), std::string::npos);
  EXPECT_NE(read_error("just some words\n").find("found str 'just some words'"), std::string::npos);
}

TEST(YamlReader, UnsupportedTagsAreReported) {
  const std::string e = raw_errors(with_defaults("training:\n  steps: !!python/tuple [1]\n"));
  EXPECT_NE(e.find("unsupported YAML tag"), std::string::npos) << e;
  EXPECT_EQ(parse("a: !!str 5\n").find("a")->kind, ConfigNode::Kind::string);
  EXPECT_EQ(parse("a: !!float 5\n").find("a")->kind, ConfigNode::Kind::floating);
}

TEST(ConfigFile, MissingFileAndDirectoryAreUnreadable) {
  loom::testing::TempDir dir;
  EXPECT_THROW(read_config_file(dir.file("nope.yaml")), ConfigReadError);
  try {
    read_config_file(dir.file("nope.yaml"));
  } catch (const ConfigReadError& e) {
    EXPECT_NE(std::string(e.what()).find("configuration file not found"), std::string::npos);
  }
  EXPECT_THROW(read_config_file(dir.path().string()), ConfigReadError);
}

// A 100 MB file is refused by its size before anything is read (a sparse file: no disk used).
TEST(ConfigFile, HundredMegabyteFileIsRefusedBySize) {
  loom::testing::TempDir dir;
  const std::string path = dir.file("huge.yaml");
  loom::testing::write_file(path, "training:\n");
  std::filesystem::resize_file(path, 100u << 20);
  const auto start = std::chrono::steady_clock::now();
  try {
    read_config_file(path);
    FAIL() << "a 100 MB file was read";
  } catch (const ConfigReadError& e) {
    EXPECT_NE(std::string(e.what()).find("file is 104857600 bytes; a Loom configuration is a few KB"),
              std::string::npos)
        << e.what();
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 1.0);
}

TEST(ConfigFile, LoadCheckedReadsAFileAndNamesItInMessages) {
  loom::testing::TempDir dir;
  const std::string path = dir.file("train.yaml");
  loom::testing::write_file(path, with_defaults("training:\n  stepz: 3\n"));
  try {
    load_config_checked(path);
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(path + ":2:3: training.stepz: Unknown configuration keys for TrainingConfig: "
                                                 "['stepz']; did you mean 'steps'?"),
              std::string::npos)
        << e.what();
  }
}

// (YAML itself limits a plain key to 1024 characters: longer ones are a syntax error.)
TEST(YamlReader, LongKeysAreShortenedInMessages) {
  const std::string key(1000, 'k');
  const std::string e = raw_errors(with_defaults("training:\n  " + key + ": 1\n"));
  EXPECT_NE(e.find("Unknown configuration keys for TrainingConfig: ['" + std::string(97, 'k') + "...']"),
            std::string::npos);
  EXPECT_LT(e.size(), 600u);
  EXPECT_THROW(parse("training:\n  " + std::string(200000, 'k') + ": 1\n"), ConfigReadError);
}
