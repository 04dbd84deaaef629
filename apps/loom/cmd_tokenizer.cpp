// `loom tokenizer train|info`: SentencePiece models (logic in loom/data/data_cli.cpp).
#include "command.h"
#include "loom/data/data_cli.h"

LOOM_COMMAND("tokenizer", "train or inspect a SentencePiece tokenizer", loom::data::run_tokenizer_command);
