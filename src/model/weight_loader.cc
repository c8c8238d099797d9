#include "model/weight_loader.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <memory>

#include "base/aligned_buffer.h"
#include "base/huge_pages.h"
#include "kernels/residual.h"
#include "kernels/ternary.h"

namespace cpm {
namespace {

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// Elements of `shape`, or -1 when the count passes 2^62 (config sizes no machine holds, whose
// product would wrap).
int64_t NumElements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (__builtin_mul_overflow(n, d, &n) || n > (int64_t{1} << 62)) return -1;
  }
  return n;
}

// splitmix64: a counter-based generator, so element i is independent of the others.
inline uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Weights the loader holds: on huge pages (AlignedBuffer), as the packed panels are.
std::shared_ptr<AlignedBuffer> NewBuffer(size_t bytes) {
  return std::make_shared<AlignedBuffer>(bytes, Pages::kHuge);
}

// Converts `n` elements from the stored dtype to the compute dtype.
void Convert(const void* src, DType from, void* dst, DType to, int64_t n, ThreadPool* pool) {
  auto body = [&](int64_t b, int64_t e) {
    if (to == DType::kF32) {
      ConvertToF32(from, static_cast<const uint8_t*>(src) + b * DTypeSize(from),
                   static_cast<float*>(dst) + b, e - b);
      return;
    }
    // to bf16: through f32 in small chunks.
    float tmp[1024];
    uint16_t* out = static_cast<uint16_t*>(dst);
    for (int64_t i = b; i < e; i += 1024) {
      const int64_t m = std::min<int64_t>(1024, e - i);
      ConvertToF32(from, static_cast<const uint8_t*>(src) + i * DTypeSize(from), tmp, m);
      for (int64_t j = 0; j < m; ++j) out[i + j] = F32ToBf16(tmp[j]);
    }
  };
  if (pool) pool->ParallelForRange(n, 1 << 16, [&](int64_t b, int64_t e, int) { body(b, e); });
  else body(0, n);
}

}  // namespace

void FillDummy(void* dst, DType dtype, int64_t n, uint64_t seed, ThreadPool* pool) {
  const uint64_t key = SplitMix64(seed);
  auto body = [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const uint64_t r = SplitMix64(key ^ static_cast<uint64_t>(i));
      // 24 random bits -> uniform in [-1e-3, 1e-3).
      const float u = static_cast<float>(r >> 40) * (1.0f / 16777216.0f);
      const float v = (2.0f * u - 1.0f) * 1e-3f;
      if (dtype == DType::kF32) static_cast<float*>(dst)[i] = v;
      else if (dtype == DType::kBF16) static_cast<uint16_t*>(dst)[i] = F32ToBf16(v);
      else static_cast<uint16_t*>(dst)[i] = F32ToF16(v);
    }
  };
  if (pool) pool->ParallelForRange(n, 1 << 16, [&](int64_t b, int64_t e, int) { body(b, e); });
  else body(0, n);
}

// Reads one byte per page of a zero-copy tensor, so that the checkpoint is in memory when
// loading ends (as a copy would be) rather than paged in by the first request.
static void TouchPages(const uint8_t* data, size_t nbytes) {
  uint8_t sum = 0;
  for (size_t i = 0; i < nbytes; i += 4096) sum ^= static_cast<const volatile uint8_t*>(data)[i];
  if (nbytes > 0) sum ^= static_cast<const volatile uint8_t*>(data)[nbytes - 1];
  [[maybe_unused]] volatile uint8_t sink = sum;
}

StatusOr<WeightLoader> WeightLoader::Open(const LoadOptions& options, DType dtype,
                                          ThreadPool* pool) {
  WeightLoader w;
  w.model_dir_ = options.model_dir;
  w.dtype_ = dtype;
  w.dummy_seed_ = options.dummy_seed;
  w.dummy_ternary_ = options.dummy_ternary;
  w.pool_ = pool;
  if (options.load_format != LoadFormat::kDummy) {
    CPM_ASSIGN_OR_RETURN(SafetensorsArchive a, SafetensorsArchive::OpenDir(options.model_dir));
    w.archive_ = std::make_shared<SafetensorsArchive>(std::move(a));
    if (options.show_progress) {
      std::map<std::string, int64_t> shard_bytes;
      for (const auto& [name, t] : w.archive_->tensors()) {
        shard_bytes[t.file] += static_cast<int64_t>(t.nbytes);
      }
      w.progress_ = std::make_shared<LoadProgress>(std::move(shard_bytes));
    }
  }
  return w;
}

bool WeightLoader::Has(const std::string& name) const {
  return archive_ && archive_->Find(name) != nullptr;
}

