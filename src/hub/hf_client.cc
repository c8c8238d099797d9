#include "hub/hf_client.h"

#include <curl/curl.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <thread>

#include <nlohmann/json.hpp>

#include "base/log.h"
#include "hub/hf_cache.h"
#include "io/curl_easy.h"

namespace cpm::hub {
namespace {

struct SlistDeleter {
  void operator()(curl_slist* l) const { curl_slist_free_all(l); }
};

std::string Trim(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t i = 0;
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  return s.substr(i);
}

// urllib.parse.quote(s, safe=""): every byte but letters, digits and "_.-~" percent-encoded.
std::string Quote(const std::string& s) {
  std::unique_ptr<CURL, CurlDeleter> curl(curl_easy_init());
  char* q = curl_easy_escape(curl.get(), s.c_str(), static_cast<int>(s.size()));
  std::string out(q == nullptr ? "" : q);
  curl_free(q);
  return out;
}

// The hub's error headers (huggingface_hub's hf_raise_for_status reads the same two).
struct Response {
  long status = 0;
  std::string error_code, error_message;
};

size_t ReadHeader(char* data, size_t size, size_t n, void* user) {
  auto* r = static_cast<Response*>(user);
  const std::string line(data, size * n);
  if (line.rfind("HTTP/", 0) == 0) {  // a response's status line (each redirect's too)
    const size_t sp = line.find(' ');
    if (sp != std::string::npos) r->status = std::strtol(line.c_str() + sp + 1, nullptr, 10);
    return size * n;
  }
  const size_t colon = line.find(':');
  if (colon == std::string::npos) return size * n;
  std::string name = line.substr(0, colon);
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (name == "x-error-code") r->error_code = Trim(line.substr(colon + 1));
  if (name == "x-error-message") r->error_message = Trim(line.substr(colon + 1));
  return size * n;
}

size_t AppendBody(char* data, size_t size, size_t n, void* user) {
  auto* body = static_cast<std::string*>(user);
  if (body->size() + size * n > (64u << 20)) return 0;  // no listing is this large
  body->append(data, size * n);
  return size * n;
}

// The partial file a download appends to. A resumed request the server answers with the whole
// body (200, not 206) starts the file over before its first byte is written.
struct Sink {
  std::FILE* file = nullptr;
  const Response* response = nullptr;
  bool resumed = false;
  bool started = false;
};

size_t WriteFile(char* data, size_t size, size_t n, void* user) {
  auto* sink = static_cast<Sink*>(user);
  const long status = sink->response->status;
  if (status < 200 || status >= 300) return size * n;  // an error page is not the file
  if (!sink->started) {
    sink->started = true;
    if (sink->resumed && sink->response->status != 206) {
      if (::ftruncate(::fileno(sink->file), 0) != 0 || std::fseek(sink->file, 0, SEEK_SET) != 0) {
        return 0;
      }
    }
  }
  return std::fwrite(data, size, n, sink->file) * size;
}

// Logs a large download's progress every 10 s (`have`: bytes a resumed download started from).
struct Progress {
  std::string file;
  int64_t have = 0;
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now(), last = start;
};

int OnProgress(void* user, curl_off_t total, curl_off_t now, curl_off_t, curl_off_t) {
  auto* p = static_cast<Progress*>(user);
  const auto t = std::chrono::steady_clock::now();
  if (t - p->last < std::chrono::seconds(10) || total <= 0) return 0;
  p->last = t;
  const double s = std::chrono::duration<double>(t - p->start).count();
  const double done = static_cast<double>(p->have + now), all = static_cast<double>(p->have + total);
  CPM_LOG_INFO("{}: {:.0f} / {:.0f} MB ({:.0f}%), {:.1f} MB/s", p->file, done / 1e6, all / 1e6,
               100.0 * done / all, now / 1e6 / s);
  return 0;
}

// The options every hub request shares: redirects (to the CDN) over http(s) only, the token,
// huggingface_hub's 10 s connect timeout, and a stall (under 1 kB/s for a minute) as an error
// rather than a hang.
std::unique_ptr<curl_slist, SlistDeleter> Configure(CURL* curl, const HubEndpoint& hub,
                                                    const std::string& url, Response* r,
                                                    char* error) {
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, error);
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, 1L);
  curl_easy_setopt(curl, CURLOPT_MAXREDIRS, 10L);
  curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(curl, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT, 10L);
  curl_easy_setopt(curl, CURLOPT_LOW_SPEED_LIMIT, 1000L);
  curl_easy_setopt(curl, CURLOPT_LOW_SPEED_TIME, 60L);
  curl_easy_setopt(curl, CURLOPT_USERAGENT, "cpmserve");
  curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, ReadHeader);
  curl_easy_setopt(curl, CURLOPT_HEADERDATA, r);
  std::unique_ptr<curl_slist, SlistDeleter> headers;
  if (!hub.token.empty()) {
    const std::string auth = "Authorization: Bearer " + hub.token;
    headers.reset(curl_slist_append(nullptr, auth.c_str()));
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers.get());
  }
  return headers;
}

