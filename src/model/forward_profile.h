// Where a forward's wall time goes, section by section (`cpmserve bench --profile`): the
// embedding, norms, each projection, RoPE and KV writes, attention, the MLP, the head. A
// forward runs on one thread, which hands each parallel kernel to the pool and waits for its
// last task, so a section's wall time on that thread is what the step spends in it, the pool's
// waits at its calls' ends included. One profile of one run is comparable with itself on a
// shared host where two runs are not: the share each section takes of the same step.
//
// Off (the default, and always in the server), a section costs one thread-local load and a
// branch; on, two clock reads (~300 sections a MiniCPM4 decode step: ~10 µs of ~30 ms).
#pragma once

#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "kernels/matmul.h"

namespace cpm {

// What a section's matmuls did: the weight bytes they streamed (kernels::StreamedBytes) and
// their FLOPs (2 · rows · out · in per weight); zero for sections without matmuls.
struct MatmulWork {
  double weight_bytes = 0;
  double flops = 0;
};

class ForwardProfile {
 public:
  struct Section {
    std::string name;
    double seconds = 0;
    int64_t calls = 0;
    MatmulWork work;
  };

  // Sections in the order they first ran; their times are disjoint.
  const std::vector<Section>& sections() const { return sections_; }
  double total_seconds() const;
  void Add(const char* name, double seconds, const MatmulWork& work);

 private:
  std::vector<Section> sections_;
};

// The profile this thread's forwards add to; null (the default) records nothing. The caller
// keeps `profile` alive while it is set.
void SetThreadForwardProfile(ForwardProfile* profile);
ForwardProfile* ThreadForwardProfile();

// Times its scope as section `name` (a string literal) of the thread's profile, if one is set.
class ProfileScope {
 public:
  explicit ProfileScope(const char* name, MatmulWork work = {})
      : profile_(ThreadForwardProfile()), name_(name), work_(work) {
    if (profile_ != nullptr) start_ = std::chrono::steady_clock::now();
  }
  ~ProfileScope() { End(); }
  // Ends the section here, before its scope does.
  void End() {
    if (profile_ == nullptr) return;
    const std::chrono::duration<double> d = std::chrono::steady_clock::now() - start_;
    profile_->Add(name_, d.count(), work_);
    profile_ = nullptr;
  }
  ProfileScope(const ProfileScope&) = delete;
  ProfileScope& operator=(const ProfileScope&) = delete;

 private:
  ForwardProfile* profile_;
  const char* name_;
  MatmulWork work_;
  std::chrono::steady_clock::time_point start_;
};

// What calls of `rows` rows do with `ws`, for a section that runs them; zero unless a profile
// is set (it is only read then).
MatmulWork MatmulWorkOf(std::initializer_list<const kernels::LinearWeight*> ws, int64_t rows);

}  // namespace cpm
