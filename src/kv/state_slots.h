// StateSlots: fixed-size per-sequence state for linear-attention layers of hybrid models (conv
// state + recurrent state), one byte arena of `slot_bytes` per slot in one contiguous buffer.
// The engine hands slot ids to sequences; the model interprets the bytes. Engine thread only.
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
  int64_t num_free() const { return static_cast<int64_t>(free_.size()); }
  int64_t slot_bytes() const { return slot_bytes_; }
  // Distance between slot starts: slot_bytes rounded up to 64 so every slot is aligned.
  int64_t slot_stride() const { return stride_; }

  // Takes a free slot and zeroes it (a new sequence starts from the zero state), or nullopt.
  // `zero` false leaves its bytes as they are (a slot about to be overwritten whole).
  std::optional<int32_t> Allocate(bool zero = true);
  void Release(int32_t slot);
  bool InUse(int32_t slot) const { return in_use_[slot]; }

  std::byte* Data(int32_t slot) { return buffer_.data() + slot * stride_; }
  const std::byte* Data(int32_t slot) const { return buffer_.data() + slot * stride_; }

 private:
  int64_t num_slots_;
  int64_t slot_bytes_;
  int64_t stride_;
  AlignedBuffer buffer_;        // [num_slots, stride]
  std::vector<int32_t> free_;   // a stack: the most recently freed slot is reused first
  std::vector<bool> in_use_;
};

}  // namespace cpm
