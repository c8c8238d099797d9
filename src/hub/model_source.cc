#include "hub/model_source.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/log.h"
#include "hub/hf_cache.h"
#include "hub/hf_client.h"

namespace cpm::hub {
namespace {

namespace fs = std::filesystem;

constexpr const char* kIndexFile = "model.safetensors.index.json";

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool IsWeightFile(const std::string& f) { return EndsWith(f, ".safetensors"); }

// huggingface_hub's HF_HUB_OFFLINE (or transformers' TRANSFORMERS_OFFLINE): 1, ON, YES or TRUE.
bool Offline() {
  for (const char* name : {"HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"}) {
    const char* v = std::getenv(name);
    if (v == nullptr || *v == '\0') continue;
    std::string s(v);
    for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    return s == "1" || s == "ON" || s == "YES" || s == "TRUE";
  }
  return false;
}

// vLLM's VLLM_USE_MODELSCOPE sends repository ids to ModelScope, which cpmserve cannot reach.
// vLLM reads it as on only when it is "true" in any case (envs.py); "1" leaves it off there.
void WarnIfModelScope() {
  const char* v = std::getenv("VLLM_USE_MODELSCOPE");
  std::string s = v == nullptr ? "" : v;
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (s != "true") return;
  CPM_LOG_WARN("VLLM_USE_MODELSCOPE is set: cpmserve reads the Hugging Face hub (or its cache) "
               "only, not ModelScope");
}

bool HasWeights(const fs::path& folder) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(folder, ec)) {
    if (IsWeightFile(e.path().filename().string())) return true;
  }
  return false;
}

// The shards model.safetensors.index.json names (its weight_map's values); empty when the
// snapshot has no index. vLLM loads only these where a repository also holds a merged copy.
StatusOr<std::set<std::string>> IndexedShards(const fs::path& snapshot) {
  std::set<std::string> shards;
  std::ifstream in(snapshot / kIndexFile);
  if (!in) return shards;
  const auto json = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!json.is_object() || !json.contains("weight_map") || !json["weight_map"].is_object()) {
    return DataLoss((snapshot / kIndexFile).string() + ": no 'weight_map' object");
  }
  for (const auto& [name, file] : json["weight_map"].items()) {
    if (file.is_string()) shards.insert(file.get<std::string>());
  }
  return shards;
}

// The cached snapshot `revision` names, when it holds what loading needs.
StatusOr<std::string> FromCache(const std::string& model, const HubOptions& o, const fs::path& cache,
                                const std::string& why) {
  const fs::path repo = RepoFolder(cache, model);
  const auto commit = CachedCommit(repo, o.revision);
  const std::string where = "'" + model + "' (revision " + o.revision + ") ";
  if (!commit) {
    return NotFound("Invalid repository ID or local directory specified: " + where +
                    "is not in the Hugging Face cache " + cache.string() + " (no " +
                    (repo / "refs" / o.revision).string() + "), and " + why);
  }
  const fs::path snapshot = repo / "snapshots" / *commit;
  if (o.need_config ? !fs::exists(snapshot / "config.json") : !fs::is_directory(snapshot)) {
    return NotFound(where + "is not complete in the Hugging Face cache: " +
                    (snapshot / "config.json").string() + " is missing, and " + why);
  }
  if (o.need_weights && !HasWeights(snapshot)) {
    return NotFound(where + "has no *.safetensors weights in the Hugging Face cache (" +
                    snapshot.string() + "), and " + why + " (--load-format dummy needs none)");
  }
  CPM_LOG_INFO("{}: the cached snapshot {}", model, snapshot.string());
  return snapshot.string();
}

// Downloads what of `files` the snapshot lacks, taking the repository's lock (once) only then:
// a complete cache, read-only perhaps, is used without writing anything.
Status FetchMissing(const HubEndpoint& hub, const std::string& model, const RepoListing& listing,
                    const std::vector<std::string>& files, const fs::path& cache,
                    const fs::path& snapshot, std::optional<CacheLock>* lock) {
  for (const std::string& f : files) {
    if (fs::exists(snapshot / f)) continue;
    if (!lock->has_value()) {
      // One process at a time downloads into this repository's folders; the others wait, then
      // find the files there.
      CPM_ASSIGN_OR_RETURN(CacheLock acquired, CacheLock::Acquire(cache, model));
      lock->emplace(std::move(acquired));
      if (fs::exists(snapshot / f)) continue;
    }
    RepoFile file{f, -1};
    for (const RepoFile& r : listing.files) {
      if (r.name == f) file = r;
    }
    CPM_LOG_INFO("{}: downloading {}{}", model, f,
                 file.size >= 0 ? fmt::format(" ({:.1f} MB)", file.size / 1e6) : "");
    CPM_RETURN_IF_ERROR(DownloadFile(hub, model, listing.commit, file, snapshot / f));
  }
  return OkStatus();
}

