#include "model/load_progress.h"

#include <unistd.h>

#include <cstdio>

#include <fmt/format.h>

namespace cpm {
namespace {

std::string Clock(double s) {
  const int t = static_cast<int>(s + 0.5);
  return fmt::format("{:02d}:{:02d}", t / 60, t % 60);
}

}  // namespace

LoadProgress::LoadProgress(std::map<std::string, int64_t> shard_bytes)
    : left_(std::move(shard_bytes)),
      tty_(isatty(STDERR_FILENO) != 0),
      start_(std::chrono::steady_clock::now()) {
  for (const auto& [file, bytes] : left_) total_ += bytes;
  last_draw_ = start_;
  Draw(true);
}

void LoadProgress::Add(const std::string& file, int64_t bytes) {
  done_ += bytes;
  auto it = left_.find(file);
  bool shard_done = false;
  if (it != left_.end()) {
    it->second -= bytes;
    if (it->second <= 0) {
      left_.erase(it);
      ++shards_done_;
      shard_done = true;
    }
  }
  Draw(shard_done);
}

void LoadProgress::Finish() {
  if (left_.empty() && done_ >= total_) return;  // drawn already
  shards_done_ += static_cast<int>(left_.size());
  left_.clear();
  done_ = total_;
  Draw(true);
}

std::string LoadProgress::Line() const {
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const int shards = shards_done_ + static_cast<int>(left_.size());
  const double frac = total_ > 0 ? static_cast<double>(done_) / static_cast<double>(total_) : 1.0;
  // tqdm: the rate in shards per second, or seconds per shard when slower than one a second.
  std::string rate = "?it/s", eta = "?";
  if (shards_done_ > 0 && elapsed > 0) {
    const double per_s = shards_done_ / elapsed;
    rate = per_s >= 1 ? fmt::format("{:.2f}it/s", per_s) : fmt::format("{:.2f}s/it", 1 / per_s);
  }
  if (frac > 0) eta = Clock(elapsed * (1 - frac) / frac);
  return fmt::format("Loading safetensors checkpoint shards: {:3d}% Completed | {}/{} [{}<{}, {}]",
                     static_cast<int>(frac * 100), shards_done_, shards, Clock(elapsed), eta, rate);
}

void LoadProgress::Draw(bool force) {
  const auto now = std::chrono::steady_clock::now();
  if (tty_) {
    if (!force && now - last_draw_ < std::chrono::milliseconds(100)) return;
    std::fprintf(stderr, "\r%s%s", Line().c_str(), left_.empty() ? "\n" : "");
  } else {
    if (!force) return;
    std::fprintf(stderr, "%s\n", Line().c_str());
  }
  std::fflush(stderr);
  last_draw_ = now;
}

}  // namespace cpm
