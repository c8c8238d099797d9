// `cpmserve serve`'s command line as vLLM's argument parser reads it, before CLI11 sees it:
// vLLM's two-letter single-dash aliases (-tp, -pp, -dp), which CLI11 cannot declare, become their long
// names, and long options spelled with underscores (--max_model_len) get dashes, as vLLM's
// FlexibleArgumentParser does. Other subcommands' arguments pass unchanged.
#pragma once

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace cpm {

// vLLM's dotted form of a JSON-valued flag: `--limit-mm-per-prompt.image 2` and
// `--override-generation-config.max_new_tokens=8` build the flag's JSON object key by key
// (each value read as JSON where it parses, else as a string), merged over the flag's whole
// JSON value when that is given too; the flag then appears once, where its first dotted key
// was. Arguments from `first` on are rewritten; those after a bare "--" are left alone.
inline void FoldDottedJsonFlags(std::vector<std::string>* args, size_t first) {
  using Json = nlohmann::ordered_json;
  std::vector<std::string> out;
  std::vector<std::pair<std::string, Json>> folded;  // flag -> its dotted keys, in order
  size_t i = 0;
  for (; i < args->size(); ++i) {
    const std::string& a = (*args)[i];
    if (a == "--") break;
    const std::string name = a.substr(0, a.find('='));
    const size_t dot = name.find('.');
    if (i < first || name.rfind("--", 0) != 0 || dot == std::string::npos) {
      out.push_back(a);
      continue;
    }
    std::string value;
    if (name.size() < a.size()) {
      value = a.substr(name.size() + 1);
    } else if (i + 1 < args->size()) {
      value = (*args)[++i];
    }
    const std::string flag = name.substr(0, dot);
    auto it = std::find_if(folded.begin(), folded.end(), [&](auto& f) { return f.first == flag; });
    if (it == folded.end()) {
      out.push_back(flag);
      out.emplace_back();  // the JSON, written below
      folded.emplace_back(flag, Json::object());
      it = folded.end() - 1;
    }
    Json* node = &it->second;
    std::string path = name.substr(dot + 1);
    for (size_t d; (d = path.find('.')) != std::string::npos; path = path.substr(d + 1)) {
      Json& next = (*node)[path.substr(0, d)];
      if (!next.is_object()) next = Json::object();
      node = &next;
    }
    Json parsed = Json::parse(value, nullptr, false);
    (*node)[path] = parsed.is_discarded() ? Json(value) : std::move(parsed);
  }
  out.insert(out.end(), args->begin() + static_cast<ptrdiff_t>(i), args->end());
  for (auto& [flag, dotted] : folded) {
    Json merged = Json::object();
    std::optional<std::string> not_an_object;  // a whole value that is not JSON: kept, so the
                                               // flag's own check names it
    size_t slot = 0;
    for (size_t k = first; k < out.size();) {
      if (out[k] == "--") break;
      const bool joined = out[k].rfind(flag + "=", 0) == 0;
      if (out[k] == flag && k + 1 < out.size() && !out[k + 1].empty()) {  // a whole value: --flag '{...}'
        Json whole = Json::parse(out[k + 1], nullptr, false);
        if (whole.is_object()) merged.merge_patch(whole);
        else not_an_object = out[k + 1];
        out.erase(out.begin() + static_cast<ptrdiff_t>(k), out.begin() + static_cast<ptrdiff_t>(k + 2));
        continue;
      }
      if (joined) {
        Json whole = Json::parse(out[k].substr(flag.size() + 1), nullptr, false);
        if (whole.is_object()) merged.merge_patch(whole);
        else not_an_object = out[k].substr(flag.size() + 1);
        out.erase(out.begin() + static_cast<ptrdiff_t>(k));
        continue;
      }
      if (out[k] == flag) slot = k + 1;  // the placeholder for the dotted keys
      k += out[k] == flag ? 2 : 1;
    }
    merged.merge_patch(dotted);
    out[slot] = not_an_object ? *not_an_object : merged.dump();
  }
  *args = std::move(out);
}

// vLLM's list-valued flags (argparse nargs="+": --served-model-name, --api-key,
// --allowed-media-domains) given more than once keep only their last occurrence's values, as
// argparse stores each occurrence over the one before (a --config file's list then gives way to
// the command line's). An occurrence is the flag (or `--flag=value`) and the values up to the
// next token that starts with '-'. Arguments from `first` on are rewritten, up to a bare "--".
inline void KeepLastListFlagOccurrences(std::vector<std::string>* args, size_t first) {
  static const char* const kListFlags[] = {"--served-model-name", "--api-key",
                                           "--allowed-media-domains"};
  const auto flag_of = [](const std::string& a) -> const char* {
    for (const char* f : kListFlags) {
      const std::string name(f);
      if (a == name || a.compare(0, name.size() + 1, name + "=") == 0) return f;
    }
    return nullptr;
  };
  size_t end = args->size();
  for (size_t i = first; i < args->size(); ++i) {
    if ((*args)[i] == "--") {
      end = i;
      break;
    }
  }
  // Each occurrence's [begin, end) of tokens, last first.
  std::vector<std::pair<size_t, size_t>> spans;
  for (size_t i = first; i < end; ++i) {
    if (flag_of((*args)[i]) == nullptr) continue;
    size_t j = i + 1;
    if ((*args)[i].find('=') == std::string::npos) {
      while (j < end && ((*args)[j].empty() || (*args)[j][0] != '-')) ++j;
    }
    spans.emplace_back(i, j);
  }
  std::vector<bool> drop(args->size(), false);
  std::vector<const char*> seen;
  for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
    const char* f = flag_of((*args)[it->first]);
    if (std::find(seen.begin(), seen.end(), f) == seen.end()) {
      seen.push_back(f);
      continue;
    }
    for (size_t k = it->first; k < it->second; ++k) drop[k] = true;
  }
  std::vector<std::string> out;
  for (size_t k = 0; k < args->size(); ++k) {
    if (!drop[k]) out.push_back(std::move((*args)[k]));
  }
  *args = std::move(out);
}

