// The Hugging Face hub cache on disk, laid out as huggingface_hub lays it out, so that a model
// downloaded by either side is found by the other:
//
//   <cache>/models--<org>--<name>/refs/<revision>         the commit a branch or tag names
//   <cache>/models--<org>--<name>/snapshots/<commit>/...  the repository's files at that commit
//
// huggingface_hub keeps the bytes in blobs/ and links them from the snapshot; cpmserve writes
// plain files into the snapshot, which huggingface_hub, transformers and vLLM read the same way
// (they only ever open snapshots/<commit>/<file>).
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "base/status.h"

namespace cpm::hub {

// The environment variable's value ("" when unset).
std::string Env(const char* name);

// os.path.expandvars then expanduser, as huggingface_hub reads its path variables: $NAME and
// ${NAME} of set variables, then a leading "~".
std::filesystem::path ExpandPath(const std::string& path);

// huggingface_hub's home: $HF_HOME, else $XDG_CACHE_HOME/huggingface, else ~/.cache/huggingface.
std::filesystem::path HfHome();

// huggingface_hub's cache folder: $HF_HUB_CACHE, else $HUGGINGFACE_HUB_CACHE, else
// $HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub.
std::filesystem::path DefaultCacheDir();

// huggingface_hub's validate_repo_id: "name" or "org/name", each part of letters, digits, '_',
// '-' and '.', starting and ending with a letter, digit or '_', the name at most 96 characters,
// no "--" or "..".
bool IsRepoId(std::string_view id);

// A full commit id (40 hex digits), which names a snapshot without a ref.
bool IsCommitHash(std::string_view revision);

// <cache>/models--<org>--<name> ('/' becomes "--", as huggingface_hub's repo_folder_name).
std::filesystem::path RepoFolder(const std::filesystem::path& cache, std::string_view repo_id);

// The commit `revision` names in the cache: itself for a commit id, else refs/<revision>'s
// contents; nullopt when the ref was never written.
std::optional<std::string> CachedCommit(const std::filesystem::path& repo_folder,
                                        const std::string& revision);

// refs/<revision> = commit (written to a temporary file of this process and renamed, so a
// reader never sees a partial ref). Nothing to do for a revision that is the commit itself.
Status WriteRef(const std::filesystem::path& repo_folder, const std::string& revision,
                const std::string& commit);

// An exclusive lock on one repository's downloads into one cache (flock on
// <cache>/.locks/models--<org>--<name>/cpmserve.lock, where huggingface_hub keeps its own
// locks): processes starting together download each file once, never into the same partial
// file. Released when destroyed (or when the process dies).
class CacheLock {
 public:
  static StatusOr<CacheLock> Acquire(const std::filesystem::path& cache, std::string_view repo_id);
  CacheLock(CacheLock&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  CacheLock& operator=(CacheLock&&) = delete;
  ~CacheLock();

 private:
  explicit CacheLock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

}  // namespace cpm::hub
