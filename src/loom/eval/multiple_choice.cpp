#include "loom/eval/multiple_choice.h"

#include <algorithm>
#include <cmath>
#include <string_view>

#include "loom/core/error.h"
#include "loom/data/jsonl_reader.h"

namespace loom::eval {

namespace {

using Json = nlohmann::json;

// Characters of UTF-8 text (Python's len): every byte that does not continue a sequence.
double characters(std::string_view text) {
  double n = 0;
  for (unsigned char c : text) n += (c & 0xC0) != 0x80 ? 1 : 0;
  return n;
}

struct Where {
  const std::string& path;
  int64_t line;
};

std::vector<int64_t> ids_field(const Json& record, const char* key, const Where& at, int64_t vocab_size) {
  const Json& v = record.at(key);
  LOOM_CHECK(v.is_array() && !v.empty(), DataError, at.path, ":", at.line, ": ", key,
             " must be a non-empty list of token ids, got ", v.dump());
  std::vector<int64_t> ids;
  for (const Json& id : v) {
    LOOM_CHECK(id.is_number_integer(), DataError, at.path, ":", at.line, ": ", key, " holds ", id.dump(),
               ", not a token id");
    const int64_t t = id.get<int64_t>();
    LOOM_CHECK(t >= 0 && t < vocab_size, DataError, at.path, ":", at.line, ": ", key, " holds token id ", t,
               " outside the model's vocabulary [0, ", vocab_size, ")");
    ids.push_back(t);
  }
  return ids;
}

// lm-evaluation-harness's _encode_pair: the context's trailing whitespace goes with the choice.
void encode_pair(std::string context, std::string choice, const data::Tokenizer& tokenizer,
                 std::vector<int64_t>& context_ids, std::vector<int64_t>& choice_ids) {
  const size_t kept = context.find_last_not_of(" \t\n\r\f\v");
  const size_t trailing = kept == std::string::npos ? context.size() : context.size() - kept - 1;
  choice = context.substr(context.size() - trailing) + choice;
  context.resize(context.size() - trailing);
  // The harness encodes without the file's special tokens (no BOS).
  const std::vector<int64_t> whole = tokenizer.encode(context + choice, false);
  const std::vector<int64_t> head = context.empty() ? std::vector<int64_t>{} : tokenizer.encode(context, false);
  const size_t split = std::min(head.size(), whole.size());
  context_ids = head;
  choice_ids.assign(whole.begin() + static_cast<std::ptrdiff_t>(split), whole.end());
}

ChoiceExample text_example(const Json& record, const Where& at, const data::Tokenizer* tokenizer) {
  LOOM_CHECK(tokenizer != nullptr, DataError, at.path, ":", at.line, ": the example gives text (\"context\", "
             "\"choices\"): pass --tokenizer PATH to tokenize it, or give \"context_ids\" and \"choices_ids\"");
  LOOM_CHECK(record.at("context").is_string(), DataError, at.path, ":", at.line, ": context must be a string, got ",
             record.at("context").dump());
  const Json& choices = record.at("choices");
  LOOM_CHECK(choices.is_array(), DataError, at.path, ":", at.line, ": choices must be a list of strings, got ",
             choices.dump());
  ChoiceExample e;
  for (const Json& c : choices) {
    LOOM_CHECK(c.is_string(), DataError, at.path, ":", at.line, ": choices holds ", c.dump(), ", not a string");
    std::vector<int64_t> context_ids, choice_ids;
    encode_pair(record.at("context").get<std::string>(), c.get<std::string>(), *tokenizer, context_ids, choice_ids);
    // An empty context is the BOS token, else the end-of-text token (the harness's prefix token).
    if (context_ids.empty()) {
      const int64_t prefix = tokenizer->bos_id() >= 0 ? tokenizer->bos_id() : tokenizer->eos_id();
      LOOM_CHECK(prefix >= 0, DataError, at.path, ":", at.line, ": the context is empty and the tokenizer has "
                 "neither a BOS nor an end-of-text token to stand for it; give the example a context");
      context_ids = {prefix};
    }
    LOOM_CHECK(!choice_ids.empty(), DataError, at.path, ":", at.line, ": choice ", e.choices.size(), " (",
               c.dump(), ") has no token of its own after the context");
    e.context = context_ids;  // the same for every choice: encode(context) does not depend on it
    e.choices.push_back(std::move(choice_ids));
    e.lengths.push_back(characters(c.get<std::string>()));
  }
  return e;
}

ChoiceExample ids_example(const Json& record, const Where& at, int64_t vocab_size) {
  ChoiceExample e;
  e.context = ids_field(record, "context_ids", at, vocab_size);
  const Json& choices = record.at("choices_ids");
  LOOM_CHECK(choices.is_array(), DataError, at.path, ":", at.line, ": choices_ids must be a list of token-id lists, "
             "got ", choices.dump());
  for (size_t i = 0; i < choices.size(); ++i) {
    Json one = {{"choice", choices[i]}};
    e.choices.push_back(ids_field(one, "choice", at, vocab_size));
    e.lengths.push_back(static_cast<double>(e.choices.back().size()));
  }
  return e;
}

}  // namespace

std::vector<ChoiceExample> read_choices(const std::string& path, const data::Tokenizer* tokenizer,
                                        int64_t vocab_size) {
  data::JsonlReader reader(path);
  std::vector<ChoiceExample> out;
  std::string text;
  int64_t line = 0;
  while (reader.next(text, line)) {
    const Json record = data::parse_json_line(text, path, line);
    const Where at{path, line};
    const bool has_text = record.contains("context") || record.contains("choices");
    const bool has_ids = record.contains("context_ids") || record.contains("choices_ids");
    LOOM_CHECK(has_text != has_ids, DataError, path, ":", line, ": give \"context\" and \"choices\" (text) or "
               "\"context_ids\" and \"choices_ids\" (token ids), not ", has_text ? "both" : "neither");
    for (const char* key : has_text ? std::vector<const char*>{"context", "choices", "label"}
                                    : std::vector<const char*>{"context_ids", "choices_ids", "label"})
      LOOM_CHECK(record.contains(key), DataError, path, ":", line, ": the example has no \"", key, "\"");
    ChoiceExample e = has_text ? text_example(record, at, tokenizer) : ids_example(record, at, vocab_size);
    for (const auto& c : e.choices)
      for (int64_t id : c)
        LOOM_CHECK(id < vocab_size, DataError, path, ":", line, ": the tokenizer gives id ", id,
                   ", outside the model's vocabulary of ", vocab_size, ": use the model's tokenizer");
    LOOM_CHECK(e.choices.size() >= 2, DataError, path, ":", line, ": an example needs at least two choices, got ",
               e.choices.size());
    const Json& label = record.at("label");
    LOOM_CHECK(label.is_number_integer() && label.get<int64_t>() >= 0 &&
                   label.get<int64_t>() < static_cast<int64_t>(e.choices.size()),
               DataError, path, ":", line, ": label must be the index of the right choice, 0 to ",
               e.choices.size() - 1, ", got ", label.dump());
    e.label = label.get<int64_t>();
    e.line = line;
    out.push_back(std::move(e));
  }
  LOOM_CHECK(!out.empty(), DataError, path, " holds no example (one JSON object per line: context, choices, label)");
  return out;
}

namespace {

// One (example, choice) pair as a sequence: the model reads input[0..n-1] and predicts each next
// token; the choice's tokens are the last `scored` targets.
struct Request {
  size_t example = 0, choice = 0;
  std::vector<int64_t> tokens;  // context + choice, cut to the last max_length + 1
  size_t scored = 0;
};

Request make_request(const ChoiceExample& e, size_t example, size_t choice, int64_t max_length) {
  Request r{example, choice, e.context, e.choices[choice].size()};
  r.tokens.insert(r.tokens.end(), e.choices[choice].begin(), e.choices[choice].end());
  const size_t keep = static_cast<size_t>(max_length) + 1;
  if (r.tokens.size() > keep) r.tokens.erase(r.tokens.begin(), r.tokens.end() - static_cast<std::ptrdiff_t>(keep));
  r.scored = std::min(r.scored, r.tokens.size() - 1);
  return r;
}

// Σ log p(target) over the request's scored positions, in double, from row b of logits [B, S, V].
double log_likelihood(const std::vector<float>& logits, int64_t b, int64_t S, int64_t V, const Request& r) {
  const int64_t n = static_cast<int64_t>(r.tokens.size()) - 1;  // inputs
  double ll = 0;
  for (int64_t j = n - static_cast<int64_t>(r.scored); j < n; ++j) {
    const float* row = logits.data() + (b * S + j) * V;
    const double top = *std::max_element(row, row + V);
    double sum = 0;
    for (int64_t v = 0; v < V; ++v) sum += std::exp(static_cast<double>(row[v]) - top);
    ll += static_cast<double>(row[r.tokens[static_cast<size_t>(j + 1)]]) - top - std::log(sum);
  }
  return ll;
}

size_t argmax(const std::vector<double>& v) {
  return static_cast<size_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

}  // namespace

ChoiceScores score_choices(const std::vector<ChoiceExample>& examples, const LogitsFn& logits,
                           const ScoringOptions& options) {
  LOOM_CHECK(options.batch_size >= 1 && options.max_length >= 2 && options.length_multiple >= 1, ValueError,
             "score_choices: batch ", options.batch_size, ", max length ", options.max_length, ", multiple ",
             options.length_multiple);
  std::vector<Request> requests;
  ChoiceScores out;
  for (size_t i = 0; i < examples.size(); ++i) {
    out.log_likelihoods.emplace_back(examples[i].choices.size(), 0.0);
    for (size_t c = 0; c < examples[i].choices.size(); ++c)
      requests.push_back(make_request(examples[i], i, c, options.max_length));
  }
  for (size_t first = 0; first < requests.size(); first += static_cast<size_t>(options.batch_size)) {
    const size_t last = std::min(requests.size(), first + static_cast<size_t>(options.batch_size));
    // Right padding (any id; causal attention keeps it out of the real positions), to a length
    // the layout can split; every batch has batch_size rows, the missing ones padding too.
    int64_t S = 1;
    for (size_t k = first; k < last; ++k) S = std::max<int64_t>(S, static_cast<int64_t>(requests[k].tokens.size()) - 1);
    S = (S + options.length_multiple - 1) / options.length_multiple * options.length_multiple;
    const int64_t B = options.batch_size;
    std::vector<int32_t> ids(static_cast<size_t>(B * S), 0);
    for (size_t k = first; k < last; ++k) {
      const Request& r = requests[k];
      for (size_t j = 0; j + 1 < r.tokens.size(); ++j)
        ids[(k - first) * static_cast<size_t>(S) + j] = static_cast<int32_t>(r.tokens[j]);
      out.tokens += static_cast<int64_t>(r.tokens.size()) - 1;
    }
    data::Batch batch;
    batch.input_ids = Tensor::from_vector(ids, {B, S});
    const Tensor l = logits(batch);
    LOOM_CHECK(l.dim() == 3 && l.size(0) == B && l.size(1) == S, ShapeError, "score_choices: logits ",
               l.shape().str(), " for a batch of ", B, " x ", S);
    const int64_t V = l.size(2);
    const std::vector<float> values = l.contiguous().to_float_vector();
    for (size_t k = first; k < last; ++k)
      out.log_likelihoods[requests[k].example][requests[k].choice] =
          log_likelihood(values, static_cast<int64_t>(k - first), S, V, requests[k]);
  }
  double right = 0, right_norm = 0;
  for (size_t i = 0; i < examples.size(); ++i) {
    const std::vector<double>& ll = out.log_likelihoods[i];
    std::vector<double> normalized(ll.size());
    for (size_t c = 0; c < ll.size(); ++c) normalized[c] = ll[c] / std::max(examples[i].lengths[c], 1.0);
    right += argmax(ll) == static_cast<size_t>(examples[i].label) ? 1 : 0;
    right_norm += argmax(normalized) == static_cast<size_t>(examples[i].label) ? 1 : 0;
  }
  out.examples = static_cast<int64_t>(examples.size());
  out.requests = static_cast<int64_t>(requests.size());
  out.acc = right / static_cast<double>(examples.size());
  out.acc_norm = right_norm / static_cast<double>(examples.size());
  return out;
}

}  // namespace loom::eval
