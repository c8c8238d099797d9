// `cpmserve make-tiny --arch minicpm4 OUT_DIR`: a small random checkpoint with the real tensor
// names, layout and config keys, plus tokenizer files, for tests and demos; `--dims-of
// MODEL_DIR`: one at a published folder's full dimensions, beside a copy of its files.
#include <cstdio>
#include <string>

#include "base/log.h"
#include "commands.h"
#include "model/dims_of_checkpoint.h"
#include "model/tiny_checkpoint.h"
#include "model/tiny_minicpmv46.h"
#include "tokenizer/tiny_tokenizer.h"
#include "tokenizer/tokenizer.h"

#include <filesystem>

namespace cpm {
namespace {

struct MakeTinyArgs {
  std::string arch = "minicpm4";
  std::string out_dir;
  uint64_t seed = 0;
  std::string dtype = "bfloat16";
  int shards = 1;
  bool untied = false;
  bool real_heads = false;
  std::string ternary;  // "", "tensor", "row" or inputs per scale
  std::string dims_of;  // a published model folder whose config gives the shapes
  bool arch_given = false;
  bool dims_of_given = false;
};

// --ternary SCALE: tensor | row | 32 | 64 | 128 | 256.
bool ParseTernary(const std::string& s, TinyCheckpointOptions* o) {
  if (s.empty()) return true;
  if (s == "tensor" || s == "row") {
    o->ternary_group = int64_t{1} << 40;
    o->ternary_per_tensor = s == "tensor";
    return true;
  }
  for (int64_t g : {32, 64, 128, 256}) {
    if (s == std::to_string(g)) {
      o->ternary_group = g;
      return true;
    }
  }
  return false;
}

// Writes the tokenizer files first: the model's vocab_size and eos ids follow from them.
Status WriteTokenizer(const std::string& dir, TinyTokenizerFamily family, const char* chat_eos,
                      TinyCheckpointOptions* o) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return InvalidArgument(dir + ": cannot create: " + ec.message());
  int32_t vocab = 0;
  CPM_RETURN_IF_ERROR(WriteTinyTokenizer(dir, family, &vocab));
  CPM_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tok, Tokenizer::Load(dir));
  o->vocab_size = vocab;
  o->bos_token_id = tok->bos_id().value_or(0);
  o->eos_token_id.clear();
  for (const char* text : {"</s>", "<|endoftext|>"}) {
    if (auto eos = tok->TokenToId(text)) o->eos_token_id.push_back(*eos);
  }
  if (auto eos = tok->TokenToId(chat_eos)) o->eos_token_id.push_back(*eos);
  return OkStatus();
}

int RunMakeTiny(const MakeTinyArgs& a) {
  TinyCheckpointOptions o;
  o.out_dir = a.out_dir;
  o.seed = a.seed;
  o.num_shards = a.shards;
  o.tie_word_embeddings = !a.untied;
  o.real_heads = a.real_heads;
  if (a.dtype == "bfloat16") o.storage = DType::kBF16;
  else if (a.dtype == "float32") o.storage = DType::kF32;
  else if (a.dtype == "float16") o.storage = DType::kF16;
  else {
    std::fprintf(stderr, "make-tiny: --dtype must be bfloat16, float32 or float16\n");
    return 2;
  }
  if (!ParseTernary(a.ternary, &o) || (!a.ternary.empty() && a.arch != "minicpm4")) {
    std::fprintf(stderr, "make-tiny: --ternary takes tensor, row, 32, 64, 128 or 256, and only "
                         "with --arch minicpm4 (BitCPM4)\n");
    return 2;
  }
  Status s;
  if (a.dims_of_given) {
    if (a.dims_of.empty()) {
      std::fprintf(stderr, "make-tiny: --dims-of needs a model folder\n");
      return 2;
    }
    if (a.arch_given || a.real_heads || a.untied) {
      std::fprintf(stderr, "make-tiny: --dims-of takes the architecture, every shape and the "
                           "head's tying from the folder's config: not with --arch, "
                           "--real-heads or --untied\n");
      return 2;
    }
    s = WriteCheckpointWithDimsOf(a.dims_of, o);
  } else if (a.arch == "minicpm4") {
    s = WriteTokenizer(a.out_dir, TinyTokenizerFamily::kSentencePieceBpe, "<|im_end|>", &o);
    if (s.ok()) s = WriteTinyMiniCpm(o);
  } else if (a.arch == "minicpmv4_6") {
    s = WriteTokenizer(a.out_dir, TinyTokenizerFamily::kByteLevelBpe, "<|im_end|>", &o);
    if (s.ok()) s = WriteTinyMiniCpmV46(o);
  } else {
    std::fprintf(stderr, "make-tiny: unknown --arch '%s' (known: minicpm4, minicpmv4_6)\n",
                 a.arch.c_str());
    return 2;
  }
  if (!s.ok()) {
    std::fprintf(stderr, "make-tiny: %s\n", s.ToString().c_str());
    return 1;
  }
  if (!a.dims_of_given) {
    CPM_LOG_INFO("wrote a tiny {} checkpoint to {}", a.arch, a.out_dir);
  } else {
    CPM_LOG_INFO("wrote a random checkpoint with the dimensions of {} to {}", a.dims_of,
                 a.out_dir);
  }
  return 0;
}

}  // namespace

void RegisterMakeTinyCommand(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<MakeTinyArgs>();
  CLI::App* cmd = app.add_subcommand(
      "make-tiny", "write a random checkpoint for tests: tiny, or at a released model's size");
  CLI::Option* arch =
      cmd->add_option("--arch", args->arch, "architecture: minicpm4 | minicpmv4_6")
          ->capture_default_str();
  cmd->add_option("out_dir", args->out_dir, "output directory")->required();
  cmd->add_option("--seed", args->seed, "random seed")->capture_default_str();
  cmd->add_option("--dtype", args->dtype, "storage dtype: bfloat16, float32, float16")
      ->capture_default_str();
  cmd->add_option("--shards", args->shards, "number of safetensors shards")->check(CLI::Range(1, 64));
  cmd->add_flag("--untied", args->untied, "write a separate lm_head.weight");
  cmd->add_flag("--real-heads", args->real_heads,
                "the released models' head sizes (and vision position grid) at small widths");
  cmd->add_option("--ternary", args->ternary,
                  "BitCPM4-style ternary layer weights with a scale per: tensor, row, 32, 64, "
                  "128 or 256 inputs");
  CLI::Option* dims_of = cmd->add_option(
      "--dims-of", args->dims_of,
      "MODEL_DIR: random weights at the dimensions of this MiniCPM4 / BitCPM4 / MiniCPM-V-4.6 "
      "folder's config.json (its weights are not read), with its config, tokenizer and template "
      "files copied into a new OUT_DIR: the released sizes without a download");
  cmd->callback([args, arch, dims_of, exit_code] {
    args->arch_given = arch->count() > 0;
    args->dims_of_given = dims_of->count() > 0;
    *exit_code = RunMakeTiny(*args);
  });
}

}  // namespace cpm
