// A read-only memory-mapped file. Weights stay in the page cache and are shared between
// processes; nothing is copied unless a dtype conversion needs it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "base/status.h"

namespace cpm {

class MmapFile {
 public:
  static StatusOr<std::shared_ptr<MmapFile>> Open(const std::string& path);
  ~MmapFile();
  MmapFile(const MmapFile&) = delete;
  MmapFile& operator=(const MmapFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  MmapFile(std::string path, const uint8_t* data, size_t size)
      : path_(std::move(path)), data_(data), size_(size) {}
  std::string path_;
  const uint8_t* data_;
  size_t size_;
};

// Reads a whole (small) file into a string; errors name the path.
StatusOr<std::string> ReadTextFile(const std::string& path);
Status WriteTextFile(const std::string& path, const std::string& content);

}  // namespace cpm
