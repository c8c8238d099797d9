#include "model/forward_profile.h"

namespace cpm {
namespace {

thread_local ForwardProfile* g_thread_profile = nullptr;

}  // namespace

double ForwardProfile::total_seconds() const {
  double total = 0;
  for (const Section& s : sections_) total += s.seconds;
  return total;
}

void ForwardProfile::Add(const char* name, double seconds, double weight_bytes) {
  for (Section& s : sections_) {
    if (s.name == name) {
      s.seconds += seconds;
      s.weight_bytes += weight_bytes;
      ++s.calls;
      return;
    }
  }
  sections_.push_back({name, seconds, 1, weight_bytes});
}

void SetThreadForwardProfile(ForwardProfile* profile) { g_thread_profile = profile; }

ForwardProfile* ThreadForwardProfile() { return g_thread_profile; }

double StreamedWeightBytes(std::initializer_list<const kernels::LinearWeight*> ws, int64_t rows) {
  if (ThreadForwardProfile() == nullptr) return 0;
  double bytes = 0;
  for (const kernels::LinearWeight* w : ws) {
    bytes += static_cast<double>(kernels::StreamedBytes(*w, rows));
  }
  return bytes;
}

}  // namespace cpm
