// Constraint: what a request's structured output asks of its generated tokens, as the engine
// applies it (engine/request_sampler.cc): before each draw the tokens the schema's matcher does
// not take are masked out, the end of generation (EOS, stop tokens) only allowed once the text
// is complete; the drawn token's bytes then advance the matcher.
#pragma once

#include <cstdint>
#include <memory>

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
};

}  // namespace cpm::structured
