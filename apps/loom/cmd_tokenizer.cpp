// `loom tokenizer encode|decode|chat|info|train` (logic in loom/data/tokenizer_cli.cpp).
#include "command.h"
#include "loom/data/data_cli.h"

LOOM_COMMAND("tokenizer", "encode, decode and render chats with a model's tokenizer; train a SentencePiece one",
             loom::data::run_tokenizer_command);
