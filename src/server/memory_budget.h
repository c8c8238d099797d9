// Sizing the KV cache from the memory budget, as vLLM's worker does (total memory x
// --gpu-memory-utilization, minus weights and activations), but over host RAM: a CPU box is
// shared, so MemAvailable decides whether the budget is really there. Errors carry vLLM's
// start-up texts. Pure arithmetic plus a /proc/meminfo reader; no model or engine types.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "base/status.h"

namespace cpm {

struct HostMemory {
  int64_t total_bytes = 0;      // MemTotal
  int64_t available_bytes = 0;  // MemAvailable
};

// Reads /proc/meminfo (or `path`). Unavailable when it cannot be read.
StatusOr<HostMemory> ReadHostMemory(const std::string& path = "/proc/meminfo");

struct KvBudgetInput {
  HostMemory memory;
  double utilization = 0.9;
  bool utilization_explicit = false;  // --gpu-memory-utilization given: no fallback
  std::optional<int64_t> kv_cache_memory_bytes;
  int64_t weight_bytes = 0;
  int64_t activation_bytes = 0;       // estimated peak of one full step
  int64_t kv_bytes_per_block = 0;     // all layers, K and V
  int64_t block_size = 16;
  int64_t max_model_len = 0;          // -1: choose the largest that fits (capped by derived)
  int64_t derived_max_model_len = 0;  // from config.json
  int64_t max_num_seqs = 1;
  // Hybrid models: the recurrent-state slots (one per running sequence), taken out of the
  // cache memory before it is cut into KV blocks, as vLLM does for mamba-style layers.
  int64_t state_bytes = 0;
};

struct KvBudget {
  int64_t requested_bytes = 0;  // the memory this instance may use
  int64_t kv_bytes = 0;         // the KV blocks' memory (state slots excluded)
  int64_t num_blocks = 0;
  int64_t num_tokens = 0;       // num_blocks * block_size
  int64_t max_model_len = 0;    // resolved (auto)
  bool capped = false;          // more blocks than max_num_seqs full-length requests can use
  int64_t available_kv_bytes = 0;  // kv_bytes before that cap (vLLM's "available" figure)
  bool fell_back_to_available = false;  // default utilisation did not fit MemAvailable
};

// Decides the number of KV blocks. Errors are kInvalidArgument with vLLM's texts.
StatusOr<KvBudget> PlanKvBudget(const KvBudgetInput& in);

// 34952 -> "34,952", as vLLM prints token counts.
std::string WithThousands(int64_t v);
double ToGiB(int64_t bytes);

}  // namespace cpm
