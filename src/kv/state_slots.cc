#include "kv/state_slots.h"

#include <cstring>

#include "base/check.h"

namespace cpm {

StateSlots::StateSlots(int64_t num_slots, int64_t slot_bytes)
    : num_slots_(num_slots),
      slot_bytes_(slot_bytes),
      stride_((slot_bytes + 63) / 64 * 64),
      // Huge pages: a decode step streams every running sequence's state (V-4.6: ~19 MiB).
      buffer_(static_cast<size_t>(num_slots * stride_), Pages::kHuge),
      in_use_(num_slots, false) {
  CPM_CHECK(num_slots >= 0 && slot_bytes >= 0);
  for (int64_t s = num_slots - 1; s >= 0; --s) free_.push_back(static_cast<int32_t>(s));
}

std::optional<int32_t> StateSlots::Allocate(bool zero) {
  if (free_.empty()) return std::nullopt;
  const int32_t s = free_.back();
  free_.pop_back();
  in_use_[s] = true;
  if (zero && slot_bytes_ > 0) std::memset(Data(s), 0, static_cast<size_t>(slot_bytes_));
  return s;
}

void StateSlots::Release(int32_t slot) {
  CPM_CHECK(slot >= 0 && slot < num_slots_ && in_use_[slot]);
  in_use_[slot] = false;
  free_.push_back(slot);
}

}  // namespace cpm
