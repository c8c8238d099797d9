// RequestStream: the thread-safe queue of TokenEvents from the engine thread to one handler.
#include "engine/engine.h"

namespace cpm {

void RequestStream::Push(TokenEvent event) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    events_.push_back(std::move(event));
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