// Lists the repository and fills the snapshot with what cpmserve reads: configs and tokenizer
// files first, then the weights (only the index's shards when there is an index).
StatusOr<std::string> Download(const std::string& model, const HubOptions& o, const fs::path& cache,
                               const HubEndpoint& hub, const RepoListing& listing) {
  std::vector<std::string> names;
  for (const RepoFile& f : listing.files) names.push_back(f.name);
  const std::vector<std::string> files = FilesToDownload(names, o.need_weights);
  const auto first_weight = std::find_if(files.begin(), files.end(), IsWeightFile);
  if (o.need_weights && first_weight == files.end()) {
    return InvalidArgument("'" + model + "' (revision " + o.revision + ") has no *.safetensors "
                           "weights: cpmserve reads safetensors only (--load-format dummy needs "
                           "no weights)");
  }
  if (o.need_config && std::find(names.begin(), names.end(), "config.json") == names.end()) {
    return InvalidArgument("Invalid repository ID or local directory specified: '" + model +
                           "': the repository has no config.json");
  }
  const fs::path repo = RepoFolder(cache, model);
  const fs::path snapshot = repo / "snapshots" / listing.commit;
  std::optional<CacheLock> lock;
  CPM_RETURN_IF_ERROR(FetchMissing(hub, model, listing, {files.begin(), first_weight}, cache,
                                   snapshot, &lock));
  std::vector<std::string> weights(first_weight, files.end());
  CPM_ASSIGN_OR_RETURN(const std::set<std::string> shards, IndexedShards(snapshot));
  if (!shards.empty()) {
    std::erase_if(weights, [&](const std::string& f) { return shards.count(f) == 0; });
  }
  CPM_RETURN_IF_ERROR(FetchMissing(hub, model, listing, weights, cache, snapshot, &lock));
  if (CachedCommit(repo, o.revision) != listing.commit) {
    if (Status s = WriteRef(repo, o.revision, listing.commit); !s.ok()) {
      if (lock) return s;  // downloaded just now: the cache must be writable
      CPM_LOG_WARN("{} (the snapshot is whole; a later offline start may not find it)", s.message());
    }
  }
  CPM_LOG_INFO("{} (revision {} = {}): {}", model, o.revision, listing.commit, snapshot.string());
  return snapshot.string();
}

}  // namespace

std::vector<std::string> FilesToDownload(const std::vector<std::string>& repo_files,
                                         bool need_weights) {
  std::vector<std::string> small, weights;
  for (const std::string& f : repo_files) {
    if (f.find('/') != std::string::npos) continue;
    if (IsWeightFile(f)) {
      if (need_weights) weights.push_back(f);
      continue;
    }
    for (const char* ext : {".json", ".jinja", ".model", ".txt", ".tiktoken"}) {
      if (EndsWith(f, ext)) {
        small.push_back(f);
        break;
      }
    }
  }
  small.insert(small.end(), weights.begin(), weights.end());
  return small;
}

StatusOr<std::string> ResolveModelFolder(const std::string& model, const HubOptions& o) {
  std::error_code ec;
  // A path that is no repository id is the loader's to report (it names the file it lacks).
  if (fs::is_directory(model, ec) || !IsRepoId(model)) return model;
  const fs::path cache = o.download_dir.empty() ? DefaultCacheDir() : ExpandPath(o.download_dir);
  WarnIfModelScope();
  if (Offline()) return FromCache(model, o, cache, "HF_HUB_OFFLINE is set");
  HubEndpoint hub = EndpointFromEnvironment(o.token);
  hub.retry_wait_ms = o.retry_wait_ms;
  auto listing = ListRepo(hub, model, o.revision);
  if (listing.ok()) return Download(model, o, cache, hub, *listing);
  // As huggingface_hub's snapshot_download: a cached revision serves when the listing fails,
  // unless the hub says the revision does not exist.
  const bool no_such_revision =
      listing.status().message().rfind("Revision Not Found", 0) == 0;
  StatusOr<std::string> cached =
      no_such_revision ? StatusOr<std::string>(listing.status())
                       : FromCache(model, o, cache,
                                   "the hub could not be reached (" + listing.status().message() + ")");
  if (cached.ok()) {
    CPM_LOG_WARN("{}; using the cached snapshot", listing.status().message());
    return cached;
  }
  // Unreachable: the cache's error says what it lacks and why the hub was not used; else the
  // hub's own answer.
  if (listing.status().code() == StatusCode::kUnavailable) return cached;
  return listing.status().WithPrefix("model '" + model + "'");
}

}  // namespace cpm::hub
