// WeightLoader: hands the model its tensors in the compute dtype, checked against the shapes the
// config implies. Sources: a safetensors checkpoint (zero-copy when dtypes match) or vLLM-style
// dummy weights (uniform in [-1e-3, 1e-3] from a generator seeded per tensor).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "io/safetensors.h"
#include "kernels/matmul.h"
#include "model/load_options.h"
#include "model/load_progress.h"

namespace cpm {

class WeightLoader {
 public:
  // Opens the checkpoint (unless load_format is dummy). `dtype` is the compute dtype.
  static StatusOr<WeightLoader> Open(const LoadOptions& options, DType dtype, ThreadPool* pool);

  bool dummy() const { return archive_ == nullptr; }
  bool Has(const std::string& name) const;

  // A [out, in] matrix as a linear weight in the compute dtype.
  StatusOr<kernels::LinearWeight> Linear(const std::string& name, int64_t out, int64_t in);
  // An embedding table: Linear's [out, in] matrix, whose rows a step reads at random (one per
  // token), as a buffer of its own on huge pages, never a zero-copy view of the file: on the
  // file's 4 KiB pages every row read took a TLB miss, whose page walk under a VM's nested
  // paging cost more than the row (MiniCPM4-0.5B, batch-16 decode: the embedding 0.35% of the
  // step's samples on 4 KiB pages, 0.07% on 2 MiB ones). The copy's file pages are released.
  StatusOr<kernels::LinearWeight> EmbeddingTable(const std::string& name, int64_t out,
                                                 int64_t in);
  // A tensor of any shape as f32 values (norm weights, biases, small parameters).
  StatusOr<std::vector<float>> F32(const std::string& name, const std::vector<int64_t>& shape);

  // Fails naming the first checkpoint tensor that was never requested, unless `ignorable(name)`.
  // On success the load is complete (the progress bar, if any, ends at 100%).
  Status CheckAllUsed(const std::function<bool(const std::string&)>& ignorable) const;
  int64_t bytes_held() const { return bytes_held_; }
  const std::string& model_dir() const { return model_dir_; }

 private:
  StatusOr<const TensorInfo*> Lookup(const std::string& name, const std::vector<int64_t>& shape);
  // Counts `bytes` more of weights for `name`; fails, before anything that size is allocated,
  // once the weights would outgrow the machine's memory: config.json's sizes describe a model
  // this machine cannot hold (and, with dummy weights, no file has checked them).
  Status Hold(const std::string& name, int64_t bytes);
  std::string model_dir_;
  DType dtype_ = DType::kBF16;
  uint64_t dummy_seed_ = 1234;
  bool dummy_ternary_ = false;
  ThreadPool* pool_ = nullptr;
  // Shared with every zero-copy weight (LinearWeight::owner) so the mapping outlives the loader.
  std::shared_ptr<SafetensorsArchive> archive_;
  std::set<std::string> used_;
  std::shared_ptr<LoadProgress> progress_;  // null unless LoadOptions::show_progress
  int64_t bytes_held_ = 0;
};

// Fills `n` values of `dtype` at `dst` with the dummy distribution of the generator `seed`
// (value i depends only on seed and i, so the fill parallelises and is reproducible).
void FillDummy(void* dst, DType dtype, int64_t n, uint64_t seed, ThreadPool* pool);

}  // namespace cpm
