// Constant data behind WriteTinyTokenizer: training text and the real templates / regex.
#pragma once

namespace cpm {

// English, Chinese and a little code; merges are learned from it deterministically.
const char* TinyTrainingText();
// MiniCPM4-0.5B's tokenizer_config.json chat_template.
const char* MiniCpm4ChatTemplate();
// MiniCPM-V-4.6's chat_template.jinja.
const char* MiniCpmV46ChatTemplate();
// MiniCPM-V-4.6's tokenizer_config.json pretokenize_regex (the Qwen3.5 pattern).
const char* Qwen35PretokenizeRegex();

}  // namespace cpm
