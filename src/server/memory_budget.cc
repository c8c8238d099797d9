// KV cache sizing over host RAM, with vLLM's start-up error texts.
#include "server/memory_budget.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <sstream>

namespace cpm {

StatusOr<HostMemory> ReadHostMemory(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Unavailable(path + ": cannot read");
  HostMemory m;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::string key;
    int64_t kib = 0;
    ls >> key >> kib;
    if (key == "MemTotal:") m.total_bytes = kib * 1024;
    if (key == "MemAvailable:") m.available_bytes = kib * 1024;
  }
  if (m.total_bytes <= 0) return Unavailable(path + ": no MemTotal");
  if (m.available_bytes <= 0) m.available_bytes = m.total_bytes;
  return m;
}

double ToGiB(int64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024 * 1024); }

std::string WithThousands(int64_t v) {
  std::string digits = std::to_string(v < 0 ? -v : v);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return v < 0 ? "-" + out : out;
}

StatusOr<KvBudget> PlanKvBudget(const KvBudgetInput& in) {
  KvBudget b;
  const int64_t block_tokens = std::max<int64_t>(in.block_size, 1);
  const int64_t per_block = std::max<int64_t>(in.kv_bytes_per_block, 1);
  if (in.kv_cache_memory_bytes) {
    // vLLM skips profiling entirely: the user's number is the cache (KV blocks and states).
    b.kv_bytes = *in.kv_cache_memory_bytes - in.state_bytes;
    b.requested_bytes = in.weight_bytes + in.activation_bytes + *in.kv_cache_memory_bytes;
  } else {
    b.requested_bytes = static_cast<int64_t>(static_cast<double>(in.memory.total_bytes) *
                                             in.utilization);
    if (in.memory.available_bytes < b.requested_bytes) {
      if (in.utilization_explicit) {
        return InvalidArgument(fmt::format(
            "Free memory on device cpu ({:.2f}/{:.2f} GiB) on startup is less than desired GPU "
            "memory utilization ({}, {:.2f} GiB). Decrease GPU memory utilization or reduce GPU "
            "memory used by other processes. (On a CPU, --gpu-memory-utilization is the share "
            "of host RAM to take: a GPU's 0.9 rarely fits a host that runs anything else; try "
            "0.5, or size the cache with --kv-cache-memory-bytes.)",
            ToGiB(in.memory.available_bytes), ToGiB(in.memory.total_bytes), in.utilization,
            ToGiB(b.requested_bytes)));
      }
      // A shared CPU box: take the default fraction of what is free rather than fail.
      b.requested_bytes = static_cast<int64_t>(static_cast<double>(in.memory.available_bytes) *
                                               in.utilization);
      b.fell_back_to_available = true;
    }
    b.kv_bytes = b.requested_bytes - in.weight_bytes - in.activation_bytes - in.state_bytes;
    if (b.kv_bytes <= 0) {
      return InvalidArgument(
          "No available memory for the cache blocks. Try increasing `gpu_memory_utilization` "
          "when initializing the engine.");
    }
  }
  b.num_blocks = std::max<int64_t>(b.kv_bytes, 0) / per_block;
  if (b.num_blocks <= 0) {
    return InvalidArgument(
        "No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
        "initializing the engine.");
  }
  b.num_tokens = b.num_blocks * block_tokens;
  if (in.max_model_len < 0) {
    b.max_model_len = std::min(in.derived_max_model_len, b.num_tokens);
  } else {
    b.max_model_len = in.max_model_len > 0 ? in.max_model_len : in.derived_max_model_len;
  }
  const int64_t blocks_per_seq = (b.max_model_len + block_tokens - 1) / block_tokens;
  if (blocks_per_seq > b.num_blocks) {
    const double needed = ToGiB(blocks_per_seq * per_block);
    return InvalidArgument(fmt::format(
        "To serve at least one request with the model's max seq len ({}), {:.2f} GiB KV cache "
        "is needed, which is larger than the available KV cache memory ({:.2f} GiB). Based on "
        "the available memory, the estimated maximum model length is {}. Try increasing "
        "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.",
        b.max_model_len, needed, ToGiB(b.kv_bytes), b.num_tokens));
  }
  // On a CPU the pages of a huge pool stay untouched, but its bookkeeping does not: beyond
  // what max_num_seqs full-length requests (plus as much again for cached prefixes) can use,
  // blocks only cost memory.
  const int64_t useful = 2 * std::max<int64_t>(in.max_num_seqs, 1) * blocks_per_seq;
  b.available_kv_bytes = b.kv_bytes;
  if (!in.kv_cache_memory_bytes && b.num_blocks > useful) {
    b.num_blocks = useful;
    b.num_tokens = b.num_blocks * block_tokens;
    b.kv_bytes = b.num_blocks * per_block;
    b.capped = true;
  }
  return b;
}

}  // namespace cpm
