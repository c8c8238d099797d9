// The hub cache layout and model resolution, against a fake hub on loopback that answers the
// two requests huggingface_hub makes (the listing, and /resolve/ with a redirect to a "CDN" on
// another host name for the weights).
#include <gtest/gtest.h>
#include <httplib.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "base/log.h"
#include "hub/hf_cache.h"
#include "hub/model_source.h"

namespace cpm::hub {
namespace {

namespace fs = std::filesystem;

const std::string kCommit = "0123456789abcdef0123456789abcdef01234567";

std::string ReadAll(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

fs::path FreshDir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("cpm_hub_test_" + name + "_" +
                                                    std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// Sets an environment variable for one scope (and restores what was there).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) ::setenv(name, value, 1); else ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_) ::setenv(name_, old_->c_str(), 1); else ::unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// A hub with one public repository "org/tiny" and one gated one, "org/gated". Files under
// /resolve/ need the token; the weights redirect to the same server under the name
// "localhost" (another host to libcurl), which must see no token.
class FakeHub {
 public:
  std::map<std::string, std::string> files = {
      {"config.json", R"({"architectures": ["MiniCPMForCausalLM"]})"},
      {"tokenizer_config.json", "{}"},
      {"chat_template.jinja", "{{ messages }}"},
      {"README.md", "# a model card"},
      {"original/consolidated.bin", "pickle"},
      {"model.safetensors", "merged weights"},
      {"model-00001-of-00002.safetensors", "shard one"},
      {"model-00002-of-00002.safetensors", "shard two"},
      {"model.safetensors.index.json",
       R"({"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}})"},
  };
  std::vector<std::string> requested;
  std::vector<std::string> ranged;  // Range headers the CDN saw
  bool token_reached_cdn = false;
  std::string failing_file;  // answers 500 for this one
  std::string cut_file;      // its first answer stops halfway, without a Content-Length
  int delay_ms = 0;          // before each file's answer
  // The server answers on its own threads: every field above is read and written under `mu`,
  // the test's side through Locked (ThreadSanitizer cannot see the order the sockets give).
  std::mutex mu;

  template <typename F>
  auto Locked(F&& f) {
    std::lock_guard<std::mutex> lock(mu);
    return f();
  }

  FakeHub() {
    server_.Get(R"(/api/models/org/(\w+)/revision/(.+))", [this](const auto& req, auto& res) {
      std::lock_guard<std::mutex> lock(mu);
      if (req.get_header_value("Authorization") == "Bearer revoked") {
        res.status = 401;
        res.set_header("X-Error-Message", "Invalid credentials in Authorization header");
        return;
      }
      if (req.matches[1] == "gated") return Error(res, 403, "GatedRepo");
      if (req.matches[1] == "tok") {  // a tokenizer-only repository
        nlohmann::json j = {{"sha", kCommit}, {"siblings", {{{"rfilename", "tokenizer_config.json"}}}}};
        return res.set_content(j.dump(), "application/json");
      }
      if (req.matches[1] != "tiny") return Error(res, 401, "RepoNotFound");
      if (req.matches[2] != "main" && req.matches[2] != kCommit) {
        return Error(res, 404, "RevisionNotFound");
      }
      nlohmann::json j = {{"id", "org/tiny"}, {"sha", kCommit}, {"siblings", nlohmann::json::array()}};
      for (const auto& [name, body] : files) {
        j["siblings"].push_back({{"rfilename", name}, {"size", body.size()}});
      }
      res.set_content(j.dump(), "application/json");
    });
    server_.Get(R"(/org/tok/resolve/(\w+)/(.+))", [](const auto&, auto& res) {
      res.set_content("{}", "application/json");
    });
    server_.Get(R"(/org/tiny/resolve/(\w+)/(.+))", [this](const auto& req, auto& res) {
      const std::string file = req.matches[2];
      std::this_thread::sleep_for(std::chrono::milliseconds(Locked([&] { return delay_ms; })));
      std::lock_guard<std::mutex> lock(mu);
      requested.push_back(file);
      if (req.get_header_value("Authorization") != "Bearer secret") return Error(res, 401, "");
      if (file == failing_file) return Error(res, 500, "");
      if (req.matches[1] != kCommit || !files.count(file)) return Error(res, 404, "EntryNotFound");
      if (file.find(".safetensors") != std::string::npos && file.find("index") == std::string::npos) {
        res.set_redirect("http://localhost:" + std::to_string(port_) + "/cdn/" + file);
        return;
      }
      res.set_content(files[file], "application/octet-stream");
    });
    server_.Get(R"(/cdn/(.+))", [this](const auto& req, auto& res) {
      std::lock_guard<std::mutex> lock(mu);
      if (req.has_header("Authorization")) token_reached_cdn = true;
      const std::string file = req.matches[1];
      const std::string body = files[file];
      if (file == cut_file && !req.has_header("Range")) {
        // Half of it, chunked (no Content-Length), then the connection drops.
        res.set_chunked_content_provider("application/octet-stream",
                                         [body](size_t offset, httplib::DataSink& sink) {
                                           if (offset > 0) return false;
                                           sink.write(body.data(), body.size() / 2);
                                           return true;
                                         });
        return;
      }
      if (req.has_header("Range")) ranged.push_back(req.get_header_value("Range"));
      res.set_content(body, "application/octet-stream");  // httplib answers a Range with 206
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::yield();
  }
  ~FakeHub() {
    server_.stop();
    thread_.join();
  }
  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }

 private:
  static void Error(httplib::Response& res, int status, const std::string& code) {
    res.status = status;
    if (!code.empty()) res.set_header("X-Error-Code", code);
  }

  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
};

HubOptions Options(const fs::path& cache) {
  HubOptions o;
  o.download_dir = cache.string();
  o.token = "secret";
  o.retry_wait_ms = 0;
  return o;
}

TEST(HubCache, RepoIdsAsHuggingfaceHubValidatesThem) {
  for (const char* id : {"openbmb/MiniCPM4-0.5B", "gpt2", "a_b/c.d", "org/x_"}) {
    EXPECT_TRUE(IsRepoId(id)) << id;
  }
  for (const char* id : {"", "/abs/path", "./x", "a/b/c", "a--b/c", "a/b..c", "-a/b", "a/b-",
                         "a/", "org/.hidden", "a b/c"}) {
    EXPECT_FALSE(IsRepoId(id)) << id;
  }
  EXPECT_TRUE(IsRepoId("org/" + std::string(96, 'x')));
  EXPECT_FALSE(IsRepoId("org/" + std::string(97, 'x')));
}

TEST(HubCache, FoldersAndCommits) {
  EXPECT_EQ(RepoFolder("/c", "openbmb/MiniCPM4-0.5B"), fs::path("/c/models--openbmb--MiniCPM4-0.5B"));
  EXPECT_TRUE(IsCommitHash(kCommit));
  EXPECT_FALSE(IsCommitHash("main"));
  EXPECT_FALSE(IsCommitHash(kCommit.substr(1)));
  const fs::path repo = FreshDir("refs") / "models--o--n";
  EXPECT_EQ(CachedCommit(repo, "main"), std::nullopt);
  EXPECT_EQ(CachedCommit(repo, kCommit), kCommit);  // a commit names its snapshot itself
  ASSERT_TRUE(WriteRef(repo, "refs/pr/1", kCommit).ok());
  EXPECT_EQ(CachedCommit(repo, "refs/pr/1"), kCommit);
}

TEST(HubCache, CacheFolderFromTheEnvironmentAsHuggingfaceHub) {
  ScopedEnv a("HF_HUB_CACHE", nullptr), b("HUGGINGFACE_HUB_CACHE", nullptr),
      c("HF_HOME", nullptr), d("XDG_CACHE_HOME", nullptr), e("HOME", "/home/u");
  EXPECT_EQ(DefaultCacheDir(), fs::path("/home/u/.cache/huggingface/hub"));
  ScopedEnv xdg("XDG_CACHE_HOME", "/x");
  EXPECT_EQ(DefaultCacheDir(), fs::path("/x/huggingface/hub"));
  ScopedEnv home("HF_HOME", "~/hf");
  EXPECT_EQ(DefaultCacheDir(), fs::path("/home/u/hf/hub"));
  ScopedEnv legacy("HUGGINGFACE_HUB_CACHE", "/legacy");
  EXPECT_EQ(DefaultCacheDir(), fs::path("/legacy"));
  ScopedEnv cache("HF_HUB_CACHE", "/cache");
  EXPECT_EQ(DefaultCacheDir(), fs::path("/cache"));
}

TEST(ModelSource, FilesCpmserveReadsOnly) {
  const std::vector<std::string> repo = {"README.md", "model.safetensors", "config.json",
                                         "original/params.json", "tokenizer.model", "merges.txt",
                                         "chat_template.jinja", "pytorch_model.bin", "logo.png"};
  EXPECT_EQ(FilesToDownload(repo, true),
            (std::vector<std::string>{"config.json", "tokenizer.model", "merges.txt",
                                      "chat_template.jinja", "model.safetensors"}));
  EXPECT_EQ(FilesToDownload(repo, false),
            (std::vector<std::string>{"config.json", "tokenizer.model", "merges.txt",
                                      "chat_template.jinja"}));
}

TEST(ModelSource, ALocalFolderIsUsedAsItIs) {
  const fs::path dir = FreshDir("local");
  auto r = ResolveModelFolder(dir.string(), HubOptions());
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(*r, dir.string());
  // No repository id either: the loader reports the config.json it cannot read.
  r = ResolveModelFolder("./no/such/folder", HubOptions());
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, "./no/such/folder");
}

TEST(ModelSource, DownloadsTheSnapshotThenServesItFromTheCache) {
  FakeHub hub;
  ScopedEnv endpoint("HF_ENDPOINT", hub.endpoint().c_str()), offline("HF_HUB_OFFLINE", nullptr);
  const fs::path cache = FreshDir("download");
  auto r = ResolveModelFolder("org/tiny", Options(cache));
  ASSERT_TRUE(r.ok()) << r.status().message();
  const fs::path snapshot = cache / "models--org--tiny" / "snapshots" / kCommit;
  EXPECT_EQ(*r, snapshot.string());
  EXPECT_EQ(ReadAll(snapshot / "config.json"),
            hub.Locked([&] { return hub.files["config.json"]; }));
  EXPECT_EQ(ReadAll(snapshot / "model-00002-of-00002.safetensors"), "shard two");
  EXPECT_FALSE(fs::exists(snapshot / "model.safetensors"));  // not in the index: a duplicate
  EXPECT_FALSE(fs::exists(snapshot / "README.md"));
  EXPECT_FALSE(fs::exists(snapshot / "original"));
  EXPECT_EQ(ReadAll(cache / "models--org--tiny" / "refs" / "main"), kCommit);
  EXPECT_FALSE(hub.Locked([&] { return hub.token_reached_cdn; }));

  // Everything is cached now: a second resolution downloads nothing and writes nothing (no
  // lock, the ref as it is: a read-only cache serves), and with the hub gone (or
  // HF_HUB_OFFLINE) the cache alone serves the same folder.
  hub.Locked([&] { hub.requested.clear(); });
  fs::remove_all(cache / ".locks");
  const auto ref_time = fs::last_write_time(cache / "models--org--tiny" / "refs" / "main");
  r = ResolveModelFolder("org/tiny", Options(cache));
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(hub.Locked([&] { return hub.requested.empty(); }));
  EXPECT_FALSE(fs::exists(cache / ".locks"));
  EXPECT_EQ(fs::last_write_time(cache / "models--org--tiny" / "refs" / "main"), ref_time);
  {
    ScopedEnv gone("HF_ENDPOINT", "http://127.0.0.1:1");
    r = ResolveModelFolder("org/tiny", Options(cache));
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_EQ(*r, snapshot.string());
  }
  ScopedEnv off("HF_HUB_OFFLINE", "1");
  r = ResolveModelFolder("org/tiny", Options(cache));
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(*r, snapshot.string());
}

TEST(ModelSource, DummyWeightsFetchNoWeights) {
  FakeHub hub;
  ScopedEnv endpoint("HF_ENDPOINT", hub.endpoint().c_str()), offline("HF_HUB_OFFLINE", nullptr);
  const fs::path cache = FreshDir("dummy");
  HubOptions o = Options(cache);
  o.need_weights = false;
  auto r = ResolveModelFolder("org/tiny", o);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_TRUE(fs::exists(fs::path(*r) / "config.json"));
  for (const std::string& f : hub.Locked([&] { return hub.requested; })) {
    EXPECT_FALSE(f.size() > 12 && f.substr(f.size() - 12) == ".safetensors") << f;
  }
  EXPECT_FALSE(fs::exists(fs::path(*r) / "model-00001-of-00002.safetensors"));
  // The cached snapshot has no weights: enough offline for dummy weights, not for real ones.
  ScopedEnv off("HF_HUB_OFFLINE", "1");
  EXPECT_TRUE(ResolveModelFolder("org/tiny", o).ok());
  o.need_weights = true;
  r = ResolveModelFolder("org/tiny", o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("no *.safetensors weights"), std::string::npos);
}

TEST(ModelSource, HubErrorsAsHuggingfaceHubExplainsThem) {
  FakeHub hub;
  ScopedEnv endpoint("HF_ENDPOINT", hub.endpoint().c_str()), offline("HF_HUB_OFFLINE", nullptr);
  const fs::path cache = FreshDir("errors");
  auto r = ResolveModelFolder("org/missing", Options(cache));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("Repository Not Found"), std::string::npos);
  r = ResolveModelFolder("org/gated", Options(cache));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("Cannot access gated repo"), std::string::npos);
  HubOptions o = Options(cache);
  o.revision = "v9";
  r = ResolveModelFolder("org/tiny", o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("Revision Not Found"), std::string::npos);
  o = Options(cache);
  o.token = "wrong";
  r = ResolveModelFolder("org/tiny", o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("Repository Not Found"), std::string::npos);
}