StatusOr<const TensorInfo*> WeightLoader::Lookup(const std::string& name,
                                                 const std::vector<int64_t>& shape) {
  const TensorInfo* t = archive_->Find(name);
  if (!t) {
    const std::string where = archive_->files().size() == 1 ? archive_->files()[0] : model_dir_;
    return NotFound(where + ": missing tensor '" + name + "' (expected shape " +
                    ShapeString(shape) + ")");
  }
  if (t->shape != shape) {
    return InvalidArgument(t->file + ": tensor '" + name + "' has shape " + t->ShapeString() +
                           ", expected " + ShapeString(shape) + " from config.json");
  }
  if (!t->dtype_supported) {
    return InvalidArgument(t->file + ": tensor '" + name + "' has dtype " + t->dtype_name +
                           ", expected F32, BF16 or F16");
  }
  used_.insert(name);
  if (progress_) progress_->Add(t->file, static_cast<int64_t>(t->nbytes));
  return t;
}

Status WeightLoader::Hold(const std::string& name, int64_t bytes) {
  const int64_t memory = static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGE_SIZE);
  if (bytes >= 0 && bytes <= memory - bytes_held_) {
    bytes_held_ += bytes;
    return OkStatus();
  }
  const double gib = bytes < 0 ? INFINITY : static_cast<double>(bytes_held_ + bytes) / (1 << 30);
  if (archive_) {  // the files agreed with the config: the checkpoint is that large
    return ResourceExhausted(fmt::format(
        "{}: the weights up to '{}' take {:.1f} GiB, more than this machine's {:.1f} GiB of "
        "memory", model_dir_, name, gib, static_cast<double>(memory) / (1 << 30)));
  }
  return ResourceExhausted(fmt::format(
      "{}/config.json: the weights up to '{}' take {:.1f} GiB, more than this machine's "
      "{:.1f} GiB of memory; are the config's sizes (hidden_size, intermediate_size, vocab_size, "
      "num_hidden_layers, ...) right?",
      model_dir_, name, gib, static_cast<double>(memory) / (1 << 30)));
}

StatusOr<kernels::LinearWeight> WeightLoader::Linear(const std::string& name, int64_t out,
                                                     int64_t in) {
  kernels::LinearWeight w;
  w.dtype = dtype_;
  w.out_features = out;
  w.in_features = in;
  const int64_t n = out * in;
  const size_t bytes = static_cast<size_t>(n) * DTypeSize(dtype_);
  const TensorInfo* t = nullptr;  // the checkpoint's shape checked before anything is held
  if (archive_) {
    CPM_ASSIGN_OR_RETURN(t, Lookup(name, {out, in}));
  }
  CPM_RETURN_IF_ERROR(Hold(name, static_cast<int64_t>(bytes)));
  if (!archive_) {
    auto buf = NewBuffer(bytes);
    FillDummy(buf->data(), dtype_, n, dummy_seed_, pool_);
    if (dummy_ternary_ && dtype_ == DType::kBF16 && name.find(".layers.") != std::string::npos) {
      // BitCPM4's ternary set: the decoder layers' linear weights (spec minicpm4.md §7.2).
      uint16_t* v = reinterpret_cast<uint16_t*>(buf->data());
      auto rows = [&](int64_t b, int64_t e) {
        kernels::FakeQuantizeTernary(v + b * in, e - b, in, in, false);
      };
      if (pool_) pool_->ParallelForRange(out, 16, [&](int64_t b, int64_t e, int) { rows(b, e); });
      else rows(0, out);
    }
    w.data = buf->data();
    w.owner = buf;
    return w;
  }
  if (t->dtype == dtype_ && reinterpret_cast<uintptr_t>(t->data) % DTypeSize(dtype_) == 0) {
    w.data = t->data;  // zero-copy from the mmapped file
    w.owner = archive_;
    w.mapped = true;
    TouchPages(t->data, t->nbytes);
    return w;
  }
  auto buf = NewBuffer(bytes);
  Convert(t->data, t->dtype, buf->data(), dtype_, n, pool_);
  w.data = buf->data();
  w.owner = buf;
  return w;
}

