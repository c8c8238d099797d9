// StateSlots: fixed-size per-sequence state for linear-attention (Gated DeltaNet) layers — conv
// windows and f32 recurrent states — beside the paged KV cache. The engine hands one slot to
// each running sequence of a hybrid model; the model interprets the bytes. Engine thread only.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "base/aligned_buffer.h"

namespace cpm {

class StateSlots {
 public:
  StateSlots(int64_t num_slots, int64_t slot_bytes);

  int64_t num_slots() const { return num_slots_; }
  int64_t slot_bytes() const { return slot_bytes_; }
  int64_t num_free() const { return static_cast<int64_t>(free_.size()); }

  // Takes a free slot, zeroed (a new sequence starts from the zero state); nullopt if none.
  std::optional<int32_t> Allocate();
  void Release(int32_t slot);
  // Zeroes a slot in use (a preempted sequence restarts from scratch).
  void Reset(int32_t slot);

  uint8_t* Data(int32_t slot) { return buffer_.as<uint8_t>() + slot * slot_bytes_; }

 private:
  int64_t num_slots_;
  int64_t slot_bytes_;
  AlignedBuffer buffer_;
  std::vector<int32_t> free_;
  std::vector<bool> in_use_;
};

}  // namespace cpm
