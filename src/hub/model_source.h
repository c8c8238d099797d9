// The model argument of `serve`, `generate`, `eval`, `validate` and `bench`, as vLLM reads it: a
// local folder is used as it is; anything else must be a Hugging Face repository id
// ("org/name"), which becomes its snapshot folder in the hub cache, downloaded first when the
// cache lacks it (what huggingface_hub's snapshot_download gives vLLM).
#pragma once

#include <string>
#include <vector>

#include "base/status.h"

namespace cpm::hub {

struct HubOptions {
  std::string revision = "main";  // --revision: a branch, tag or commit id
  std::string download_dir;       // --download-dir: the cache folder ("": DefaultCacheDir())
  std::string token;              // --hf-token ("": $HF_TOKEN, else the stored login token)
  bool need_weights = true;       // false with --load-format dummy: no *.safetensors fetched
  bool need_config = true;        // false for a tokenizer: its repository needs no config.json
  int64_t retry_wait_ms = 1000;   // a cut download's first retry waits this long, doubled after
};

// The local folder `model` names. A folder, or a path that cannot be a repository id ("./x",
// "/a/b", "a/b/c"), is returned as it is, for the loader to say what it lacks. A repository id
// is listed on the hub at `revision`, and the files cpmserve reads that the snapshot lacks are
// downloaded into it (under the repository's CacheLock); with HF_HUB_OFFLINE (or
// TRANSFORMERS_OFFLINE) set the cached snapshot is used as it is, and so it is, with a warning,
// when the listing fails (no network, a 5xx, a token the hub refuses) and the cache holds the
// revision. Errors name the model, the cache folder and what is missing.
StatusOr<std::string> ResolveModelFolder(const std::string& model, const HubOptions& options);

// Of a repository's files, the ones cpmserve reads, in download order: the top-level configs,
// tokenizer files and templates (*.json, *.jinja, *.model, *.txt, *.tiktoken), then, when
// `need_weights`, the *.safetensors files (vLLM's allow pattern; other weight formats, READMEs,
// images and subfolders such as original/ are never fetched).
std::vector<std::string> FilesToDownload(const std::vector<std::string>& repo_files,
                                         bool need_weights);

}  // namespace cpm::hub
