// Tokenizer::from_gguf_metadata: builds the tokenizer from llama.cpp's GGUF keys
//   tokenizer.ggml.model        must be "gpt2" (byte-level BPE)
//   tokenizer.ggml.pre          splitter name (see pre_tokenizer.h), required
//   tokenizer.ggml.tokens       [n_vocab] strings; token_type [n_vocab] ints (optional)
//   tokenizer.ggml.merges       "a b" strings in priority order
//   tokenizer.ggml.{bos,eos,eot,eom,padding}_token_id, add_bos_token, add_eos_token
// Control and user-defined tokens store raw text (llama.cpp's convert script writes HF added
// tokens as they are), so they decode to that text rather than through the byte table.
#include "core/error.h"
#include "core/metadata.h"
#include "tokenizer/tokenizer_impl.h"

namespace vi {

Tokenizer Tokenizer::from_gguf_metadata(const Metadata& md) {
  const std::string origin = "GGUF tokenizer metadata";
  auto m = std::make_shared<Impl>();
  m->origin = origin;

  const std::string model = md.get_string("tokenizer.ggml.model");
  if (model != "gpt2") {
    throw FormatError(fmt::format("{}: tokenizer.ggml.model '{}' is not supported (only byte-level BPE 'gpt2')",
                                  origin, model));
  }
  const auto pre = md.opt_string("tokenizer.ggml.pre");
  if (!pre) throw FormatError(fmt::format("{}: tokenizer.ggml.pre is missing", origin));
  auto preset = tok::gguf_pre_preset(*pre);
  m->pre = std::move(preset.pre);
  m->nfc = preset.nfc;

  m->text = md.get_string_array("tokenizer.ggml.tokens");
  const size_t n = m->text.size();
  if (n == 0) throw FormatError(fmt::format("{}: tokenizer.ggml.tokens is empty", origin));
  m->attr.assign(n, TokenAttr::kNormal);
  if (md.has("tokenizer.ggml.token_type")) {
    const auto types = md.get_int_array("tokenizer.ggml.token_type");
    if (types.size() != n) {
      throw FormatError(fmt::format("{}: tokenizer.ggml.token_type has {} entries for {} tokens", origin,
                                    types.size(), n));
    }
    for (size_t i = 0; i < n; ++i) {
      if (types[i] < 1 || types[i] > 6) {
        throw FormatError(fmt::format("{}: token {} has unknown token_type {}", origin, i, types[i]));
      }
      m->attr[i] = static_cast<TokenAttr>(types[i]);
    }
  }

  std::unordered_map<std::string, int32_t> vocab;
  vocab.reserve(n);
  for (size_t i = 0; i < n; ++i) vocab.try_emplace(m->text[i], static_cast<int32_t>(i));
  std::vector<std::pair<std::string, std::string>> merges;
  const auto merge_strs = md.get_string_array("tokenizer.ggml.merges");
  merges.reserve(merge_strs.size());
  for (size_t i = 0; i < merge_strs.size(); ++i) {
    const std::string& s = merge_strs[i];
    const size_t sp = s.find(' ', 1);  // as llama.cpp: a token never starts with the separator
    if (sp == std::string::npos) {
      throw FormatError(fmt::format("{}: merge {} '{}' has no space separator", origin, i, s));
    }
    merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
  }
  m->bpe = tok::Bpe(std::move(vocab), merges, /*ignore_merges=*/false, origin);

  // Control tokens are matched when parse_special; user-defined tokens always (llama.cpp).
  for (size_t i = 0; i < n; ++i) {
    if (m->attr[i] != TokenAttr::kControl && m->attr[i] != TokenAttr::kUserDefined) continue;
    tok::AddedToken t;
    t.content = m->text[i];
    t.id = static_cast<int32_t>(i);
    t.special = m->attr[i] == TokenAttr::kControl;
    m->added_by_content.try_emplace(t.content, t.id);
    m->added.add(std::move(t));
  }

  auto id_key = [&](const char* key) -> int32_t {
    const auto v = md.opt_int(key);
    if (!v) return -1;
    if (*v < 0 || static_cast<size_t>(*v) >= n) {
      throw FormatError(fmt::format("{}: {} = {} is outside the vocabulary of {}", origin, key, *v, n));
    }
    return static_cast<int32_t>(*v);
  };
  m->bos = id_key("tokenizer.ggml.bos_token_id");
  m->eos = id_key("tokenizer.ggml.eos_token_id");
  m->eot = id_key("tokenizer.ggml.eot_token_id");
  m->eom = id_key("tokenizer.ggml.eom_token_id");
  m->pad = id_key("tokenizer.ggml.padding_token_id");
  // Byte-level BPE models add no BOS unless the file says so.
  if (md.opt_bool("tokenizer.ggml.add_bos_token").value_or(false)) {
    if (m->bos < 0) throw FormatError(fmt::format("{}: add_bos_token is set but there is no bos_token_id", origin));
    m->prefix.push_back(m->bos);
  }
  if (md.opt_bool("tokenizer.ggml.add_eos_token").value_or(false)) {
    if (m->eos < 0) throw FormatError(fmt::format("{}: add_eos_token is set but there is no eos_token_id", origin));
    m->suffix.push_back(m->eos);
  }
  m->finish(/*raw_added_text=*/true);
  return Tokenizer(std::move(m));
}

}  // namespace vi
