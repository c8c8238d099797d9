// A minimal, deterministic BPE trainer for test tokenizers: repeatedly merges the most frequent
// adjacent symbol pair inside words (ties: the lexicographically smallest pair).
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace cpm {

// `words` maps a word (its initial symbols, usually single characters) to its count. Returns
// up to `num_merges` merges in rank order (pairs seen once count too, so small texts still
// yield enough merges); stops early when every word is a single symbol.
std::vector<std::pair<std::string, std::string>> TrainBpeMerges(
    std::map<std::vector<std::string>, int> words, int num_merges);

}  // namespace cpm