// A finished request's outcome: Unavailable for a transport failure, huggingface_hub's
// explanations for the hub's error codes, a plain message for any other non-2xx status.
Status Outcome(CURLcode code, const char* error, const Response& r, const std::string& url,
               const std::string& repo_id) {
  if (code != CURLE_OK && code != CURLE_WRITE_ERROR) {
    return Unavailable("request to " + url + " failed: " +
                       (error[0] ? error : curl_easy_strerror(code)));
  }
  if (r.status >= 200 && r.status < 300 && code == CURLE_OK) return OkStatus();
  const std::string detail = r.error_message.empty() ? "" : " (" + r.error_message + ")";
  if (r.status == 401 && r.error_message.find("Invalid credentials") != std::string::npos) {
    return Unauthenticated("Invalid credentials in Authorization header for url: " + url +
                           ". The token (--hf-token, $HF_TOKEN or the stored login) is not valid.");
  }
  if (r.error_code == "RepoNotFound" || (r.status == 401 && r.error_code.empty())) {
    return NotFound("Repository Not Found for url: " + url + detail + ". Please make sure '" +
                    repo_id + "' is a model repository id, or a local folder that exists. If "
                    "the repository is private or gated, pass a token (--hf-token, $HF_TOKEN).");
  }
  if (r.error_code == "RevisionNotFound") {
    return NotFound("Revision Not Found for url: " + url + detail + ". Invalid rev id (--revision).");
  }
  if (r.error_code == "EntryNotFound") return NotFound("Entry Not Found for url: " + url + detail);
  if (r.error_code == "GatedRepo") {
    return Unauthenticated("Cannot access gated repo for url " + url + detail +
                           ". Ask for access on the model's page and pass a token (--hf-token, "
                           "$HF_TOKEN).");
  }
  if (code == CURLE_WRITE_ERROR) return Internal("writing the download of " + url + " failed");
  // huggingface_hub retries a server's trouble (5xx, 429); any other answer is final.
  const std::string answered = url + " answered HTTP " + std::to_string(r.status) + detail;
  if (r.status >= 500 || r.status == 429) return Unavailable(answered);
  return r.status == 404 ? NotFound(answered) : InvalidArgument(answered);
}

}  // namespace

HubEndpoint EndpointFromEnvironment(const std::string& token_flag) {
  HubEndpoint hub;
  hub.base = Env("HF_ENDPOINT");
  if (hub.base.empty()) hub.base = "https://huggingface.co";
  while (!hub.base.empty() && hub.base.back() == '/') hub.base.pop_back();
  hub.token = token_flag.empty() ? Env("HF_TOKEN") : token_flag;
  if (hub.token.empty()) hub.token = Env("HUGGING_FACE_HUB_TOKEN");  // huggingface_hub's older name
  if (hub.token.empty()) {
    const std::string path = Env("HF_TOKEN_PATH");
    std::ifstream in(path.empty() ? HfHome() / "token" : ExpandPath(path));
    std::string line;
    if (in && std::getline(in, line)) hub.token = Trim(line);
  }
  return hub;
}

StatusOr<RepoListing> ListRepo(const HubEndpoint& hub, const std::string& repo_id,
                               const std::string& revision) {
  InitCurlOnce();
  // blobs=true: each file's size, which a download is checked against.
  const std::string url =
      hub.base + "/api/models/" + repo_id + "/revision/" + Quote(revision) + "?blobs=true";
  std::unique_ptr<CURL, CurlDeleter> curl(curl_easy_init());
  if (!curl) return Internal("cannot create a libcurl handle");
  Response r;
  char error[CURL_ERROR_SIZE] = "";
  std::string body;
  const auto headers = Configure(curl.get(), hub, url, &r, error);
  curl_easy_setopt(curl.get(), CURLOPT_WRITEFUNCTION, AppendBody);
  curl_easy_setopt(curl.get(), CURLOPT_WRITEDATA, &body);
  const CURLcode code = curl_easy_perform(curl.get());
  curl_easy_getinfo(curl.get(), CURLINFO_RESPONSE_CODE, &r.status);
  CPM_RETURN_IF_ERROR(Outcome(code, error, r, url, repo_id));
  const auto json = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!json.is_object() || !json.contains("sha") || !json["sha"].is_string() ||
      !json.contains("siblings") || !json["siblings"].is_array()) {
    return Unavailable(url + " did not answer with a model listing (no 'sha' and 'siblings')");
  }
  RepoListing listing;
  listing.commit = json["sha"].get<std::string>();
  if (!IsCommitHash(listing.commit)) {
    return Unavailable(url + ": 'sha' is not a commit id: '" + listing.commit + "'");
  }
  for (const auto& s : json["siblings"]) {
    if (s.is_object() && s.contains("rfilename") && s["rfilename"].is_string()) {
      RepoFile f{s["rfilename"].get<std::string>(), -1};
      if (s.contains("size") && s["size"].is_number_integer()) f.size = s["size"].get<int64_t>();
      listing.files.push_back(std::move(f));
    }
  }
  return listing;
}

