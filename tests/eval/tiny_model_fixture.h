// Tiny checkpoints for the eval tests: a healthy MiniCPM4 (random weights, real tensor names, a
// MiniCPM4-like tokenizer), a damaged copy (one layer's tensor perturbed with noise), a broken
// one (weights file cut short), and a tiny MiniCPM-V-4.6 for the hybrid model's paths.
#pragma once

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "base/status.h"
#include "io/safetensors.h"
#include "model/tiny_checkpoint.h"
#include "model/tiny_minicpmv46.h"
#include "tensor/dtype.h"
#include "tokenizer/tiny_tokenizer.h"

namespace cpm::testing {

// Writes `family`'s tiny tokenizer into `dir`; the options of a checkpoint that matches it.
inline Status TinyTokenizerAndOptions(const std::string& dir, TinyTokenizerFamily family, DType storage,
                                      uint64_t seed, TinyCheckpointOptions* o) {
  std::filesystem::create_directories(dir);
  int32_t vocab = 0;
  CPM_RETURN_IF_ERROR(WriteTinyTokenizer(dir, family, &vocab));
  o->out_dir = dir;
  o->seed = seed;
  o->vocab_size = vocab;
  o->storage = storage;
  return OkStatus();
}

inline Status MakeTinyModel(const std::string& dir, DType storage = DType::kBF16, uint64_t seed = 7) {
  TinyCheckpointOptions o;
  CPM_RETURN_IF_ERROR(TinyTokenizerAndOptions(dir, TinyTokenizerFamily::kSentencePieceBpe, storage, seed, &o));
  o.eos_token_id = {2};
  return WriteTinyMiniCpm(o);
}

// A tiny MiniCPM-V-4.6 (Qwen3.5 hybrid LM: Gated DeltaNet and gated full attention, plus the
// vision tower) with a Qwen-like byte-level tokenizer.
inline Status MakeTinyHybridModel(const std::string& dir, uint64_t seed = 7) {
  TinyCheckpointOptions o;
  CPM_RETURN_IF_ERROR(TinyTokenizerAndOptions(dir, TinyTokenizerFamily::kByteLevelBpe, DType::kF32, seed, &o));
  return WriteTinyMiniCpmV46(o);
}

inline Status CopyModel(const std::string& from, const std::string& to) {
  std::error_code ec;
  std::filesystem::remove_all(to, ec);
  std::filesystem::copy(from, to, std::filesystem::copy_options::recursive, ec);
  return ec ? Internal("copy " + from + ": " + ec.message()) : OkStatus();
}

// Rewrites `dir`/model.safetensors with gaussian noise of `relative_std` × the tensor's own RMS
// added to tensor `name`; every other tensor is copied byte for byte.
inline Status DamageTensor(const std::string& dir, const std::string& name, double relative_std,
                           uint64_t seed = 1) {
  const std::string path = dir + "/model.safetensors";
  SafetensorsWriter w;
  bool found = false;
  {
    CPM_ASSIGN_OR_RETURN(SafetensorsArchive a, SafetensorsArchive::OpenFile(path));
    for (const auto& [tname, t] : a.tensors()) {
      std::string bytes(reinterpret_cast<const char*>(t.data), t.nbytes);
      if (tname == name) {
        if (t.dtype != DType::kBF16 && t.dtype != DType::kF32) return InvalidArgument("dtype");
        found = true;
        const int64_t n = t.NumElements();
        std::vector<float> v(n);
        ConvertToF32(t.dtype, t.data, v.data(), n);
        double ss = 0;
        for (float x : v) ss += double(x) * x;
        const double rms = std::sqrt(ss / n);
        std::mt19937_64 rng(seed);
        std::normal_distribution<double> noise(0.0, relative_std * rms);
        for (float& x : v) x += static_cast<float>(noise(rng));
        if (t.dtype == DType::kF32) {
          std::memcpy(bytes.data(), v.data(), n * 4);
        } else {
          for (int64_t i = 0; i < n; ++i) {
            const uint16_t h = F32ToBf16(v[i]);
            std::memcpy(bytes.data() + 2 * i, &h, 2);
          }
        }
      }
      w.Add(tname, t.dtype, t.shape, std::move(bytes));
    }
  }  // unmap before replacing the file
  if (!found) return NotFound(name);
  CPM_RETURN_IF_ERROR(w.Write(path + ".tmp"));
  std::filesystem::rename(path + ".tmp", path);
  return OkStatus();
}

// Cuts the weights file to half its size: the header still parses, the data is gone.
inline Status TruncateWeights(const std::string& dir) {
  const std::string path = dir + "/model.safetensors";
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (ec) return NotFound(path);
  std::filesystem::resize_file(path, size / 2, ec);
  return ec ? Internal(ec.message()) : OkStatus();
}

inline std::string TempPath(const std::string& stem) {
  return (std::filesystem::temp_directory_path() / (stem + "_" + std::to_string(getpid()))).string();
}

}  // namespace cpm::testing
