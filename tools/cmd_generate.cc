// `cpmserve generate --model DIR`: runs prompts (token ids) through the engine in one batch and
// prints the continuations; optionally top-k log-probs per step, and a JSON dump of the
// log-prob rows in the format tests/reference/compare_logprobs.py reads.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/log.h"
#include "base/thread_pool.h"
#include "commands.h"
#include "model_argument.h"
#include "engine/offline_generator.h"
#include "kernels/amx.h"
#include "model/registry.h"
#include "multimodal/image_processor.h"
#include "tokenizer/tokenizer.h"

namespace cpm {
namespace {

struct GenerateArgs {
  std::string model;
  std::string load_format = "auto";
  std::string dtype = "auto";
  std::string quantization = "none";
  int64_t max_model_len = 0;
  int threads = 0;
  std::vector<std::string> prompt_ids;
  std::vector<std::string> prompts;  // text, encoded with the model's tokenizer
  std::vector<std::string> images;   // files; each <|image_pad|> of the text prompts takes one
  std::string dump_image_features;   // the images' embedding rows, as JSON
  int64_t max_tokens = 16;
  float temperature = 0.0f;
  int32_t top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
  int64_t seed = -1;
  int32_t logprobs = 0;
  std::string dump_logprobs;
  bool all_positions = false;
  int64_t prefill_chunk = 0;
  int64_t block_size = 16;
  bool ignore_eos = false;
};

StatusOr<std::vector<int32_t>> ParseIds(const std::string& s) {
  std::vector<int32_t> ids;
  size_t i = 0;
  while (i < s.size()) {
    size_t j = s.find(',', i);
    if (j == std::string::npos) j = s.size();
    const std::string part = s.substr(i, j - i);
    char* end = nullptr;
    const long v = std::strtol(part.c_str(), &end, 10);
    if (part.empty() || *end != '\0' || v < 0 || v > INT32_MAX)
      return InvalidArgument("--prompt-ids: '" + part + "' is not a token id");
    ids.push_back(static_cast<int32_t>(v));
    i = j + 1;
  }
  if (ids.empty()) return InvalidArgument("--prompt-ids: empty list");
  return ids;
}

Status WriteDump(const std::string& path, const std::vector<GenerateRequest>& reqs,
                 const std::vector<GenerateResult>& results, DType dtype) {
  nlohmann::json seqs = nlohmann::json::array();
  for (size_t i = 0; i < reqs.size(); ++i) {
    nlohmann::json s = {{"prompt_ids", reqs[i].prompt},
                        {"generated_ids", results[i].output},
                        {"logprob_positions", results[i].row_positions},
                        {"logprobs", results[i].logprob_rows}};
    seqs.push_back(std::move(s));
  }
  std::ofstream out(path);
  if (!out) return InvalidArgument(path + ": cannot create");
  out << nlohmann::json{{"dtype", ToString(dtype)}, {"sequences", seqs}}.dump();
  return out ? OkStatus() : DataLoss(path + ": write error");
}

// Expands the <|image_pad|> of each text prompt (in order, over all prompts) with the next of
// `files`, tokenizes, and encodes the images into the requests' embeddings (as the server does,
// with the encoder run here on `pool`). `reqs` holds the text prompts' requests, in order.
// With `features`, each image-bearing prompt's embedding rows are appended to it (in order).
Status AttachImages(const GenerateArgs& a, const Tokenizer& tok, Model& model, const LoadOptions& lo,
                    ThreadPool& pool, std::vector<GenerateRequest*> reqs, nlohmann::json* features) {
  CPM_ASSIGN_OR_RETURN(std::shared_ptr<VisionEncoder> vision, LoadVisionEncoder(lo, model.info(), pool));
  if (!vision) return InvalidArgument("--image: " + model.info().architecture + " takes no images");
  MediaOptions media;
  media.allowed_local_media_path = "/";
  CPM_ASSIGN_OR_RETURN(std::unique_ptr<ImageProcessor> proc, ImageProcessor::Create(a.model, vision, media));
  CPM_RETURN_IF_ERROR(proc->CheckTokenIds(a.model, model.info().vocab_size));
  size_t next = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    const std::string& text = a.prompts[i];
    std::vector<MediaRef> urls;  // one image file per pad, as file:// URLs
    const std::string pad = ImageProcessor::kPadText;
    for (size_t at = text.find(pad); at != std::string::npos; at = text.find(pad, at + pad.size())) {
      if (next >= a.images.size()) return InvalidArgument("--image: more <|image_pad|> than images");
      std::string url = "file://";  // '%' is the URL's escape character: escape it
      for (char c : std::filesystem::absolute(a.images[next++]).string()) url += c == '%' ? "%25" : std::string(1, c);
      urls.push_back({MediaKind::kImage, std::move(url)});
    }
    if (urls.empty()) continue;
    CPM_ASSIGN_OR_RETURN(MultimodalPrompt p, proc->Tokenize(tok, text, urls, /*add_special_tokens=*/true));
    reqs[i]->prompt = std::move(p.ids);
    MultimodalInputs& in = p.inputs;
    reqs[i]->embed_rows = in.embed_rows;
    reqs[i]->embeds = in.embeds;
    for (bool done = in.encode == nullptr; !done;) {
      CPM_ASSIGN_OR_RETURN(done, in.encode(pool, &reqs[i]->embeds));
    }
    if (features) {
      const int64_t dim = vision->output_dim();
      nlohmann::json rows = nlohmann::json::array();
      for (size_t r = 0; r < reqs[i]->embed_rows.size(); ++r)
        rows.push_back(std::vector<float>(reqs[i]->embeds.begin() + r * dim, reqs[i]->embeds.begin() + (r + 1) * dim));
      features->push_back({{"prompt", i}, {"features", std::move(rows)}});
    }
  }
  if (next != a.images.size()) return InvalidArgument("--image: more images than <|image_pad|> in the prompts");
  return OkStatus();
}

int RunGenerate(GenerateArgs a) {
  if (!ResolveModelArgument("generate", &a.model, a.load_format != "dummy")) return 2;
  LoadOptions lo;
  lo.model_dir = a.model;
  lo.max_model_len = a.max_model_len;
  if (Status s = ParseLoadChoices(a.load_format, a.dtype, a.quantization, &lo); !s.ok()) {
    std::fprintf(stderr, "generate: %s\n", s.message().c_str());
    return 2;
  }
  // The tokenizer is optional for token-id prompts, needed for text prompts and text output.
  std::unique_ptr<Tokenizer> tokenizer;
  if (auto t = Tokenizer::Load(a.model); t.ok()) {
    tokenizer = std::move(*t);
  } else if (!a.prompts.empty()) {
    std::fprintf(stderr, "error: %s\n", t.status().message().c_str());
    return 1;
  }
  std::vector<std::vector<int32_t>> prompts;
  for (const std::string& p : a.prompt_ids) {
    auto ids = ParseIds(p);
    if (!ids.ok()) {
      std::fprintf(stderr, "generate: %s\n", ids.status().message().c_str());
      return 2;
    }
    prompts.push_back(*ids);
  }
  for (const std::string& text : a.prompts) prompts.push_back(tokenizer->Encode(text));
  std::vector<GenerateRequest> reqs;
  for (std::vector<int32_t>& ids : prompts) {
    GenerateRequest r;
    r.prompt = std::move(ids);
    r.max_tokens = a.max_tokens;
    r.sampling.temperature = a.temperature;
    r.sampling.top_k = a.top_k;
    r.sampling.top_p = a.top_p;
    r.sampling.min_p = a.min_p;
    if (a.seed >= 0) r.sampling.seed = static_cast<uint64_t>(a.seed);
    r.top_logprobs = a.logprobs;
    r.record_logprob_rows = !a.dump_logprobs.empty();
    r.all_prompt_positions = a.all_positions;
    r.ignore_eos = a.ignore_eos;
    reqs.push_back(std::move(r));
  }
  if (reqs.empty()) {
    std::fprintf(stderr, "generate: give at least one --prompt or --prompt-ids\n");
    return 2;
  }
  ThreadPool pool(
      ThreadPoolOptions{.num_threads = a.threads, .before_sleep = kernels::ReleaseTiles});
  const auto t0 = std::chrono::steady_clock::now();
  auto model = LoadModel(lo, pool);
  if (!model.ok()) {
    std::fprintf(stderr, "error: %s\n", model.status().message().c_str());
    return 1;
  }
  const auto t1 = std::chrono::steady_clock::now();
  const ModelInfo& info = (*model)->info();
  CPM_LOG_INFO("loaded {} ({} weights, {:.1f} MiB) in {:.2f} s, {} threads", info.architecture,
               ToString(info.dtype), info.weight_bytes / 1048576.0,
               std::chrono::duration<double>(t1 - t0).count(), pool.num_threads());
  for (GenerateRequest& r : reqs) {
    r.stop_token_ids = info.eos_token_ids;
    if (tokenizer) {
      for (int32_t id : tokenizer->eos_ids()) {
        if (std::find(r.stop_token_ids.begin(), r.stop_token_ids.end(), id) == r.stop_token_ids.end())
          r.stop_token_ids.push_back(id);
      }
    }
  }
  if (!a.images.empty()) {
    std::vector<GenerateRequest*> text_reqs;  // the --prompt requests come after --prompt-ids
    for (size_t i = a.prompt_ids.size(); i < reqs.size(); ++i) text_reqs.push_back(&reqs[i]);
    nlohmann::json features = nlohmann::json::array();
    Status s = AttachImages(a, *tokenizer, **model, lo, pool, text_reqs,
                            a.dump_image_features.empty() ? nullptr : &features);
    if (s.ok() && !a.dump_image_features.empty()) {
      std::ofstream out(a.dump_image_features);
      out << nlohmann::json{{"sequences", features}}.dump();
      if (!out) s = InvalidArgument(a.dump_image_features + ": cannot write");
    }
    if (!s.ok()) {
      std::fprintf(stderr, "error: %s\n", s.message().c_str());
      return 1;
    }
  }
  OfflineGeneratorOptions go;
  go.block_size = a.block_size;
  go.prefill_chunk = a.prefill_chunk;
  OfflineGenerator gen(**model, pool, go);
  auto results = gen.Run(reqs);
  if (!results.ok()) {
    std::fprintf(stderr, "error: %s\n", results.status().message().c_str());
    return 1;
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
  int64_t generated = 0;
  for (size_t i = 0; i < results->size(); ++i) {
    const GenerateResult& r = (*results)[i];
    generated += static_cast<int64_t>(r.output.size());
    std::printf("[%zu] finish=%s ids:", i, r.finish_reason.c_str());
    for (int32_t t : r.output) std::printf(" %d", t);
    std::printf("\n");
    if (tokenizer) std::printf("  text: %s\n", tokenizer->Decode(r.output, true).c_str());
    for (size_t s = 0; s < r.logprobs.size(); ++s) {
      std::printf("  step %zu: %d (%.4f) top:", s, r.logprobs[s].token, r.logprobs[s].logprob);
      for (const auto& [id, lp] : r.logprobs[s].top) std::printf(" %d:%.4f", id, lp);
      std::printf("\n");
    }
  }
  CPM_LOG_INFO("generated {} tokens in {:.2f} s", generated, secs);
  if (!a.dump_logprobs.empty()) {
    Status s = WriteDump(a.dump_logprobs, reqs, *results, info.dtype);
    if (!s.ok()) {
      std::fprintf(stderr, "error: %s\n", s.message().c_str());
      return 1;
    }
  }
  return 0;
}

}  // namespace

void RegisterGenerateCommand(CLI::App& app, int* exit_code) {
  auto a = std::make_shared<GenerateArgs>();
  CLI::App* cmd = app.add_subcommand("generate", "run prompts through the model and print the continuations");
  cmd->add_option("--model", a->model, "Hugging Face model directory")->required();
  cmd->add_option("--load-format", a->load_format, "auto | safetensors | dummy")->capture_default_str();
  cmd->add_option("--dtype", a->dtype, "auto | bfloat16 | float32")->capture_default_str();
  cmd->add_option("--quantization,-q", a->quantization, kQuantizationHelp)->capture_default_str();
  cmd->add_option("--max-model-len", a->max_model_len, "context length (0: from config)");
  cmd->add_option("--threads", a->threads, "compute threads (0: one per physical core, as llama.cpp)");
  cmd->add_option("--prompt", a->prompts, "a text prompt (tokenizer of the model); repeat for a batch");
  cmd->add_option("--prompt-ids", a->prompt_ids, "comma-separated token ids; repeat for a batch");
  cmd->add_option("--dump-image-features", a->dump_image_features, "write each --prompt's image embedding rows as JSON to this file");
  cmd->add_option("--image", a->images, "an image file for the next <|image_pad|> of the --prompt texts (MiniCPM-V-4.6); repeatable");
  cmd->add_option("--max-tokens", a->max_tokens, "tokens to generate per prompt")
      ->capture_default_str()
      ->check(NonNegative());
  cmd->add_option("--temperature", a->temperature, "0 = greedy")
      ->capture_default_str()
      ->check(NonNegative());
  cmd->add_option("--top-k", a->top_k, "0 = off")->check(NonNegative());
  // vLLM's SamplingParams ranges: 0 < top_p <= 1, 0 <= min_p <= 1.
  cmd->add_option("--top-p", a->top_p, "nucleus sampling mass, in (0, 1]")
      ->check(CLI::Validator(
          [](const std::string& s) {
            const double v = std::strtod(s.c_str(), nullptr);
            return v > 0.0 && v <= 1.0 ? std::string() : "top_p must be in (0, 1], got " + s;
          },
          "(0, 1]"));
  cmd->add_option("--min-p", a->min_p, "min-p filter, in [0, 1]")->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--seed", a->seed, "sampling seed");
  cmd->add_option("--logprobs", a->logprobs, "print the top-k log-probs of each step");
  cmd->add_option("--dump-logprobs", a->dump_logprobs, "write full log-prob rows as JSON to this file");
  cmd->add_flag("--all-positions", a->all_positions, "with --dump-logprobs: every prompt position");
  cmd->add_option("--prefill-chunk", a->prefill_chunk, "prompt tokens per step (0: all)");
  cmd->add_option("--block-size", a->block_size, "KV cache block size")->check(CLI::Range(1, 1024));
  cmd->add_flag("--ignore-eos", a->ignore_eos, "do not stop at end-of-sequence tokens");
  cmd->callback([a, exit_code] { *exit_code = RunGenerate(*a); });
}

}  // namespace cpm