namespace {

// One request for the rest of `part` (from its current size).
Status DownloadOnce(const HubEndpoint& hub, const std::string& url, const std::string& repo_id,
                    const std::string& name, const std::filesystem::path& part) {
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> out(std::fopen(part.c_str(), "ab"), std::fclose);
  if (!out) return Internal("cannot write " + part.string());
  std::fseek(out.get(), 0, SEEK_END);
  const long have = std::ftell(out.get());
  std::unique_ptr<CURL, CurlDeleter> curl(curl_easy_init());
  if (!curl) return Internal("cannot create a libcurl handle");
  Response r;
  char error[CURL_ERROR_SIZE] = "";
  Progress progress{.file = name, .have = have};
  Sink sink{.file = out.get(), .response = &r, .resumed = have > 0};
  const auto headers = Configure(curl.get(), hub, url, &r, error);
  curl_easy_setopt(curl.get(), CURLOPT_WRITEFUNCTION, WriteFile);
  curl_easy_setopt(curl.get(), CURLOPT_WRITEDATA, &sink);
  if (have > 0) curl_easy_setopt(curl.get(), CURLOPT_RESUME_FROM_LARGE, static_cast<curl_off_t>(have));
  curl_easy_setopt(curl.get(), CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(curl.get(), CURLOPT_XFERINFOFUNCTION, OnProgress);
  curl_easy_setopt(curl.get(), CURLOPT_XFERINFODATA, &progress);
  const CURLcode code = curl_easy_perform(curl.get());
  curl_easy_getinfo(curl.get(), CURLINFO_RESPONSE_CODE, &r.status);
  if (std::fflush(out.get()) != 0) return Internal("writing " + part.string() + " failed");
  // 416: the range starts at the end, so the partial file is the whole file.
  if (have > 0 && r.status == 416) return OkStatus();
  return Outcome(code, error, r, url, repo_id);
}

}  // namespace

Status DownloadFile(const HubEndpoint& hub, const std::string& repo_id, const std::string& commit,
                    const RepoFile& file, const std::filesystem::path& dest) {
  InitCurlOnce();
  const std::string url = hub.base + "/" + repo_id + "/resolve/" + commit + "/" + Quote(file.name);
  const std::filesystem::path part = dest.string() + ".incomplete";
  std::error_code ec;
  std::filesystem::create_directories(dest.parent_path(), ec);
  constexpr int kTries = 5;
  Status s;
  for (int attempt = 1; attempt <= kTries; ++attempt) {
    s = DownloadOnce(hub, url, repo_id, file.name, part);
    const auto got = static_cast<int64_t>(std::filesystem::file_size(part, ec));
    if (s.ok() && file.size >= 0 && got != file.size) {
      // A body cut short without a Content-Length (or one that ran over): never whole.
      s = Unavailable("the download of " + url + " ended after " + std::to_string(got) + " of " +
                      std::to_string(file.size) + " bytes");
      if (got > file.size) std::filesystem::remove(part, ec);
    }
    if (s.ok() || s.code() != StatusCode::kUnavailable) break;
    if (attempt < kTries) {
      // huggingface_hub's backoff: 1, 2, 4, 8 s.
      const int64_t wait_ms = hub.retry_wait_ms << (attempt - 1);
      CPM_LOG_WARN("{}; resuming in {} ms ({} of {} tries)", s.message(), wait_ms, attempt + 1, kTries);
      std::this_thread::sleep_for(std::chrono::milliseconds(wait_ms));
    }
  }
  if (!s.ok()) {
    // A transport failure keeps the partial file for the next start to resume; an answer that
    // was an error page is dropped.
    if (s.code() != StatusCode::kUnavailable || std::filesystem::file_size(part, ec) == 0) {
      std::filesystem::remove(part, ec);
    }
    return s;
  }
  std::filesystem::rename(part, dest, ec);
  if (ec) return Internal("cannot rename " + part.string() + ": " + ec.message());
  return OkStatus();
}

}  // namespace cpm::hub
