// PCRE2 wrapper for the tokenizer (see regex.h).
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/regex.h"

#include <pcre2.h>

namespace cpm {

struct Regex::Impl {
  pcre2_code* code = nullptr;
  bool jit = false;
};

StatusOr<std::unique_ptr<Regex>> Regex::Compile(const std::string& pattern) {
  int err = 0;
  PCRE2_SIZE err_offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP, &err, &err_offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof(msg));
    return InvalidArgument("regex '" + pattern + "' at offset " + std::to_string(err_offset) +
                           ": " + reinterpret_cast<const char*>(msg));
  }
  std::unique_ptr<Regex> re(new Regex());
  re->impl_ = new Impl{code, pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0};
  return re;
}

Regex::~Regex() {
  if (impl_ != nullptr) pcre2_code_free(impl_->code);
  delete impl_;
}

void Regex::ForEachMatch(std::string_view text,
                         const std::function<void(size_t, size_t)>& on_match) const {
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(impl_->code, nullptr);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;
  while (pos <= text.size()) {
    const int rc = impl_->jit ? pcre2_jit_match(impl_->code, subject, text.size(), pos,
                                                PCRE2_NO_UTF_CHECK, md, nullptr)
                              : pcre2_match(impl_->code, subject, text.size(), pos,
                                            PCRE2_NO_UTF_CHECK, md, nullptr);
    if (rc < 0) break;  // no match (or a resource limit): the rest stays unmatched
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    size_t begin = ov[0], end = ov[1];
    if (end == begin) {
      // Empty match: tokenizers skip it; advance one code point to avoid looping.
      if (begin >= text.size()) break;
      size_t next = begin + 1;
      while (next < text.size() && (static_cast<uint8_t>(text[next]) & 0xC0) == 0x80) ++next;
      pos = next;
      continue;
    }
    on_match(begin, end);
    pos = end;
  }
  pcre2_match_data_free(md);
}

}  // namespace cpm
