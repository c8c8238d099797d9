// Constraint: what a request's structured output asks of its generated tokens, as the engine
// applies it (engine/request_sampler.cc): before each draw the tokens the schema's matcher does
// not take are masked out, the end of generation (the tokenizer's EOS) only allowed once the
// text is complete; the drawn token's bytes then advance the matcher.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "structured/json_schema.h"
#include "structured/token_table.h"

namespace cpm::structured {

struct Constraint {
  std::shared_ptr<const Schema> schema;
  std::shared_ptr<const TokenTable> tokens;
  // -1: from the first generated token. Else the constraint starts after this token: a
  // reasoning model whose prompt opens its thinking (<think>) is free until </think>, as vLLM
  // applies structured outputs after the reasoning.
  int32_t starts_after = -1;
  // The tokens that may end a complete output: the tokenizer's EOS, as xgrammar's TokenizerInfo
  // (vLLM's backend) allows; empty: every EOS and stop token id of the request.
  std::vector<int32_t> end_tokens;
};

}  // namespace cpm::structured
