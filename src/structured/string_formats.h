// JSON Schema "format" for strings, enforced as a pattern (regex.h) when cpmserve knows the
// format: date, time, date-time, duration (RFC 3339 and its appendix A), uuid, ipv4, ipv6,
// email, hostname, uri and uri-reference (RFC 3986), uri-template (RFC 6570), json-pointer
// and relative-json-pointer (RFC 6901) — xgrammar's list. Each accepts a subset of what the
// format's RFC allows that common validators accept too (no leap seconds, upper-case 'T' and
// 'Z', dates that exist, no year 0000, at most 6 fraction digits, IPv6 without an embedded
// IPv4 or a zone, email as dot-atom@hostname with a letters-only top-level label, URIs in
// ASCII with percent-encoding), so generated values pass whichever reads them; hostname and
// email also bound the length (253 and 254 characters). Other formats are annotations, as
// JSON Schema 2020-12 makes every format by default (its format-annotation vocabulary):
// Pydantic's "binary" or "password" do not fail a request.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "structured/regex.h"

namespace cpm::structured {

struct StringFormat {
  std::shared_ptr<const Regex> pattern;
  int64_t max_length = -1;  // characters (hostname 253, email 254), -1: none
};

// A known format's pattern, compiled once on first use; null for the others.
const StringFormat* FindStringFormat(const std::string& format);

}  // namespace cpm::structured
