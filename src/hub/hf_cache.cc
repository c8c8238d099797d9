#include "hub/hf_cache.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <fstream>

#include "base/log.h"

namespace cpm::hub {

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? std::string() : std::string(v);
}

std::filesystem::path ExpandPath(const std::string& path) {
  // os.path.expandvars: $NAME and ${NAME} of set variables (unset ones stay as written).
  std::string out;
  for (size_t i = 0; i < path.size();) {
    if (path[i] == '$' && i + 1 < path.size()) {
      const bool braced = path[i + 1] == '{';
      size_t j = i + 1 + braced;
      while (j < path.size() && (std::isalnum(static_cast<unsigned char>(path[j])) || path[j] == '_')) ++j;
      const std::string name = path.substr(i + 1 + braced, j - i - 1 - braced);
      const bool closed = !braced || (j < path.size() && path[j] == '}');
      if (!name.empty() && closed && std::getenv(name.c_str()) != nullptr) {
        out += Env(name.c_str());
        i = j + braced;
        continue;
      }
    }
    out += path[i++];
  }
  // os.path.expanduser for a leading "~".
  if (out == "~" || out.rfind("~/", 0) == 0) return Env("HOME") + out.substr(1);
  return out;
}

namespace {

bool IsWordChar(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// One part of a repo id: [\w\-.]+ bounded by word characters (the regex's \b on each side).
bool IsRepoIdPart(std::string_view part, size_t max_len) {
  if (part.empty() || part.size() > max_len) return false;
  if (!IsWordChar(part.front()) || !IsWordChar(part.back())) return false;
  for (char c : part) {
    if (!IsWordChar(c) && c != '-' && c != '.') return false;
  }
  return true;
}

}  // namespace

std::filesystem::path HfHome() {
  if (std::string home = Env("HF_HOME"); !home.empty()) return ExpandPath(home);
  const std::string xdg = Env("XDG_CACHE_HOME");
  return (xdg.empty() ? ExpandPath("~/.cache") : ExpandPath(xdg)) / "huggingface";
}

std::filesystem::path DefaultCacheDir() {
  for (const char* name : {"HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"}) {
    if (std::string v = Env(name); !v.empty()) return ExpandPath(v);
  }
  return HfHome() / "hub";
}

bool IsRepoId(std::string_view id) {
  if (id.find("--") != std::string_view::npos || id.find("..") != std::string_view::npos) {
    return false;
  }
  const size_t slash = id.find('/');
  if (slash == std::string_view::npos) return IsRepoIdPart(id, 96);
  const std::string_view org = id.substr(0, slash), name = id.substr(slash + 1);
  return IsRepoIdPart(org, id.size()) && IsRepoIdPart(name, 96);
}

bool IsCommitHash(std::string_view revision) {
  if (revision.size() != 40) return false;
  for (char c : revision) {
    if (!std::isxdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

std::filesystem::path RepoFolder(const std::filesystem::path& cache, std::string_view repo_id) {
  std::string folder = "models--";
  for (char c : repo_id) folder += c == '/' ? std::string("--") : std::string(1, c);
  return cache / folder;
}

std::optional<std::string> CachedCommit(const std::filesystem::path& repo_folder,
                                        const std::string& revision) {
  if (IsCommitHash(revision)) return revision;
  std::ifstream in(repo_folder / "refs" / revision);
  std::string commit;
  if (!in || !std::getline(in, commit) || commit.empty()) return std::nullopt;
  return commit;
}

Status WriteRef(const std::filesystem::path& repo_folder, const std::string& revision,
                const std::string& commit) {
  if (revision == commit) return OkStatus();
  const std::filesystem::path ref = repo_folder / "refs" / revision;
  std::error_code ec;
  std::filesystem::create_directories(ref.parent_path(), ec);
  const std::filesystem::path tmp = ref.string() + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << commit;
    if (!out.flush()) return Internal("cannot write " + tmp.string());
  }
  std::filesystem::rename(tmp, ref, ec);
  if (ec) return Internal("cannot write " + ref.string() + ": " + ec.message());
  return OkStatus();
}

StatusOr<CacheLock> CacheLock::Acquire(const std::filesystem::path& cache,
                                       std::string_view repo_id) {
  const std::filesystem::path dir = cache / ".locks" / RepoFolder("", repo_id);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  const std::filesystem::path path = dir / "cpmserve.lock";
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return Internal("cannot open the lock file " + path.string());
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    CPM_LOG_INFO("{}: waiting for another process's download into {}", std::string(repo_id),
                 cache.string());
    if (::flock(fd, LOCK_EX) != 0) {
      ::close(fd);
      return Internal("cannot lock " + path.string());
    }
  }
  return CacheLock(fd);
}

CacheLock::~CacheLock() {
  if (fd_ >= 0) ::close(fd_);  // closing releases the lock
}

}  // namespace cpm::hub
