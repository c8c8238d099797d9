// Encode throughput of cpm::Tokenizer on a few MB of mixed text built from the conformance
// corpus, against HF tokenizers (Rust, via node) on the same documents in the same run.
// Usage: tokenizer_bench <model_dir> [megabytes=4]. Not part of ctest.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace {

using Clock = std::chrono::steady_clock;

// Documents of about 2 KB, each a deterministic pseudo-random mix of corpus strings.
std::vector<std::string> BuildDocs(const std::vector<std::string>& corpus, size_t total_bytes) {
  std::vector<std::string> docs;
  uint64_t state = 0x9E3779B97F4A7C15ULL;
  size_t total = 0;
  while (total < total_bytes) {
    std::string doc;
    while (doc.size() < 2048) {
      state = state * 6364136223846793005ULL + 1442695040888963407ULL;
      doc += corpus[(state >> 33) % corpus.size()];
      doc += (state >> 20) % 3 == 0 ? "\n" : " ";
    }
    total += doc.size();
    docs.push_back(std::move(doc));
  }
  return docs;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s <model_dir> [megabytes]\n", argv[0]);
    return 2;
  }
  const std::string model_dir = argv[1];
  const double mb = argc > 2 ? std::atof(argv[2]) : 4.0;
  const std::filesystem::path src(CPM_SOURCE_DIR);
  std::ifstream in(src / "tests/conformance/tokenizer/corpus.json");
  std::stringstream ss;
  ss << in.rdbuf();
  const auto corpus = nlohmann::json::parse(ss.str()).get<std::vector<std::string>>();
  const auto docs = BuildDocs(corpus, static_cast<size_t>(mb * 1024 * 1024));
  size_t bytes = 0;
  for (const auto& d : docs) bytes += d.size();

  auto tok = cpm::Tokenizer::Load(model_dir);
  if (!tok.ok()) {
    std::fprintf(stderr, "%s\n", tok.status().ToString().c_str());
    return 1;
  }
  for (size_t i = 0; i < 50 && i < docs.size(); ++i) (*tok)->Encode(docs[i]);  // warm-up
  const auto t0 = Clock::now();
  size_t tokens = 0;
  for (const auto& d : docs) tokens += (*tok)->Encode(d).size();
  const double ours = std::chrono::duration<double>(Clock::now() - t0).count();
  std::printf("docs %zu, %.2f MB\n", docs.size(), bytes / 1048576.0);
  std::printf("cpm::Tokenizer       %10zu tokens %8.3f s %12.0f tokens/s %7.2f MB/s\n", tokens,
              ours, tokens / ours, bytes / 1048576.0 / ours);

  const auto json_path = std::filesystem::path(model_dir) / "tokenizer.json";
  const auto node_script = src / "bench/tokenizer/bench_hf.js";
  if (!std::filesystem::exists(json_path) || std::system("node --version > /dev/null 2>&1") != 0) {
    std::printf("HF tokenizers: skipped (needs tokenizer.json and node)\n");
    return 0;
  }
  const auto docs_path = std::filesystem::temp_directory_path() / "cpm_tokenizer_bench_docs.json";
  std::ofstream(docs_path) << nlohmann::json(docs).dump();
  const std::string cmd = "RAYON_NUM_THREADS=1 node " + node_script.string() + " " +
                          json_path.string() + " " + docs_path.string();
  FILE* pipe = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  while (pipe != nullptr && fgets(buf, sizeof(buf), pipe) != nullptr) out += buf;
  if (pipe == nullptr || pclose(pipe) != 0) {
    std::printf("HF tokenizers: node run failed\n");
    return 1;
  }
  const auto r = nlohmann::json::parse(out, nullptr, false);
  if (r.is_discarded()) {
    std::printf("HF tokenizers: bad output: %s\n", out.c_str());
    return 1;
  }
  const double seq = r["seq_seconds"].get<double>(), batch = r["batch_seconds"].get<double>();
  const auto hf_tokens = r["tokens"].get<size_t>();
  std::printf("HF encode (1 thread) %10zu tokens %8.3f s %12.0f tokens/s %7.2f MB/s\n", hf_tokens,
              seq, hf_tokens / seq, bytes / 1048576.0 / seq);
  std::printf("HF encodeBatch (RAYON_NUM_THREADS=1) %8.3f s %12.0f tokens/s\n", batch,
              r["batch_tokens"].get<size_t>() / batch);
  std::printf("token counts %s\n", hf_tokens == tokens ? "equal" : "DIFFER");
  std::printf("speed ratio cpm/HF: %.2fx (encode), %.2fx (encodeBatch)\n", seq / ours,
              batch / ours);
  return 0;
}
