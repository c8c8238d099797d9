// RequestStream: the thread-safe queue of TokenEvents from the engine thread to one handler;
// StreamSignal: one wake-up for a handler reading several.
#include "engine/engine.h"

namespace cpm {

void RequestStream::Push(TokenEvent event) {
  std::shared_ptr<StreamSignal> signal;
  {
    std::lock_guard<std::mutex> lock(mu_);
    events_.push_back(std::move(event));
    signal = signal_;
  }
  cv_.notify_all();
  if (signal) signal->Raise();
}

void RequestStream::Listen(std::shared_ptr<StreamSignal> signal) {
  std::lock_guard<std::mutex> lock(mu_);
  signal_ = std::move(signal);
}

uint64_t StreamSignal::count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return count_;
}

void StreamSignal::WaitPast(uint64_t seen, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return count_ != seen; });
}

void StreamSignal::Raise() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++count_;
  }
  cv_.notify_all();
}

bool RequestStream::Next(TokenEvent* out, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_for(lock, timeout, [this] { return !events_.empty(); })) return false;
  *out = std::move(events_.front());
  events_.pop_front();
  return true;
}

}  // namespace cpm
