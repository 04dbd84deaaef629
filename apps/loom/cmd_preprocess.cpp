// `loom preprocess`: JSON lines -> Megatron .bin/.idx (logic in loom/data/data_cli.cpp).
#include "command.h"
#include "loom/data/data_cli.h"

LOOM_COMMAND("preprocess", "tokenize JSON lines into a Megatron indexed dataset (.bin/.idx)",
             loom::data::run_preprocess_command);
