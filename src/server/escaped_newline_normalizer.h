// Recovers newlines that a model wrote as the two characters `\` `n`. MiniCPM-V models
// sometimes emit a literal "\n" (or "\r\n", "\r") where a line break is meant; the model card
// and vLLM's minicpmv parser turn it back into a newline everywhere except where a backslash
// means something: inside ``` fences, `inline code`, $…$ / $$…$$ and \(…\) / \[…\] LaTeX, and in
// runs of two or more backslashes. Streaming-safe: text that might be the first half of an
// escape or of a span marker is held back until the next chunk, so any split of the text
// gives the same output as the whole.
#pragma once

#include <string>
#include <string_view>

namespace cpm {

class EscapedNewlineNormalizer {
 public:
  // Returns the normalised text that can be released now; `final` flushes what was held back.
  std::string Feed(std::string_view text, bool final);

 private:
  std::string pending_;  // the tail held back from the previous chunk
  std::string closing_;  // inside a protected span: the marker that ends it
};

// One-shot form (the whole text at once).
std::string RecoverEscapedNewlines(std::string_view text);

}  // namespace cpm
