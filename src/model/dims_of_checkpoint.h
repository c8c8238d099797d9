// `cpmserve make-tiny --dims-of MODEL_DIR`: a random checkpoint at the full dimensions of a
// published model folder (its config.json; weights there are not read), for checks at the
// released sizes (numerics against the numpy references, memory, speed from a file) where the
// weights cannot be downloaded.
#pragma once

#include <string>

#include "base/status.h"
#include "model/tiny_checkpoint.h"

namespace cpm {

// Copies every file of `model_dir` but its weights (the config, tokenizer files, chat template,
// generation and preprocessor configs) into options.out_dir, which must be new or empty (its
// config's declared dtype rewritten to the storage dtype where they differ), then writes random
// weights of the config's shapes beside them: MiniCPMForCausalLM (MiniCPM4, BitCPM4 with options' ternary
// settings) or MiniCPMV4_6ForConditionalGeneration (language model, vision tower, mergers, MTP
// head). The options' vocab_size, token ids, tying and real_heads are not used.
Status WriteCheckpointWithDimsOf(const std::string& model_dir, const TinyCheckpointOptions& options);

}  // namespace cpm