// argv as strings (argv[0] included), rewritten only when argv[1] is "serve"; tokens after a
// bare "--" are left alone.
inline std::vector<std::string> TranslateServeArgv(int argc, char** argv) {
  std::vector<std::string> out(argv, argv + argc);
  if (argc < 2 || out[1] != "serve") return out;
  static const std::pair<const char*, const char*> kAliases[] = {
      {"-tp", "--tensor-parallel-size"},
      {"-pp", "--pipeline-parallel-size"},
      {"-dp", "--data-parallel-size"}};
  for (size_t i = 2; i < out.size(); ++i) {
    std::string& a = out[i];
    if (a == "--") break;
    for (const auto& [alias, name] : kAliases) {
      const std::string al(alias);
      if (a == al) {
        a = name;
      } else if (a.compare(0, al.size() + 1, al + "=") == 0) {
        a = name + a.substr(al.size());
      }
    }
    if (a.size() > 2 && a[0] == '-' && a[1] == '-') {
      // The flag's name only: not a value after '=', nor a dotted JSON key (max_new_tokens).
      const size_t end = std::min(a.find('='), a.find('.'));
      for (size_t k = 2; k < std::min(end, a.size()); ++k) {
        if (a[k] == '_') a[k] = '-';
      }
    }
  }
  FoldDottedJsonFlags(&out, 2);
  KeepLastListFlagOccurrences(&out, 2);
  return out;
}

// argparse's abbreviations (vLLM's parser keeps them on): a long option written as a prefix of
// exactly one option's name (`--max-model 128`, `--gpu-memory=0.5`) is that option; a prefix of
// several is argparse's "ambiguous option" error, returned (else ""). `names`: the command's long
// option names, without their dashes. Arguments from `first` on, up to a bare "--".
inline std::string ExpandAbbreviations(std::vector<std::string>* args, size_t first,
                                       const std::vector<std::string>& names) {
  for (size_t i = first; i < args->size(); ++i) {
    std::string& a = (*args)[i];
    if (a == "--") break;
    if (a.size() < 3 || a.compare(0, 2, "--") != 0) continue;
    const size_t eq = a.find('=');
    const std::string name = a.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
    if (std::find(names.begin(), names.end(), name) != names.end()) continue;
    std::vector<std::string> matches;
    for (const std::string& n : names) {
      if (n.compare(0, name.size(), name) == 0) matches.push_back(n);
    }
    if (matches.size() == 1) {
      a = "--" + matches[0] + (eq == std::string::npos ? std::string() : a.substr(eq));
    } else if (matches.size() > 1) {
      std::string list;
      for (const std::string& m : matches) list += (list.empty() ? "--" : ", --") + m;
      return "ambiguous option: --" + name + " could match " + list;
    }
  }
  return "";
}

// argparse's form of a stray argument: "unrecognized arguments: --x 1".
inline std::string UnrecognizedArguments(const std::vector<std::string>& extras) {
  std::string joined;
  for (const std::string& e : extras) joined += (joined.empty() ? "" : " ") + e;
  return "unrecognized arguments: " + joined;
}

}  // namespace cpm
