// Deterministic BPE training for test tokenizers (see bpe_trainer.h).
#include "tokenizer/bpe_trainer.h"

namespace cpm {

std::vector<std::pair<std::string, std::string>> TrainBpeMerges(
    std::map<std::vector<std::string>, int> words, int num_merges) {
  std::vector<std::pair<std::string, std::string>> merges;
  // Word lists are small (hundreds of distinct words), so recounting each round is cheap.
  std::vector<std::pair<std::vector<std::string>, int>> list(words.begin(), words.end());
  for (int round = 0; round < num_merges; ++round) {
    std::map<std::pair<std::string, std::string>, int> counts;
    for (const auto& [syms, n] : list) {
      for (size_t i = 0; i + 1 < syms.size(); ++i) counts[{syms[i], syms[i + 1]}] += n;
    }
    const std::pair<std::string, std::string>* best = nullptr;
    int best_count = 0;
    for (const auto& [pair, n] : counts) {
      if (n > best_count) {  // strict: the first (smallest) pair wins ties
        best = &pair;
        best_count = n;
      }
    }
    if (best == nullptr) break;
    const auto merge = *best;
    merges.push_back(merge);
    for (auto& [syms, n] : list) {
      std::vector<std::string> out;
      for (size_t i = 0; i < syms.size(); ++i) {
        if (i + 1 < syms.size() && syms[i] == merge.first && syms[i + 1] == merge.second) {
          out.push_back(merge.first + merge.second);
          ++i;
        } else {
          out.push_back(syms[i]);
        }
      }
      syms = std::move(out);
    }
  }
  return merges;
}

}  // namespace cpm