TEST(ModelSource, AFailedDownloadLeavesNoFileThatLooksWhole) {
  FakeHub hub;
  const std::string failing = "model-00002-of-00002.safetensors";
  hub.Locked([&] { hub.failing_file = failing; });
  ScopedEnv endpoint("HF_ENDPOINT", hub.endpoint().c_str()), offline("HF_HUB_OFFLINE", nullptr);
  const fs::path cache = FreshDir("failed");
  auto r = ResolveModelFolder("org/tiny", Options(cache));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("HTTP 500"), std::string::npos) << r.status().message();
  const fs::path snapshot = cache / "models--org--tiny" / "snapshots" / kCommit;
  EXPECT_FALSE(fs::exists(snapshot / failing));
  EXPECT_FALSE(fs::exists(snapshot / (failing + ".incomplete")));
  EXPECT_FALSE(fs::exists(cache / "models--org--tiny" / "refs" / "main"));  // not complete
  // The next try fetches only what is missing.
  hub.Locked([&] {
    hub.failing_file.clear();
    hub.requested.clear();
  });
  r = ResolveModelFolder("org/tiny", Options(cache));
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(hub.Locked([&] { return hub.requested; }),
            std::vector<std::string>{"model-00002-of-00002.safetensors"});
}

// A transfer cut short (no Content-Length: only the listing's size shows it) is resumed with a
// range request, as huggingface_hub's, and the file is whole.
TEST(ModelSource, ACutDownloadIsResumed) {
  FakeHub hub;
  const std::string cut = "model-00001-of-00002.safetensors";
  hub.Locked([&] {
    hub.files[cut] = std::string(1000, 'w');
    hub.cut_file = cut;
  });
  ScopedEnv endpoint("HF_ENDPOINT", hub.endpoint().c_str()), offline("HF_HUB_OFFLINE", nullptr);
  const fs::path cache = FreshDir("cut");
  auto r = ResolveModelFolder("org/tiny", Options(cache));
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(ReadAll(fs::path(*r) / cut), std::string(1000, 'w'));
  EXPECT_EQ(hub.Locked([&] { return hub.ranged; }), std::vector<std::string>{"bytes=500-"});
}

