#include "multimodal/image_source.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <climits>
#include <cstdlib>
#include <filesystem>
#include <string_view>

#include <nlohmann/json.hpp>

#include "multimodal/base64.h"
#include "multimodal/http_fetch.h"

namespace cpm {
namespace {

bool HasPrefixNoCase(std::string_view s, std::string_view prefix) {
  if (s.size() < prefix.size()) return false;
  for (size_t i = 0; i < prefix.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(s[i])) != prefix[i]) return false;
  }
  return true;
}

// Data URLs can be megabytes long; errors quote only their start.
std::string Quote(std::string_view url) {
  constexpr size_t kMax = 80;
  if (url.size() <= kMax) return "'" + std::string(url) + "'";
  return "'" + std::string(url.substr(0, kMax)) + "...'";
}

std::string TooBig(std::string_view part, int64_t max_bytes) {
  return std::string(part) + ": the " + (part == "video_url" ? "video" : "image") +
         " is larger than " + std::to_string(max_bytes) + " bytes";
}

// vLLM's frames-as-JPEGs video data URL.
constexpr std::string_view kJpegFramesPrefix = "data:video/jpeg;base64,";

// data:[<media type>][;base64],<data>. Only base64 payloads, as vLLM.
StatusOr<std::string> FromDataUrl(std::string_view url, const MediaOptions& options,
                                  std::string_view part) {
  const size_t comma = url.find(',');
  if (comma == std::string_view::npos) {
    return InvalidArgument(std::string(part) + ": malformed data URL " + Quote(url) + " (no ',')");
  }
  const std::string_view spec = url.substr(5, comma - 5);  // after "data:"
  const size_t semicolon = spec.rfind(';');
  if (semicolon == std::string_view::npos || spec.substr(semicolon + 1) != "base64") {
    return InvalidArgument(std::string(part) + ": only base64 data URLs are supported "
                           "(data:<media type>;base64,<data>), got " + Quote(url));
  }
  const std::string_view payload = url.substr(comma + 1);
  if (static_cast<int64_t>(payload.size()) / 4 * 3 > options.max_bytes) {
    return InvalidArgument(TooBig(part, options.max_bytes));
  }
  StatusOr<std::string> bytes =
      part == "video_url" ? DecodeBase64SkippingOthers(payload) : DecodeBase64(payload);
  if (!bytes.ok()) return bytes.status().WithPrefix(std::string(part) + ": data URL");
  return bytes;
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// %XX escapes, as Python's url2pathname undoes them.
std::string PercentDecode(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && HexValue(s[i + 1]) >= 0 && HexValue(s[i + 2]) >= 0) {
      out.push_back(static_cast<char>(HexValue(s[i + 1]) * 16 + HexValue(s[i + 2])));
      i += 2;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

// realpath(3): absolute, symlinks and ".." resolved; empty if the path does not exist.
std::string RealPath(const std::string& path) {
  char resolved[PATH_MAX];
  return ::realpath(path.c_str(), resolved) ? std::string(resolved) : std::string();
}

StatusOr<std::string> ReadFileLimited(const std::string& path, int64_t max_bytes,
                                      std::string_view part) {
  const std::string cannot = std::string(part) + ": cannot read local file " + path;
  // Opened without blocking and checked on the open descriptor: a FIFO (or one swapped in after
  // any check by name) would hold the request, and shutdown, in open(); a device or a
  // directory has no size to check.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return InvalidArgument(cannot);
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return InvalidArgument(std::string(part) + ": local file " + path + " is not a regular file");
  }
  if (st.st_size > max_bytes) {
    ::close(fd);
    return InvalidArgument(TooBig(part, max_bytes));
  }
  std::string bytes(static_cast<size_t>(st.st_size), '\0');
  size_t got = 0;
  while (got < bytes.size()) {
    const ssize_t n = ::read(fd, bytes.data() + got, bytes.size() - got);
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  if (got != bytes.size()) return InvalidArgument(cannot);
  return bytes;
}

// file://[localhost]/path, allowed only below --allowed-local-media-path (after resolving
// symlinks and "..", so neither can lead outside it). Texts as vLLM's.
StatusOr<std::string> FromFileUrl(std::string_view url, const MediaOptions& options,
                                  std::string_view part) {
  if (options.allowed_local_media_path.empty()) {
    return InvalidArgument("Cannot load local files without `--allowed-local-media-path`.");
  }
  std::string_view rest = url.substr(7);  // after "file://"
  // vLLM reads only the URL's path: no query or fragment.
  rest = rest.substr(0, rest.find_first_of("?#"));
  if (HasPrefixNoCase(rest, "localhost/")) rest.remove_prefix(9);
  if (rest.empty() || rest[0] != '/') {
    return InvalidArgument(std::string(part) + ": file URLs must name an absolute local path, got " + Quote(url));
  }
  const std::string path = PercentDecode(rest);
  if (path.find('\0') != std::string::npos) {  // Python: "embedded null byte"
    return InvalidArgument(std::string(part) + ": file URL path has an embedded null byte");
  }
  const std::string allowed = RealPath(options.allowed_local_media_path);
  if (allowed.empty()) {
    return InvalidArgument(std::string(part) + ": --allowed-local-media-path " +
                           options.allowed_local_media_path + " does not exist");
  }
  const std::string real = RealPath(path);
  const std::string prefix = allowed == "/" ? allowed : allowed + "/";
  // A missing file is named only inside the allowed folder: outside it a client must not learn
  // which paths exist.
  const std::string lexical = std::filesystem::path(path).lexically_normal().string();
  if (real.empty() && lexical.compare(0, prefix.size(), prefix) == 0)
    return InvalidArgument(std::string(part) + ": local file " + path + " does not exist");
  if (real.empty() || real.compare(0, prefix.size(), prefix) != 0) {
    return InvalidArgument("The file path " + path + " must be a subpath of "
                           "`--allowed-local-media-path` " + options.allowed_local_media_path + ".");
  }
  return ReadFileLimited(real, options.max_bytes, part);
}

}  // namespace

Status ApplyMediaIoKwargs(const std::string& kwargs_json, MediaOptions* options,
                          const std::string& where) {
  if (kwargs_json.empty()) return OkStatus();
  const auto j = nlohmann::json::parse(kwargs_json, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return InvalidArgument(where + ": not a JSON object: " + kwargs_json);
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() != "video" || !it->is_object())
      return InvalidArgument(where + ": only {\"video\": {\"num_frames\": N}} is supported, got '" +
                             it.key() + "'");
    for (auto v = it->begin(); v != it->end(); ++v) {
      if (v.key() != "num_frames")
        return InvalidArgument(where + ": video option '" + v.key() + "' is not supported (num_frames is)");
      if (!v->is_number_integer() || v->get<int64_t>() == 0 || v->get<int64_t>() < -1)
        return InvalidArgument(where + ": video num_frames must be a positive integer or -1");
      options->video_num_frames = v->get<int64_t>();
    }
  }
  return OkStatus();
}

