// FetchImageBytes: data URLs (strict base64), the file:// policy of --allowed-local-media-path,
// and HTTP through libcurl against a local cpp-httplib server (status, redirects, size cap,
// timeout) and against a port that refuses connections.
#include "multimodal/image_source.h"

#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "multimodal/base64.h"

namespace cpm {
namespace {

namespace fs = std::filesystem;

void ExpectError(const StatusOr<std::string>& got, const std::string& needle) {
  ASSERT_FALSE(got.ok()) << "expected an error containing: " << needle;
  EXPECT_EQ(got.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(got.status().message().find(needle), std::string::npos) << got.status().message();
}

TEST(Base64, DecodesRfc4648Vectors) {
  const std::pair<const char*, const char*> cases[] = {
      {"", ""}, {"Zg==", "f"}, {"Zm8=", "fo"}, {"Zm9v", "foo"}, {"Zm9vYmFy", "foobar"},
      {"+/8=", "\xFB\xFF"}};
  for (const auto& [text, bytes] : cases) {
    StatusOr<std::string> got = DecodeBase64(text);
    ASSERT_TRUE(got.ok()) << text;
    EXPECT_EQ(*got, bytes) << text;
    EXPECT_EQ(EncodeBase64(bytes), text);
  }
  std::string all;
  for (int i = 0; i < 256 * 3 + 1; ++i) all += static_cast<char>(i * 7);
  EXPECT_EQ(*DecodeBase64(EncodeBase64(all)), all);
}

// Python's non-validating b64decode: line breaks and other strays skipped, padding still due.
TEST(Base64, SkippingOthersDropsWhatIsNotBase64) {
  EXPECT_EQ(*DecodeBase64SkippingOthers("Zm9v\nYmFy\r\n"), "foobar");
  EXPECT_EQ(*DecodeBase64SkippingOthers(" Zm8=\n"), "fo");
  EXPECT_FALSE(DecodeBase64SkippingOthers("Zm8\n").ok());
}

TEST(Base64, RejectsWhatStrictDecodingRejects) {
  for (const char* bad : {"Zg", "Zm9", "Zg=", "Z===", "Zm9v\n", "Zm=v", "Zm9-", "====", "Zg==Zg=="}) {
    EXPECT_FALSE(DecodeBase64(bad).ok()) << bad;
  }
}

TEST(FetchImageBytes, DataUrlDecodes) {
  StatusOr<std::string> got = FetchImageBytes("data:image/png;base64,iVBORw0KGgo=", {});
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, "\x89PNG\r\n\x1a\n");
}

TEST(FetchImageBytes, DataUrlErrorsAreClear) {
  ExpectError(FetchImageBytes("data:image/png,iVBORw0KGgo=", {}), "only base64 data URLs are supported");
  ExpectError(FetchImageBytes("data:image/png;base64", {}), "malformed data URL");
  ExpectError(FetchImageBytes("data:image/png;base64,iVBOR w0=", {}), "data URL: invalid base64");
  MediaOptions small;
  small.max_bytes = 4;
  ExpectError(FetchImageBytes("data:image/png;base64,iVBORw0KGgo=", small), "larger than 4 bytes");
}

// A video_url part's errors name it and its kind of data.
TEST(FetchMediaBytes, ErrorsNameTheVideoPart) {
  MediaOptions small;
  small.max_bytes = 4;
  ExpectError(FetchMediaBytes("data:video/mp4;base64,AAAAAAAAAAAA", small, "video_url"),
              "video_url: the video is larger than 4 bytes");
  ExpectError(FetchMediaBytes("ftp://example.com/a.mp4", {}, "video_url"),
              "video_url: the URL must be either a HTTP, data or file URL");
  ExpectError(FetchMediaBytes("data:video/mp4;base64", {}, "video_url"), "video_url: malformed data URL");
}

TEST(FetchImageBytes, OtherSchemesAreRefused) {
  ExpectError(FetchImageBytes("ftp://example.com/a.png", {}), "must be either a HTTP, data or file URL");
  ExpectError(FetchImageBytes("a.png", {}), "must be either a HTTP, data or file URL");
}

// Two sibling directories under a fresh temp dir: `allowed` and `outside`, a file in each.
class FileUrlTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/cpm_media_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    fs::create_directories(root_ / "allowed" / "sub dir");
    fs::create_directories(root_ / "outside");
    Write(root_ / "allowed" / "sub dir" / "a.png", "inside");
    Write(root_ / "outside" / "b.png", "outside");
    fs::create_symlink(root_ / "outside" / "b.png", root_ / "allowed" / "link.png");
    options_.allowed_local_media_path = (root_ / "allowed").string();
  }
  void TearDown() override { fs::remove_all(root_); }
  static void Write(const fs::path& p, const std::string& text) { std::ofstream(p) << text; }
  std::string Url(const std::string& rel) const { return "file://" + (root_ / rel).string(); }

