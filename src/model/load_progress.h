// The progress bar while a checkpoint's tensors are read, in the shape of vLLM's (tqdm's)
// "Loading safetensors checkpoint shards:  50% Completed | 1/2 [00:01<00:01,  1.02s/it]".
// Progress is by bytes; the count is of shards whose tensors have all been read. On a
// terminal the bar redraws in place; otherwise (a log file) a line is written only when a
// shard completes, so logs stay short.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>

namespace cpm {

class LoadProgress {
 public:
  // `shard_bytes`: the bytes of tensors in each shard file.
  explicit LoadProgress(std::map<std::string, int64_t> shard_bytes);
  // `bytes` of tensor data from `file` are now loaded.
  void Add(const std::string& file, int64_t bytes);
  // Everything is loaded (tensors skipped on purpose included): draws 100%.
  void Finish();
  // The line for the current state (exposed for tests).
  std::string Line() const;

 private:
  void Draw(bool force);

  std::map<std::string, int64_t> left_;  // bytes still to read per shard
  int64_t total_ = 0, done_ = 0;
  int shards_done_ = 0;
  bool tty_ = false;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

}  // namespace cpm
