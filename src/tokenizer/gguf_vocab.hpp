#pragma once
// A GGUF file's tokenizer (tokenizer.ggml.*) as the tokenizer.json document
// Hugging Face would have for it, so one loader (Tokenizer::from_json) builds
// both and they cannot drift apart:
//   tokenizer.ggml.model "gpt2"         model {type BPE, vocab, merges}, decoder ByteLevel
//   tokenizer.ggml.pre "qwen2"          normalizer NFC, pre_tokenizer Split(Qwen2's regex) + ByteLevel
//                      "llama-bpe"      no normalizer, Split(Llama 3's regex) + ByteLevel, ignore_merges
//                                       ("llama3" and "llama-v3" too, older converters' names)
//   tokenizer.ggml.tokens / token_type  NORMAL (1) and BYTE (6) tokens form the BPE vocab;
//                                       CONTROL (3) and UNKNOWN (2) are special added tokens,
//                                       USER_DEFINED (4) non-special ones (<think>, ...), all
//                                       matched on the raw text (llama.cpp's convention: it stores
//                                       them pre-normalized); UNUSED (5) ids ([PAD151669]...) are holes
//   tokenizer.ggml.merges               "a b" merge rules, highest priority first
//   tokenizer.ggml.add_bos/eos_token    post_processor TemplateProcessing around the text
//                                       (default: BOS for llama-bpe, as llama.cpp; none for qwen2)
// Other models or pre-tokenizers are Error{unsupported_arch}; malformed keys Error{bad_model}.
#include <nlohmann/json.hpp>

#include "io/gguf.hpp"
#include "tokenizer/tokenizer.hpp"

namespace neuron::tokenizer {

nlohmann::json gguf_tokenizer_document(const io::GgufMetadata& metadata);

// The tokenizer of a GGUF file: Tokenizer::from_json over that document.
// Errors name the file. Throws Error{bad_model|unsupported_arch}.
Tokenizer tokenizer_from_gguf(const io::GgufMetadata& metadata);

// The pre-tokenizer regex of Qwen2/Qwen3 (tokenizer.json's Split pattern; llama.cpp's "qwen2").
inline constexpr const char* kQwen2PreTokenizerRegex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

// Qwen3.5's (tokenizer.json's Split pattern; llama.cpp's "qwen35"): Qwen2's with combining marks (\p{M}) in words.
inline constexpr const char* kQwen35PreTokenizerRegex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

// Llama 3's (tokenizer.json's Split pattern; llama.cpp's "llama-bpe"): Qwen2's with numbers in runs of up to three digits.
inline constexpr const char* kLlama3PreTokenizerRegex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

}  // namespace neuron::tokenizer
