// Well-formed UTF-8 (RFC 3629), a byte at a time: what a lead byte says of the bytes after it.
// Shared by the matcher's strings and the token table's test for plain text, which must agree.
#pragma once

#include <cstdint>

namespace cpm::structured {

struct Utf8Lead {
  int more = 0;                      // continuation bytes to follow (0 for ASCII)
  uint8_t lo = 0x80, hi = 0xbf;      // the range of the first of them
  bool valid = true;                 // c can start a character
};

// No overlong forms (C0, C1, E0 80-9F, F0 80-8F), surrogates (ED A0-BF) or code points past
// U+10FFFF (F4 90-BF, F5-FF); a continuation byte starts nothing.
inline Utf8Lead LeadByte(uint8_t c) {
  Utf8Lead l;
  if (c < 0x80) return l;
  if (c >= 0xc2 && c <= 0xdf) l.more = 1;
  else if (c >= 0xe0 && c <= 0xef) l.more = 2;
  else if (c >= 0xf0 && c <= 0xf4) l.more = 3;
  else l.valid = false;
  if (c == 0xe0) l.lo = 0xa0;
  if (c == 0xed) l.hi = 0x9f;
  if (c == 0xf0) l.lo = 0x90;
  if (c == 0xf4) l.hi = 0x8f;
  return l;
}

}  // namespace cpm::structured
