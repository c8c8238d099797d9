// Reader for Hugging Face safetensors checkpoints: one model.safetensors, or shards listed by
// model.safetensors.index.json. Files are mmapped; every header is validated (offsets inside
// the file, byte counts matching shape × dtype) so a corrupt file fails with its name, never a crash.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "io/mmap_file.h"
#include "tensor/dtype.h"

namespace cpm {

struct TensorInfo {
  std::string name;
  std::string dtype_name;  // as in the header ("BF16", "I64", ...)
  bool dtype_supported = false;
  DType dtype = DType::kF32;  // valid when dtype_supported
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;
  size_t nbytes = 0;
  std::string file;  // path of the file holding it, for error messages

  int64_t NumElements() const;
  std::string ShapeString() const;  // "[73448, 1024]"
};

class SafetensorsArchive {
 public:
  // Opens `dir`/model.safetensors.index.json if present, else `dir`/model.safetensors, else the
  // single *.safetensors file in `dir`.
  static StatusOr<SafetensorsArchive> OpenDir(const std::string& dir);
  static StatusOr<SafetensorsArchive> OpenFile(const std::string& path);

  const TensorInfo* Find(const std::string& name) const;
  const std::map<std::string, TensorInfo>& tensors() const { return tensors_; }
  // Total bytes of all tensors (what "model size" reports).
  size_t TotalBytes() const;
  const std::vector<std::string>& files() const;

 private:
  Status AddFile(const std::string& path);
  std::vector<std::shared_ptr<MmapFile>> files_;
  std::vector<std::string> file_names_;
  std::map<std::string, TensorInfo> tensors_;
};

// Writes a single safetensors file (for make-tiny and tests). Tensors keep insertion order.
class SafetensorsWriter {
 public:
  void Add(const std::string& name, DType dtype, std::vector<int64_t> shape, std::string bytes);
  Status Write(const std::string& path) const;
  // Splits the tensors over `num_shards` files named model-0000i-of-0000n.safetensors plus
  // model.safetensors.index.json in `dir`.
  Status WriteSharded(const std::string& dir, int num_shards) const;

 private:
  struct Entry {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    std::string bytes;
  };
  static Status WriteEntries(const std::string& path, const std::vector<const Entry*>& entries);
  std::vector<Entry> entries_;
};

}  // namespace cpm