// Processes starting together on one cache: one downloads, the other waits for its lock and
// finds the files there (each fetched once, none read half-written).
TEST(ModelSource, ConcurrentStartsDownloadOnce) {
  // The logger made before the two threads log, as serve makes it first thing (the first log
  // call creates spdlog's registry, a static ThreadSanitizer cannot see guarded in libspdlog).
  InitLogging();
  FakeHub hub;
  hub.Locked([&] { hub.delay_ms = 50; });
  ScopedEnv endpoint("HF_ENDPOINT", hub.endpoint().c_str()), offline("HF_HUB_OFFLINE", nullptr);
  const fs::path cache = FreshDir("concurrent");
  StatusOr<std::string> a = Status(), b = Status();
  std::thread first([&] { a = ResolveModelFolder("org/tiny", Options(cache)); });
  std::thread second([&] { b = ResolveModelFolder("org/tiny", Options(cache)); });
  first.join();
  second.join();
  ASSERT_TRUE(a.ok()) << a.status().message();
  ASSERT_TRUE(b.ok()) << b.status().message();
  EXPECT_EQ(ReadAll(fs::path(*b) / "model-00002-of-00002.safetensors"), "shard two");
  std::map<std::string, int> times;
  for (const std::string& f : hub.Locked([&] { return hub.requested; })) ++times[f];
  for (const auto& [f, n] : times) EXPECT_EQ(n, 1) << f;
}

