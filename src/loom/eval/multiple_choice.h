// Multiple-choice scoring, as lm-evaluation-harness scores HellaSwag-style tasks (and llm.c its
// HellaSwag eval): each choice's log-likelihood given the context,
//
//   ll_i = Σ over the choice's tokens t_j of  log softmax(logits at t_j's position - 1)[t_j]
//
//   acc       the fraction of examples whose argmax_i ll_i is the label
//   acc_norm  the same with ll_i / len_i, len_i the choice's length in characters (in tokens when
//             the file gives token ids only)
//
// Ties go to the first choice (numpy's argmax). Text is split as the harness does: trailing
// whitespace of the context moves to the choice, whole = encode(context + choice) without special
// tokens, the choice's tokens are whole[len(encode(context)):], and an empty context is the BOS
// (else end-of-text) token. A sequence longer than the model's positions keeps its last tokens.
//
// The file has one JSON object per line:
//   {"context": "...", "choices": ["...", "..."], "label": 1}                 text (--tokenizer)
//   {"context_ids": [1, 2], "choices_ids": [[3], [4, 5]], "label": 0}         token ids
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "loom/core/tensor.h"
#include "loom/data/batch.h"
#include "loom/data/tokenizer/tokenizer.h"

namespace loom::eval {

struct ChoiceExample {
  std::vector<int64_t> context;               // token ids
  std::vector<std::vector<int64_t>> choices;  // token ids of each choice's continuation
  std::vector<double> lengths;                // each choice's length for acc_norm
  int64_t label = 0;
  int64_t line = 0;                           // 1-based line of the file
};

// Reads and tokenizes the file; DataError naming file:line and the field for a bad line (not
// JSON, a missing or mistyped field, fewer than two choices, a label outside the choices, ids
// outside [0, vocab_size)). `tokenizer` may be null when every line gives ids.
std::vector<ChoiceExample> read_choices(const std::string& path, const data::Tokenizer* tokenizer,
                                        int64_t vocab_size);

struct ChoiceScores {
  int64_t examples = 0;
  int64_t requests = 0;  // (example, choice) pairs scored
  int64_t tokens = 0;    // tokens run through the model, padding excluded
  double acc = 0;
  double acc_norm = 0;
  std::vector<std::vector<double>> log_likelihoods;  // per example, per choice
};

// The logits [B, S, V] of a batch of input_ids (runtime::Schedule::logits under any layout).
using LogitsFn = std::function<Tensor(const data::Batch& batch)>;

struct ScoringOptions {
  int64_t batch_size = 1;       // sequences per forward
  int64_t max_length = 0;       // the model's positions
  int64_t length_multiple = 1;  // padded lengths are multiples of it (context/tensor parallel splits)
};

// Every choice of every example, batched in file order; every rank of a layout must call it with
// the same examples.
ChoiceScores score_choices(const std::vector<ChoiceExample>& examples, const LogitsFn& logits,
                           const ScoringOptions& options);

}  // namespace loom::eval
