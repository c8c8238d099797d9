#include "structured/string_formats.h"

#include <map>

#include "base/check.h"

namespace cpm::structured {
namespace {

// RFC 3339 full-date: a year 0001-9999, days that exist in their month (29 February in leap
// years only: multiples of 4 but not of 100, or of 400).
constexpr char kYear[] = R"((?:[1-9]\d{3}|0[1-9]\d{2}|00[1-9]\d|000[1-9]))";
constexpr char kLeapYear[] =
    R"((?:\d{2}(?:0[48]|[2468][048]|[13579][26])|(?:0[48]|[2468][048]|[13579][26])00))";

std::string Date() {
  return std::string("(?:") + kYear +
         R"(-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12]\d|3[01])|(?:0[469]|11)-(?:0[1-9]|[12]\d|30)|)"
         R"(02-(?:0[1-9]|1\d|2[0-8]))|)" +
         kLeapYear + "-02-29)";
}

// RFC 3339 full-time: hh:mm:ss, an optional fraction, and the offset (Z or ±hh:mm).
constexpr char kTime[] =
    R"((?:[01]\d|2[0-3]):[0-5]\d:[0-5]\d(?:\.\d{1,6})?(?:Z|[+-](?:[01]\d|2[0-3]):[0-5]\d))";

// RFC 3339 appendix A: P and date parts (Y, M, D, each optionally followed by the smaller),
// a T and time parts (H, M, S likewise), or weeks.
constexpr char kDuration[] =
    R"(P(?:(?:\d+D|\d+M(?:\d+D)?|\d+Y(?:\d+M(?:\d+D)?)?))"
    R"((?:T(?:\d+H(?:\d+M(?:\d+S)?)?|\d+M(?:\d+S)?|\d+S))?)"
    R"(|T(?:\d+H(?:\d+M(?:\d+S)?)?|\d+M(?:\d+S)?|\d+S)|\d+W))";

constexpr char kUuid[] =
    R"([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})";

// Dotted decimal without leading zeros.
constexpr char kIpv4[] =
    R"((?:(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d))";

// RFC 4291 text: eight groups, or fewer with one "::" for the zero groups left out.
constexpr char kIpv6[] =
    R"((?:(?:H:){7}H|(?:H:){1,7}:|(?:H:){1,6}:H|(?:H:){1,5}(?::H){1,2}|(?:H:){1,4}(?::H){1,3}|)"
    R"((?:H:){1,3}(?::H){1,4}|(?:H:){1,2}(?::H){1,5}|H:(?::H){1,6}|:(?:(?::H){1,7}|:)))";

// RFC 1123 labels of 1-63 letters, digits and inner hyphens, dot-separated.
constexpr char kLabel[] = R"([A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)";

// RFC 5322 dot-atom local part @ a hostname of two labels or more, the last letters only.
constexpr char kAtom[] = R"([A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)";

// RFC 3986 URI parts (ASCII; percent-encoded octets for the rest).
constexpr char kPct[] = R"(%[0-9A-Fa-f]{2})";
constexpr char kPcharClass[] = R"([A-Za-z0-9\-._~!$&'()*+,;=:@])";

// RFC 3986 URI (`absolute`) or URI-reference: scheme ":" hier-part, or a relative reference
// (a network path, an absolute path, a path whose first segment has no ':', or nothing), each
// with an optional ?query and #fragment. The host of an authority is a bracketed IPv6
// address, an IPv4 address or a registered name.
std::string Uri(bool absolute, const std::string& ipv6) {
  const std::string pct = kPct;
  const std::string pchar = "(?:" + std::string(kPcharClass) + "|" + pct + ")";
  const std::string userinfo = R"((?:(?:[A-Za-z0-9\-._~!$&'()*+,;=:]|)" + pct + ")*@)?";
  const std::string reg_name = R"((?:[A-Za-z0-9\-._~!$&'()*+,;=]|)" + pct + ")*";
  const std::string host = "(?:\\[" + ipv6 + "\\]|" + kIpv4 + "|" + reg_name + ")";
  const std::string authority = userinfo + host + R"((?::\d*)?)";
  const std::string abempty = "(?:/" + pchar + "*)*";
  const std::string absolute_path = "/(?:" + pchar + "+" + abempty + ")?";
  const std::string rootless = pchar + "+" + abempty;
  const std::string noscheme =
      R"((?:[A-Za-z0-9\-._~!$&'()*+,;=@]|)" + pct + ")+" + abempty;
  const std::string tail = "(?:\\?(?:" + pchar + "|[/?])*)?(?:#(?:" + pchar + "|[/?])*)?";
  const std::string hier =
      "(?://" + authority + abempty + "|" + absolute_path + "|" + rootless + ")?";
  const std::string uri = R"([A-Za-z][A-Za-z0-9+\-.]*:)" + hier + tail;
  if (absolute) return uri;
  const std::string relative =
      "(?://" + authority + abempty + "|" + absolute_path + "|" + noscheme + ")?" + tail;
  return "(?:" + uri + "|" + relative + ")";
}

// RFC 6570 URI template: literals (ASCII, or percent-encoded) and {expressions} of an
// optional operator and comma-separated variables, each with a :prefix or * modifier.
std::string UriTemplate() {
  const std::string pct = kPct;
  const std::string varchar = "(?:[A-Za-z0-9_]|" + pct + ")";
  const std::string varname = varchar + "(?:\\.?" + varchar + ")*";
  const std::string varspec = varname + "(?::[1-9]\\d{0,3}|\\*)?";
  const std::string expression = "\\{[+#./;?&=,!@|]?" + varspec + "(?:," + varspec + ")*\\}";
  return R"((?:[!#$&()*+,\-./0-9:;=?@A-Z\[\]_a-z~]|)" + pct + "|" + expression + ")*";
}

// RFC 6901 JSON pointer: "/"-prefixed reference tokens, '~' only as ~0 or ~1.
constexpr char kJsonPointer[] = R"((?:/(?:[^~/]|~[01])*)*)";

std::string Replace(std::string s, const std::string& from, const std::string& to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) {
    s.replace(at, from.size(), to);
  }
  return s;
}

std::map<std::string, StringFormat> Compile() {
  const std::string label = kLabel;
  const std::string ipv6 = Replace(kIpv6, "H", "[0-9a-fA-F]{1,4}");
  const std::map<std::string, std::pair<std::string, int64_t>> sources = {
      {"date", {Date(), -1}},
      {"time", {kTime, -1}},
      {"date-time", {Date() + "T" + kTime, -1}},
      {"duration", {kDuration, -1}},
      {"uuid", {kUuid, -1}},
      {"ipv4", {kIpv4, -1}},
      {"ipv6", {ipv6, -1}},
      {"uri", {Uri(true, ipv6), -1}},
      {"uri-reference", {Uri(false, ipv6), -1}},
      {"uri-template", {UriTemplate(), -1}},
      {"json-pointer", {kJsonPointer, -1}},
      {"relative-json-pointer", {std::string(R"((?:0|[1-9]\d*)(?:#|)") + kJsonPointer + ")", -1}},
      {"hostname", {label + "(?:\\." + label + ")*", 253}},
      {"email",
       {std::string(kAtom) + "(?:\\." + kAtom + ")*@(?:" + label + "\\.)+[A-Za-z]{2,63}", 254}},
  };
  std::map<std::string, StringFormat> formats;
  for (const auto& [name, source] : sources) {
    auto re = Regex::Compile(source.first);
    CPM_CHECK_MSG(re.ok(), re.status().message().c_str());
    formats[name] = {*re, source.second};
  }
  return formats;
}

}  // namespace

const StringFormat* FindStringFormat(const std::string& format) {
  static const std::map<std::string, StringFormat> formats = Compile();
  const auto it = formats.find(format);
  return it == formats.end() ? nullptr : &it->second;
}

}  // namespace cpm::structured
