// `cpmserve serve --config FILE.yaml`, as vLLM's FlexibleArgumentParser reads it: each top-level
// `key: value` of the YAML file becomes a flag (`true`: --key; `false`: --no-key; a list: --key
// and its items; a mapping: --key and its JSON; null: nothing; anything else: --key value),
// placed right after `serve` (and its positional model) so that the command line's own flags,
// coming later, win.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

#include "base/status.h"

namespace cpm {
namespace serve_config_file {

// A YAML scalar as Python's yaml.safe_load types it (YAML 1.1: yes/no/on/off are booleans).
inline nlohmann::ordered_json Scalar(const YAML::Node& n) {
  const std::string& s = n.Scalar();
  if (n.Tag() == "!") return s;  // quoted: a string whatever it looks like
  if (s.empty() || s == "~" || s == "null" || s == "Null" || s == "NULL") return nullptr;
  bool b = false;
  if (YAML::convert<bool>::decode(n, b)) return b;
  const nlohmann::ordered_json number = nlohmann::ordered_json::parse(s, nullptr, false);
  if (number.is_number()) return number;
  return s;
}

inline nlohmann::ordered_json ToJson(const YAML::Node& n) {
  if (n.IsMap()) {
    nlohmann::ordered_json o = nlohmann::ordered_json::object();
    for (const auto& kv : n) o[kv.first.as<std::string>()] = ToJson(kv.second);
    return o;
  }
  if (n.IsSequence()) {
    nlohmann::ordered_json a = nlohmann::ordered_json::array();
    for (const auto& item : n) a.push_back(ToJson(item));
    return a;
  }
  if (n.IsScalar()) return Scalar(n);
  return nullptr;
}

// The text of a value as Python's str() would pass it on the command line.
inline std::string ArgText(const nlohmann::ordered_json& v) {
  return v.is_string() ? v.get<std::string>() : v.dump();
}

}  // namespace serve_config_file

// Replaces `--config FILE` (or --config=FILE) in a `serve` command line with the file's flags;
// errors name the file.
inline StatusOr<std::vector<std::string>> ExpandServeConfigFile(std::vector<std::string> args) {
  using nlohmann::ordered_json;
  if (args.size() < 2 || args[1] != "serve") return args;
  std::string path;
  for (size_t i = 2; i < args.size() && args[i] != "--"; ++i) {
    if (args[i] == "--config" && i + 1 < args.size()) {
      path = args[i + 1];
      args.erase(args.begin() + static_cast<ptrdiff_t>(i), args.begin() + static_cast<ptrdiff_t>(i + 2));
      break;
    }
    if (args[i].rfind("--config=", 0) == 0) {
      path = args[i].substr(9);
      args.erase(args.begin() + static_cast<ptrdiff_t>(i));
      break;
    }
  }
  if (path.empty()) return args;
  const auto ends_with = [&](const char* ext) {
    const std::string e(ext);
    return path.size() >= e.size() && path.compare(path.size() - e.size(), e.size(), e) == 0;
  };
  if (!ends_with(".yaml") && !ends_with(".yml")) {
    return InvalidArgument("--config: " + path + ": the config file must be a .yaml or .yml file");
  }
  if (FILE* f = std::fopen(path.c_str(), "r")) {
    std::fclose(f);
  } else {
    return InvalidArgument("--config: " + path + ": cannot read the file");
  }
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::Exception& e) {
    return InvalidArgument("--config: " + path + ": " + e.what());
  }
  if (!root.IsMap()) {
    return InvalidArgument("--config: " + path + ": expected a mapping of flag names to values");
  }
  std::vector<std::string> flags;
  for (const auto& kv : root) {
    const std::string key = kv.first.as<std::string>();
    const ordered_json value = serve_config_file::ToJson(kv.second);
    if (value.is_null()) continue;
    if (value.is_boolean()) {
      flags.push_back((value.get<bool>() ? "--" : "--no-") + key);
    } else if (value.is_array()) {
      if (value.empty()) continue;
      flags.push_back("--" + key);
      for (const ordered_json& item : value) flags.push_back(serve_config_file::ArgText(item));
    } else {
      flags.push_back("--" + key);
      flags.push_back(serve_config_file::ArgText(value));
    }
  }
  // After `serve` and a positional model: the command line's later flags override the file's.
  const size_t at = args.size() > 2 && args[2].rfind("-", 0) != 0 ? 3 : 2;
  args.insert(args.begin() + static_cast<ptrdiff_t>(std::min(at, args.size())), flags.begin(),
              flags.end());
  return args;
}

}  // namespace cpm
