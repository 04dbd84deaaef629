#include "loom/data/tokenizer/hf_normalizer.h"

namespace loom::data {

HfNormalizer::HfNormalizer(const nlohmann::json& config, const JsonPlace& at) {
  if (!config.is_null()) add(config, at);
}

void HfNormalizer::add(const nlohmann::json& config, const JsonPlace& at) {
  const std::string type = json_type(config, at);
  if (type == "Sequence") {
    const auto& list = json_field(config, "normalizers", at);
    LOOM_CHECK(list.is_array(), DataError, at.child("normalizers").str(), " must be a list");
    for (size_t i = 0; i < list.size(); ++i) add(list[i], at.child("normalizers").item(i));
  } else if (type == "NFC") {
    forms_.push_back(NormalForm::nfc);
  } else if (type == "NFD") {
    forms_.push_back(NormalForm::nfd);
  } else if (type == "NFKC") {
    forms_.push_back(NormalForm::nfkc);
  } else if (type == "NFKD") {
    forms_.push_back(NormalForm::nfkd);
  } else {
    unsupported_component(at, type, "the normalizers NFC, NFD, NFKC, NFKD and Sequence");
  }
}

NormalizedText HfNormalizer::apply(std::string_view text) const {
  NormalizedText out;
  out.text = std::string(text);
  for (const NormalForm form : forms_) out = compose_alignment(out, unicode_normalize(out.text, form));
  return out;
}

}  // namespace loom::data
