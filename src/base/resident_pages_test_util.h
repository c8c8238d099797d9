// Tests' view of which pages of a mapping are committed (PageBuffer::Commit, KvCache::CommitStep).
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <vector>

namespace cpm {

// Whether every page of [p, p + bytes) is resident (mincore: anonymous pages count once faulted).
inline bool PagesResident(const void* p, size_t bytes) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> in((bytes + page - 1) / page);
  if (mincore(const_cast<void*>(p), bytes, in.data()) != 0) return false;
  for (unsigned char c : in) {
    if ((c & 1) == 0) return false;
  }
  return true;
}

}  // namespace cpm