  fs::path root_;
  MediaOptions options_;
};

TEST_F(FileUrlTest, RefusedWithoutAllowedPath) {
  ExpectError(FetchImageBytes(Url("allowed/sub%20dir/a.png"), {}),
              "Cannot load local files without `--allowed-local-media-path`.");
}

TEST_F(FileUrlTest, ReadsInsideAllowedPath) {
  StatusOr<std::string> got = FetchImageBytes(Url("allowed/sub%20dir/a.png"), options_);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, "inside");
  got = FetchImageBytes("file://localhost" + (root_ / "allowed/sub%20dir/a.png").string(), options_);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
}

TEST_F(FileUrlTest, RefusesEverythingOutside) {
  const std::string needle = "must be a subpath of `--allowed-local-media-path`";
  ExpectError(FetchImageBytes(Url("outside/b.png"), options_), needle);
  ExpectError(FetchImageBytes(Url("allowed/../outside/b.png"), options_), needle);
  ExpectError(FetchImageBytes(Url("allowed/link.png"), options_), needle);  // symlink out
  ExpectError(FetchImageBytes(Url("allowed"), options_), needle);           // the dir itself
  ExpectError(FetchImageBytes(Url("allowed/missing.png"), options_), "does not exist");
  // Whether a path outside exists is not told: a missing one gets the same refusal.
  ExpectError(FetchImageBytes(Url("outside/missing.png"), options_), needle);
  ExpectError(FetchImageBytes(Url("allowed/../outside/missing.png"), options_), needle);
  ExpectError(FetchImageBytes("file://otherhost/etc/passwd", options_), "absolute local path");
}

// vLLM reads the URL's path only; a path with a NUL is refused (Python's "embedded null byte");
// anything but a regular file (a FIFO would block the request in open()) is refused.
TEST_F(FileUrlTest, OnlyThePathAndOnlyRegularFiles) {
  StatusOr<std::string> got = FetchImageBytes(Url("allowed/sub%20dir/a.png") + "?x=1#frag", options_);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, "inside");
  ExpectError(FetchImageBytes(Url("allowed/sub%20dir/a.png%00.jpg"), options_), "null byte");
  ASSERT_EQ(::mkfifo((root_ / "allowed" / "fifo.png").c_str(), 0600), 0);
  ExpectError(FetchImageBytes(Url("allowed/fifo.png"), options_), "is not a regular file");
  fs::create_directories(root_ / "allowed" / "dir.png");
  ExpectError(FetchImageBytes(Url("allowed/dir.png"), options_), "is not a regular file");
}

TEST_F(FileUrlTest, SizeCapApplies) {
  options_.max_bytes = 3;
  ExpectError(FetchImageBytes(Url("allowed/sub%20dir/a.png"), options_), "larger than 3 bytes");
}

