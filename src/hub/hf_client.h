// The two Hugging Face hub requests a model download needs, through libcurl:
//   GET {endpoint}/api/models/{repo}/revision/{revision}   the commit and the file list
//   GET {endpoint}/{repo}/resolve/{commit}/{file}          one file (large ones redirect to a CDN)
// The token, when there is one, goes to the endpoint only (libcurl drops a custom Authorization
// header on a redirect to another host).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "base/status.h"

namespace cpm::hub {

struct HubEndpoint {
  std::string base;   // $HF_ENDPOINT or https://huggingface.co, no trailing '/'
  std::string token;  // "" : anonymous
  int64_t retry_wait_ms = 1000;  // the first retry's wait, doubled at each (tests: 0)
};

// $HF_ENDPOINT (else the public hub) and the token: `token_flag` when given, else $HF_TOKEN
// (or the older $HUGGING_FACE_HUB_TOKEN), else the file huggingface-cli login writes
// ($HF_TOKEN_PATH, else $HF_HOME/token).
HubEndpoint EndpointFromEnvironment(const std::string& token_flag);

struct RepoFile {
  std::string name;   // its path in the repository
  int64_t size = -1;  // bytes, -1 when the listing does not say
};

struct RepoListing {
  std::string commit;           // the revision's full commit id
  std::vector<RepoFile> files;  // every file of the repository at that commit
};

// Unavailable when the hub cannot be reached (the caller may fall back to the cache);
// NotFound / Unauthenticated with huggingface_hub's explanations for a missing repository or
// revision, or a gated one without access.
StatusOr<RepoListing> ListRepo(const HubEndpoint& hub, const std::string& repo_id,
                               const std::string& revision);

// Downloads one file into `dest` through dest + ".incomplete", renamed once whole (and, when
// `size` >= 0, that many bytes), so a cut download never looks complete. A cut transfer is
// resumed from where it stopped (an HTTP range; a partial file left by an earlier run too), up
// to 5 tries as huggingface_hub's. Logs progress for large files. The caller holds the
// repository's CacheLock.
Status DownloadFile(const HubEndpoint& hub, const std::string& repo_id, const std::string& commit,
                    const RepoFile& file, const std::filesystem::path& dest);

}  // namespace cpm::hub
