#include "kv/state_slots.h"

#include <cstring>

#include "base/check.h"

namespace cpm {

StateSlots::StateSlots(int64_t num_slots, int64_t slot_bytes)
    : num_slots_(num_slots), slot_bytes_(slot_bytes),
      buffer_(static_cast<size_t>(num_slots * slot_bytes)), in_use_(num_slots, false) {
  for (int64_t s = num_slots - 1; s >= 0; --s) free_.push_back(static_cast<int32_t>(s));
}

std::optional<int32_t> StateSlots::Allocate() {
  if (free_.empty()) return std::nullopt;
  const int32_t s = free_.back();
  free_.pop_back();
  in_use_[s] = true;
  Reset(s);
  return s;
}

void StateSlots::Release(int32_t slot) {
  CPM_CHECK(slot >= 0 && slot < num_slots_ && in_use_[slot]);
  in_use_[slot] = false;
  free_.push_back(slot);
}

void StateSlots::Reset(int32_t slot) {
  std::memset(Data(slot), 0, static_cast<size_t>(slot_bytes_));
}

}  // namespace cpm
