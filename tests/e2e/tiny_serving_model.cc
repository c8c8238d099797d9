// Writes tokenizer + checkpoint with one vocabulary size, so every token id the tokenizer can
// produce is a row of the embedding.
#include "e2e/tiny_serving_model.h"

#include <filesystem>

#include "model/tiny_checkpoint.h"
#include "tokenizer/tiny_tokenizer.h"

namespace cpm {

Status WriteTinyServingModel(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return InvalidArgument(dir + ": " + ec.message());
  int32_t vocab = 0;
  CPM_RETURN_IF_ERROR(WriteTinyTokenizer(dir, TinyTokenizerFamily::kSentencePieceBpe, &vocab));
  TinyCheckpointOptions o;
  o.out_dir = dir;
  o.seed = 7;
  o.vocab_size = vocab;
  o.eos_token_id = {2};
  return WriteTinyMiniCpm(o);
}

}  // namespace cpm