bool IsJpegFramesDataUrl(std::string_view url) { return HasPrefixNoCase(url, kJpegFramesPrefix); }

bool IsHttpUrl(std::string_view url) {
  return HasPrefixNoCase(url, "http://") || HasPrefixNoCase(url, "https://");
}

StatusOr<std::vector<std::string>> JpegFramesOfDataUrl(std::string_view url,
                                                       const MediaOptions& options) {
  std::string_view payload = url.substr(kJpegFramesPrefix.size());
  if (static_cast<int64_t>(payload.size()) / 4 * 3 > options.max_bytes) {
    return InvalidArgument(TooBig("video_url", options.max_bytes));
  }
  std::vector<std::string> frames;
  while (true) {
    const size_t comma = payload.find(',');
    StatusOr<std::string> frame = DecodeBase64SkippingOthers(payload.substr(0, comma));
    if (!frame.ok()) {
      return frame.status().WithPrefix("video_url: JPEG frame " + std::to_string(frames.size() + 1));
    }
    frames.push_back(std::move(*frame));
    // vLLM's load_base64 keeps the first num_frames (-1: all of them).
    if (options.video_num_frames > 0 &&
        static_cast<int64_t>(frames.size()) == options.video_num_frames) {
      break;
    }
    if (comma == std::string_view::npos) break;
    payload.remove_prefix(comma + 1);
  }
  return frames;
}

StatusOr<std::string> FetchImageBytes(const std::string& url, const MediaOptions& options) {
  return FetchMediaBytes(url, options, "image_url");
}

StatusOr<std::string> FetchMediaBytes(const std::string& url, const MediaOptions& options,
                                      std::string_view part) {
  if (HasPrefixNoCase(url, "data:")) return FromDataUrl(url, options, part);
  if (IsHttpUrl(url)) {
    const int64_t timeout_s =
        part == "video_url" ? options.video_fetch_timeout_s : options.fetch_timeout_s;
    StatusOr<std::string> body =
        HttpGet(url, {timeout_s, options.max_bytes, options.allowed_media_domains,
                      options.follow_redirects});
    if (!body.ok()) return body.status().WithPrefix(std::string(part));
    return body;
  }
  if (HasPrefixNoCase(url, "file://")) return FromFileUrl(url, options, part);
  return InvalidArgument(std::string(part) + ": the URL must be either a HTTP, data or file URL, got " +
                         Quote(url));
}

}  // namespace cpm