// A cpp-httplib server on a free loopback port, serving a few scripted responses.
class HttpFetchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ::setenv("no_proxy", "*", 1);  // loopback must not go through a proxy from the environment
    svr_.Get("/img", [](const httplib::Request&, httplib::Response& res) {
      res.set_content("\x89PNG-bytes", "image/png");
    });
    svr_.Get("/missing", [](const httplib::Request&, httplib::Response& res) { res.status = 404; });
    svr_.Get("/moved", [](const httplib::Request&, httplib::Response& res) { res.set_redirect("/img"); });
    svr_.Get("/to-file", [](const httplib::Request&, httplib::Response& res) {
      res.set_redirect("file:///etc/passwd");
    });
    svr_.Get("/elsewhere", [this](const httplib::Request&, httplib::Response& res) {
      res.set_redirect("http://localhost:" + std::to_string(port_) + "/img");
    });
    svr_.Get("/big", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(std::string(10000, 'x'), "image/png");
    });
    for (const char* hop : {"/hop1", "/hop2"}) {  // 700 ms each, then on
      svr_.Get(hop, [hop](const httplib::Request&, httplib::Response& res) {
        std::this_thread::sleep_for(std::chrono::milliseconds(700));
        res.set_redirect(std::string(hop) == "/hop1" ? "/hop2" : "/img");
      });
    }
    svr_.Get("/slow", [](const httplib::Request&, httplib::Response& res) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2500));
      res.set_content("late", "image/png");
    });
    port_ = svr_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { svr_.listen_after_bind(); });
    while (!svr_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  void TearDown() override {
    svr_.stop();
    thread_.join();
  }
  std::string Url(const std::string& path) const {
    return "http://127.0.0.1:" + std::to_string(port_) + path;
  }

  httplib::Server svr_;
  std::thread thread_;
  int port_ = 0;
};

TEST_F(HttpFetchTest, FetchesAndFollowsRedirects) {
  for (const char* path : {"/img", "/moved"}) {
    StatusOr<std::string> got = FetchImageBytes(Url(path), {});
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_EQ(*got, "\x89PNG-bytes");
  }
}

// vLLM's --allowed-media-domains: the URL's host and each redirect's, checked before fetching.
TEST_F(HttpFetchTest, AllowedMediaDomains) {
  MediaOptions only_ip;
  only_ip.allowed_media_domains = {"127.0.0.1"};
  for (const char* path : {"/img", "/moved"}) {
    StatusOr<std::string> got = FetchImageBytes(Url(path), only_ip);
    ASSERT_TRUE(got.ok()) << path << " " << got.status().ToString();
    EXPECT_EQ(*got, "\x89PNG-bytes");
  }
  ExpectError(FetchImageBytes(Url("/elsewhere"), only_ip),
              "The URL must be from one of the allowed domains: ['127.0.0.1']. Input URL "
              "domain: localhost");
  MediaOptions other;
  other.allowed_media_domains = {"example.com", "localhost"};
  ExpectError(FetchImageBytes(Url("/img"), other),
              "The URL must be from one of the allowed domains: ['example.com', 'localhost']. "
              "Input URL domain: 127.0.0.1");
  ASSERT_TRUE(FetchImageBytes(Url("/elsewhere"), {}).ok());  // no list: any host
}

TEST_F(HttpFetchTest, ErrorsNameUrlAndCause) {
  ExpectError(FetchImageBytes(Url("/missing"), {}), "fetching " + Url("/missing") + " failed with HTTP status 404");
  ExpectError(FetchImageBytes(Url("/to-file"), {}), "fetching " + Url("/to-file") + " failed");
  MediaOptions small;
  small.max_bytes = 1000;
  ExpectError(FetchImageBytes(Url("/big"), small), "larger than 1000 bytes");
  MediaOptions quick;
  quick.fetch_timeout_s = 1;
  ExpectError(FetchImageBytes(Url("/slow"), quick), "timed out after 1 s");
  // The timeout covers every redirect together (each hop followed by hand under
  // --allowed-media-domains, by libcurl without).
  for (bool domains : {true, false}) {
    MediaOptions hops = quick;
    if (domains) hops.allowed_media_domains = {"127.0.0.1"};
    ExpectError(FetchImageBytes(Url("/hop1"), hops), "timed out");
  }
  // VLLM_MEDIA_URL_ALLOW_REDIRECTS=0: a redirect is a failed fetch.
  for (bool domains : {true, false}) {
    MediaOptions no_redirects;
    no_redirects.follow_redirects = false;
    if (domains) no_redirects.allowed_media_domains = {"127.0.0.1"};
    ExpectError(FetchImageBytes(Url("/moved"), no_redirects), "failed with HTTP status 302");
  }
}

// A port with a bound socket that never listens refuses connections, and nobody else can take it.
TEST(HttpFetch, RefusedConnectionIsClear) {
  ::setenv("no_proxy", "*", 1);
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const std::string url = "http://127.0.0.1:" + std::to_string(ntohs(addr.sin_port)) + "/a.png";
  ExpectError(FetchImageBytes(url, {}), "image_url: fetching " + url + " failed: ");
  ::close(fd);
}

}  // namespace
}  // namespace cpm
