// vLLM's thinking_token_budget: a cap on the tokens a reasoning model generates inside one
// thinking section (<think> … </think>). Once a section holds `budget` generated tokens, the end
// marker's tokens are forced, one per step, and the model goes on with its answer. A section
// opens where the prompt ends inside one (the chat template's "<think>\n") or where the output
// emits the start marker; the end marker, generated or forced, closes it, and a later start
// marker opens a new one with a fresh budget.
//
// Counting differs from vLLM's processor in one corner, on purpose: vLLM re-reads the output
// only every `remaining budget` steps, so a section the output opens gets budget + 1 tokens
// there, while one the prompt opens gets `budget`. Here both get exactly `budget` (the
// prompt's own tokens after its marker never count, as in vLLM's common case).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace cpm {

struct ThinkingBudget {
  int64_t budget = 0;          // generated tokens a section may hold (0: close it at once)
  std::vector<int32_t> start;  // the start marker as token ids ("<think>")
  std::vector<int32_t> end;    // the end marker as token ids ("</think>"), forced at the cap
};

// One sequence's place in its thinking sections. Fed the output as it grows; the engine asks it
// before each draw which token, if any, the draw must be.
class ThinkingBudgetState {
 public:
  // Inside a section from the start if the prompt's last start marker follows its last end
  // marker; a budget of 0 then forces the end marker first thing.
  ThinkingBudgetState(const ThinkingBudget& b, std::span<const int32_t> prompt);

  // Reads the output tokens not seen yet (`output` is everything generated so far), then
  // returns the token the next draw must produce, or -1 for a free draw.
  int32_t Next(const ThinkingBudget& b, std::span<const int32_t> output);

  bool in_section() const { return in_section_; }
  int64_t count() const { return count_; }

 private:
  void Advance(const ThinkingBudget& b, std::span<const int32_t> output_so_far);
  void CheckCap(const ThinkingBudget& b);

  bool in_section_ = false;
  int64_t count_ = 0;      // generated tokens in the open section
  int64_t forcing_ = -1;   // index into b.end of the next forced token; -1: not forcing
  size_t seen_ = 0;        // output tokens read so far
};

}  // namespace cpm
