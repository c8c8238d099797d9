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

void ForwardProfile::Add(const char* name, double seconds, const MatmulWork& work) {
  for (Section& s : sections_) {
    if (s.name == name) {
      s.seconds += seconds;
      s.work.weight_bytes += work.weight_bytes;
      s.work.flops += work.flops;
      ++s.calls;
      return;
    }
  }
  sections_.push_back({name, seconds, 1, work});
}

void SetThreadForwardProfile(ForwardProfile* profile) { g_thread_profile = profile; }

ForwardProfile* ThreadForwardProfile() { return g_thread_profile; }

MatmulWork MatmulWorkOf(std::initializer_list<const kernels::LinearWeight*> ws, int64_t rows) {
  MatmulWork work;
  if (ThreadForwardProfile() == nullptr) return work;
  for (const kernels::LinearWeight* w : ws) {
    work.weight_bytes += static_cast<double>(kernels::StreamedBytes(*w, rows));
    work.flops += 2.0 * static_cast<double>(rows) * static_cast<double>(w->out_features) *
                  static_cast<double>(w->in_features);
  }
  return work;
}

}  // namespace cpm
