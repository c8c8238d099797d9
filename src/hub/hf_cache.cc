#include "hub/hf_cache.h"

#include <cctype>
#include <cstdlib>
#include <fstream>

namespace cpm::hub {
namespace {

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? std::string() : std::string(v);
}

// os.path.expanduser for a leading "~" (the environment variables may hold one).
std::filesystem::path ExpandUser(const std::string& path) {
  if (path == "~" || path.rfind("~/", 0) == 0) return Env("HOME") + path.substr(1);
  return path;
}

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
  if (std::string home = Env("HF_HOME"); !home.empty()) return ExpandUser(home);
  const std::string xdg = Env("XDG_CACHE_HOME");
  return (xdg.empty() ? ExpandUser("~/.cache") : ExpandUser(xdg)) / "huggingface";
}

std::filesystem::path DefaultCacheDir() {
  for (const char* name : {"HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"}) {
    if (std::string v = Env(name); !v.empty()) return ExpandUser(v);
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
  const std::filesystem::path tmp = ref.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << commit;
    if (!out.flush()) return Internal("cannot write " + tmp.string());
  }
  std::filesystem::rename(tmp, ref, ec);
  if (ec) return Internal("cannot write " + ref.string() + ": " + ec.message());
  return OkStatus();
}

}  // namespace cpm::hub
