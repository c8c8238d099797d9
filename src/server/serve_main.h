// `cpmserve serve`: the process around the server. Listens first (so /health says 503 while
// loading), loads tokenizer, template and weights, sizes the KV cache, starts the engine, logs
// vLLM's start-up lines, and on SIGINT/SIGTERM stops accepting, ends in-flight requests with
// finish_reason "abort" and returns 0. Start-up failures return non-zero after one error line.
#pragma once

#include "server/serve_config.h"

namespace cpm {

// Blocks until shutdown; returns the process exit code. Call before creating other threads:
// it blocks SIGINT/SIGTERM in the calling thread so that every thread started later inherits
// the mask and only the dedicated signal thread receives them (no global flag needed).
int RunServe(const ServeConfig& config);

}  // namespace cpm