StatusOr<kernels::LinearWeight> WeightLoader::EmbeddingTable(const std::string& name,
                                                             int64_t out, int64_t in) {
  CPM_ASSIGN_OR_RETURN(kernels::LinearWeight w, Linear(name, out, in));
  if (!w.mapped) return w;  // already a buffer of its own (converted, or dummy)
  const size_t bytes = static_cast<size_t>(out * in) * DTypeSize(w.dtype);
  auto buf = NewBuffer(bytes);
  const auto* src = static_cast<const std::byte*>(w.data);
  auto copy = [&](int64_t b, int64_t e) {
    std::memcpy(buf->data() + b, src + b, static_cast<size_t>(e - b));
  };
  if (pool_) {
    pool_->ParallelForRange(static_cast<int64_t>(bytes), 1 << 20,
                            [&](int64_t b, int64_t e, int) { copy(b, e); });
  } else {
    copy(0, static_cast<int64_t>(bytes));
  }
  ReleaseWholePages(src, bytes);
  w.data = buf->data();
  w.owner = buf;
  w.mapped = false;
  return w;
}

StatusOr<std::vector<float>> WeightLoader::F32(const std::string& name,
                                               const std::vector<int64_t>& shape) {
  const int64_t n = NumElements(shape);
  // The checkpoint's shape first: a config size that disagrees with it is that error, not an
  // allocation of the config's size.
  const TensorInfo* t = nullptr;
  if (archive_) {
    CPM_ASSIGN_OR_RETURN(t, Lookup(name, shape));
  }
  CPM_RETURN_IF_ERROR(Hold(name, n < 0 ? -1 : n * 4));  // -1: beyond any memory
  std::vector<float> v(n);
  if (!archive_) {
    // Dummy values are drawn in the compute dtype, as vLLM fills every parameter.
    std::vector<uint16_t> tmp(dtype_ == DType::kF32 ? 0 : n);
    if (dtype_ == DType::kF32) {
      FillDummy(v.data(), DType::kF32, n, dummy_seed_, nullptr);
    } else {
      FillDummy(tmp.data(), dtype_, n, dummy_seed_, nullptr);
      ConvertToF32(dtype_, tmp.data(), v.data(), n);
    }
    return v;
  }
  ConvertToF32(t->dtype, t->data, v.data(), n);
  if (dtype_ == DType::kBF16) kernels::RoundBf16InPlace(v.data(), n);  // as the model would hold it
  return v;
}

Status WeightLoader::CheckAllUsed(const std::function<bool(const std::string&)>& ignorable) const {
  if (!archive_) return OkStatus();
  for (const auto& [name, t] : archive_->tensors()) {
    if (used_.count(name) || ignorable(name)) continue;
    return InvalidArgument(t.file + ": unexpected tensor '" + name + "' " + t.ShapeString() +
                           " (not part of this architecture's config)");
  }
  if (progress_) progress_->Finish();  // tensors skipped on purpose (mtp.*) count as read
  return OkStatus();
}

bool ParseLoadFormat(const std::string& s, LoadFormat* out) {
  if (s == "auto") *out = LoadFormat::kAuto;
  else if (s == "safetensors") *out = LoadFormat::kSafetensors;
  else if (s == "dummy") *out = LoadFormat::kDummy;
  else return false;
  return true;
}

bool ParseQuantization(const std::string& s, kernels::WeightQuant* out) {
  if (s.empty() || s == "none") *out = kernels::WeightQuant::kNone;
  else if (s == "q8_0") *out = kernels::WeightQuant::kQ8_0;
  else return false;
  return true;
}

Status ParseLoadChoices(const std::string& load_format, const std::string& dtype,
                        const std::string& quantization, LoadOptions* lo) {
  if (!ParseLoadFormat(load_format, &lo->load_format)) {
    return InvalidArgument("--load-format: '" + load_format +
                           "' is not supported (auto, safetensors, dummy)");
  }
  if (dtype == "half" || dtype == "float16" || dtype == "fp16") {
    // vLLM's GPU habit (T4/V100 guides pass it); cpmserve's kernels have no float16 path.
    lo->dtype = DTypeChoice::kBFloat16;
    lo->float16_requested = true;
  } else if (!ParseDTypeChoice(dtype, &lo->dtype)) {
    return InvalidArgument("--dtype: '" + dtype +
                           "' is not supported (auto, bfloat16, float32; half runs as bfloat16)");
  }
  if (!ParseQuantization(quantization, &lo->quantization)) {
    return InvalidArgument("--quantization: '" + quantization + "' is not supported (none, q8_0)");
  }
  return OkStatus();
}

bool ParseDTypeChoice(const std::string& s, DTypeChoice* out) {
  if (s == "auto") *out = DTypeChoice::kAuto;
  else if (s == "bfloat16" || s == "bf16") *out = DTypeChoice::kBFloat16;
  else if (s == "float32" || s == "float" || s == "fp32") *out = DTypeChoice::kFloat32;
  else return false;
  return true;
}

}  // namespace cpm