// A listing the hub refuses (an expired token) still serves a cached revision, with a warning;
// without one, huggingface_hub's explanation.
TEST(ModelSource, ARefusedListingFallsBackToTheCache) {
  FakeHub hub;
  ScopedEnv endpoint("HF_ENDPOINT", hub.endpoint().c_str()), offline("HF_HUB_OFFLINE", nullptr);
  const fs::path cache = FreshDir("refused");
  HubOptions o = Options(cache);
  o.token = "revoked";
  auto r = ResolveModelFolder("org/tiny", o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("Invalid credentials in Authorization header"),
            std::string::npos)
      << r.status().message();
  ASSERT_TRUE(ResolveModelFolder("org/tiny", Options(cache)).ok());
  r = ResolveModelFolder("org/tiny", o);
  ASSERT_TRUE(r.ok()) << r.status().message();
}

// huggingface_hub's older token variable, and a tokenizer repository without config.json.
TEST(ModelSource, TokenVariablesAndTokenizerRepositories) {
  FakeHub hub;
  ScopedEnv endpoint("HF_ENDPOINT", hub.endpoint().c_str()), offline("HF_HUB_OFFLINE", nullptr),
      hf_token("HF_TOKEN", nullptr), old_token("HUGGING_FACE_HUB_TOKEN", "secret"),
      token_path("HF_TOKEN_PATH", "/nonexistent/token");
  const fs::path cache = FreshDir("tokens");
  HubOptions o = Options(cache);
  o.token.clear();
  auto r = ResolveModelFolder("org/tiny", o);
  ASSERT_TRUE(r.ok()) << r.status().message();  // /resolve/ needs the token
  o.need_weights = false;
  r = ResolveModelFolder("org/tok", o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("no config.json"), std::string::npos) << r.status().message();
  o.need_config = false;
  r = ResolveModelFolder("org/tok", o);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_TRUE(fs::exists(fs::path(*r) / "tokenizer_config.json"));
}

TEST(HubCache, PathsExpandAsOsPath) {
  ScopedEnv home("HOME", "/home/u"), var("CPM_HUB_TEST_DIR", "/data");
  EXPECT_EQ(ExpandPath("$CPM_HUB_TEST_DIR/hf"), fs::path("/data/hf"));
  EXPECT_EQ(ExpandPath("${CPM_HUB_TEST_DIR}/hf"), fs::path("/data/hf"));
  EXPECT_EQ(ExpandPath("~/hf"), fs::path("/home/u/hf"));
  EXPECT_EQ(ExpandPath("$CPM_HUB_UNSET_VAR/x"), fs::path("$CPM_HUB_UNSET_VAR/x"));
}

TEST(ModelSource, OfflineWithoutTheModelSaysWhereItLooked) {
  ScopedEnv off("HF_HUB_OFFLINE", "1");
  const fs::path cache = FreshDir("offline");
  auto r = ResolveModelFolder("org/absent", Options(cache));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find(cache.string()), std::string::npos);
  EXPECT_NE(r.status().message().find("HF_HUB_OFFLINE"), std::string::npos);
}

}  // namespace
}  // namespace cpm::hub
