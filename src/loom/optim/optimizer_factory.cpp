#include "loom/optim/optimizer_factory.h"

#include "loom/core/text.h"

namespace loom::optim {

const std::vector<std::string>& optimizer_types() {
  static const std::vector<std::string> types = {"AdamW", "Muon"};
  return types;
}

OptimizerSection read_optimizer_section(const nlohmann::ordered_json& section, OptionProblems& problems) {
  OptionReader reader(section, "optimizer", problems);
  OptimizerSection out;
  reader.reject_null("type", "str", "AdamW");
  out.type = reader.string("type").value_or("AdamW");
  if (out.type == "AdamW") {
    out.options = AdamWOptions::read(reader);
  } else if (out.type == "Muon") {
    out.options = MuonOptions::read(reader);
  } else {
    reader.error("type",
                 "must be 'AdamW' or 'Muon', got '" + out.type + "'" + did_you_mean(out.type, optimizer_types()));
  }
  return out;
}

std::unique_ptr<Optimizer> build_optimizer(const nlohmann::ordered_json& section, const NamedParams& params,
                                           const OptimizerContext& context) {
  OptionProblems problems;
  OptimizerSection s = read_optimizer_section(section, problems);
  problems.throw_if_errors();
  if (const auto* adamw = std::get_if<AdamWOptions>(&s.options))
    return std::make_unique<AdamW>(params, *adamw, context.model_no_decay);
  return std::make_unique<Muon>(params, std::get<MuonOptions>(s.options), context.model, context.swap,
                                context.model_no_decay, context.muon_sharding);
}

}  // namespace loom::optim
