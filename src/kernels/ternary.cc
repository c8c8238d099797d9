// Ternary weights: detection from the bf16 bits, BitCPM's quantiser (for tiny and dummy
// checkpoints), and the 2-bit packings the AVX2 and AVX-512 matmuls read (matmul_impl.h).
#include "kernels/ternary.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>

#include "base/check.h"
#include "kernels/matmul_impl.h"
#include "tensor/dtype.h"

namespace cpm::kernels {
namespace {

// Detection works on blocks of 32 inputs (the finest grouping tried), coarser groups are runs of
// blocks. A block's magnitude is its one nonzero |value| as bf16 bits, 0 if it has none.
constexpr int64_t kBlock = 32;
constexpr int64_t kCoarseGroups[] = {256, 128, 64};  // tried after per tensor and per row
constexpr uint16_t kSignBit = 0x8000, kNegativeZero = 0x8000;

bool IsFiniteBf16(uint16_t bits) { return (bits & 0x7f80) != 0x7f80; }

// The block's magnitude; false if it has two different ones or a non-finite value. Branch-free
// passes (the compiler vectorises them): a BitCPM4-0.5B load scans 360 M values.
bool BlockMagnitude(const uint16_t* v, int64_t len, uint16_t* mag, bool* negative_zero) {
  uint16_t m = 0;
  for (int64_t i = 0; i < len; ++i) m = std::max<uint16_t>(m, v[i] & ~kSignBit);
  bool one = true, neg_zero = false;
  for (int64_t i = 0; i < len; ++i) {
    const uint16_t a = v[i] & ~kSignBit;
    one &= (a == 0) | (a == m);
    neg_zero |= v[i] == kNegativeZero;
  }
  if (!one || !IsFiniteBf16(m)) return false;
  *negative_zero |= neg_zero;
  *mag = m;
  return true;
}

// Whether, in each of `rows` rows of `blocks` block magnitudes, every run of `per` blocks has at
// most one nonzero magnitude (a block without one agrees with any).
bool Agrees(const std::vector<uint16_t>& mags, int64_t rows, int64_t blocks, int64_t per) {
  for (int64_t r = 0; r < rows; ++r) {
    const uint16_t* row = mags.data() + r * blocks;
    for (int64_t g = 0; g < blocks; g += per) {
      uint16_t m = 0;
      for (int64_t b = g; b < std::min(blocks, g + per); ++b) {
        if (row[b] == 0) continue;
        if (m == 0) m = row[b];
        if (row[b] != m) return false;
      }
    }
  }
  return true;
}

// 0: +0, 1: +s, 2: −s, 3: −0, without branches (packing visits every value).
uint32_t CodeOf(uint16_t v) {
  const uint32_t nonzero = (v & ~kSignBit) != 0, negative = v >> 15;
  return nonzero + negative * (3 - 2 * nonzero);
}

uint16_t ValueOf(uint32_t code, uint16_t scale) {
  switch (code) {
    case 0:
      return 0;
    case 1:
      return scale;
    case 2:
      return scale | kSignBit;
    default:
      return kNegativeZero;
  }
}

// The group's nonzero magnitude (DetectTernary guarantees at most one), 0 if none.
uint16_t GroupScale(const uint16_t* v, int64_t len) {
  for (int64_t i = 0; i < len; ++i) {
    if ((v[i] & ~kSignBit) != 0) return v[i] & ~kSignBit;
  }
  return 0;
}

// Column j of a 16-wide panel as the bf16 panels interleave it: lanes (j, j + 8).
int64_t PanelLane(int64_t j) { return j < 8 ? 2 * j : 2 * (j - 8) + 1; }

// Where weight (row r, input c) keeps its 2-bit code: a bit offset into `data` (codes never
// straddle bytes). kPanel16Ternary: word c of panel r / 16, bits 2j. kPanel32Ternary: word
// 2·(c / 2) + h of panel r / 32, as its bf16 pair lane 2l + e (column 32p + 16h + l, c = 2kk + e).
int64_t CodeBit(const PackedWeight& pw, int64_t r, int64_t c) {
  const int64_t p = r / pw.width, j = r % pw.width;
  const int64_t panel_bits = pw.panel_elems * pw.width * 2;
  if (pw.layout == PackedLayout::kPanel16Ternary) return p * panel_bits + c * 32 + 2 * j;
  const int64_t h = j / 16, l = j % 16;
  return p * panel_bits + ((c / 2) * 2 + h) * 64 + 2 * (2 * l + (c & 1));
}

// Index into `scales` of row r's scale for group g: kPanel16Ternary its lane of the panel's
// group (s), kPanel32Ternary its mask word for input parity e (s | sign).
int64_t ScaleIndex(const PackedWeight& pw, int64_t r, int64_t g, int e) {
  const int64_t p = r / pw.width, j = r % pw.width;
  if (pw.layout == PackedLayout::kPanel16Ternary) {
    return (p * pw.num_groups + g) * 16 + PanelLane(j);
  }
  return ((p * pw.num_groups + g) * 2 + j / 16) * 32 + 2 * (j % 16) + e;
}

}  // namespace

TernaryFormat DetectTernary(const uint16_t* w, int64_t n, int64_t k) {
  TernaryFormat f;
  if (n <= 0 || k <= 0) return f;
  const int64_t blocks = (k + kBlock - 1) / kBlock;
  // Reserved, filled as scanned: a real-valued weight (the 75 M-value embedding included) is
  // rejected at its first block without writing the rest.
  std::vector<uint16_t> mags;
  mags.reserve(n * blocks);
  bool negative_zero = false;
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t c0 = b * kBlock, len = std::min(kBlock, k - c0);
      uint16_t mag = 0;
      if (!BlockMagnitude(w + r * k + c0, len, &mag, &negative_zero)) return f;
      mags.push_back(mag);
    }
  }
  f.negative_zero = negative_zero;
  if (Agrees(mags, n, blocks, blocks)) {
    f.group = k;
    f.per_row = true;
    f.per_tensor = Agrees(mags, 1, n * blocks, n * blocks);
  } else {
    f.group = kBlock;
    for (int64_t g : kCoarseGroups) {
      if (g < k && Agrees(mags, n, blocks, g / kBlock)) {
        f.group = g;
        break;
      }
    }
  }
  return f;
}

std::string DescribeTernary(const TernaryFormat& f) {
  if (!f.ternary()) return "not ternary";
  if (f.per_tensor) return "per-tensor scale";
  if (f.per_row) return "per-row scales";
  return "a scale per " + std::to_string(f.group) + " inputs";
}

void FakeQuantizeTernary(uint16_t* w, int64_t n, int64_t k, int64_t group, bool per_tensor) {
  auto mean_abs = [](const uint16_t* v, int64_t len) {
    double sum = 0;
    for (int64_t i = 0; i < len; ++i) sum += std::fabs(Bf16ToF32(v[i]));
    return len > 0 ? sum / static_cast<double>(len) : 0.0;
  };
  auto quantize = [](uint16_t* v, int64_t len, double mean) {
    const float s = RoundBf16(static_cast<float>(std::max(mean, 1e-8)));
    for (int64_t i = 0; i < len; ++i) {
      // std::round keeps the sign of a small negative value: −0 · s = −0, as torch gives.
      const float t = std::clamp(std::round(Bf16ToF32(v[i]) / s), -1.0f, 1.0f);
      v[i] = F32ToBf16(t * s);
    }
  };
  if (per_tensor) return quantize(w, n * k, mean_abs(w, n * k));
  const int64_t g = std::min(group, k);
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t c0 = 0; c0 < k; c0 += g) {
      uint16_t* v = w + r * k + c0;
      const int64_t len = std::min(g, k - c0);
      quantize(v, len, mean_abs(v, len));
    }
  }
}

std::shared_ptr<const void> PackTernary(const LinearWeight& w, const TernaryFormat& f,
                                        PackedLayout layout) {
  CPM_CHECK(IsTernaryLayout(layout));
  auto pw = std::make_shared<PackedWeight>();
  const int64_t n = w.out_features, k = w.in_features;
  const bool wide = layout == PackedLayout::kPanel32Ternary;
  pw->layout = layout;
  pw->width = wide ? 32 : 16;
  pw->n = n;
  pw->k = k;
  pw->num_panels = (n + pw->width - 1) / pw->width;
  pw->panel_elems = wide ? (k + 1) / 2 * 2 : k;  // codes per column (k, or k in whole pairs)
  pw->ternary = f;
  pw->num_groups = (k + f.group - 1) / f.group;
  pw->data.Resize(static_cast<size_t>(pw->num_panels * pw->panel_elems * pw->width / 4),
                  Pages::kHuge);
  pw->data.Zero();
  pw->scales.Resize(static_cast<size_t>(pw->num_panels * pw->num_groups * pw->width) *
                    (wide ? 4 : 2));
  pw->scales.Zero();
  const uint16_t* src = static_cast<const uint16_t*>(w.data);
  uint8_t* codes = pw->data.as<uint8_t>();
  uint16_t* scales = pw->scales.as<uint16_t>();
  for (int64_t r = 0; r < n; ++r) {
    const uint16_t* row = src + r * k;
    for (int64_t c = 0; c < k; ++c) {
      const int64_t bit = CodeBit(*pw, r, c);
      codes[bit / 8] |= static_cast<uint8_t>(CodeOf(row[c]) << (bit % 8));
    }
    for (int64_t g = 0; g < pw->num_groups; ++g) {
      const int64_t c0 = g * f.group;
      const uint16_t s = GroupScale(row + c0, std::min(f.group, k - c0));
      if (wide) {
        for (int e = 0; e < 2; ++e) scales[ScaleIndex(*pw, r, g, e)] = s | kSignBit;
      } else {
        scales[ScaleIndex(*pw, r, g, 0)] = s;
      }
    }
  }
  pw->panels = std::static_pointer_cast<const PackedWeight>(PackLinear(
      w, wide ? PackedLayout::kPanel32Bf16Pairs : PackedLayout::kPanel16Bf16));
  return pw;
}

std::vector<uint16_t> ExpandTernary(const LinearWeight& w) {
  const PackedWeight* pw = Packed(w);
  if (pw == nullptr || !IsTernaryLayout(pw->layout)) return {};
  const int64_t n = pw->n, k = pw->k, group = pw->ternary.group;
  const uint8_t* codes = pw->data.as<uint8_t>();
  const uint16_t* scales = pw->scales.as<uint16_t>();
  std::vector<uint16_t> out(n * k);
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t c = 0; c < k; ++c) {
      const int64_t bit = CodeBit(*pw, r, c);
      const uint16_t s = scales[ScaleIndex(*pw, r, c / group, c & 1)] & ~kSignBit;
      out[r * k + c] = ValueOf((codes[bit / 8] >> (bit % 8)) & 3, s);
    }
  }
  return out;
}

std::optional<bool> TernaryPackingOverride() {
  static const std::optional<bool> on = []() -> std::optional<bool> {
    const char* v = std::getenv("CPM_TERNARY");
    if (v == nullptr || *v == '\0') return std::nullopt;
    std::string s(v);
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return !(s == "0" || s == "false" || s == "off" || s == "no");
  }();
  return on;
}

TernaryFormat PackedTernaryFormat(const LinearWeight& w) {
  const PackedWeight* pw = Packed(w);
  if (pw == nullptr || !IsTernaryLayout(pw->layout)) return {};
  return pw->ternary;
}

std::string SummarizeTernary(std::span<const LinearWeight* const> ws) {
  int64_t count = 0, packed_bytes = 0, bf16_bytes = 0;
  std::map<std::string, int64_t> formats;
  for (const LinearWeight* w : ws) {
    const PackedWeight* pw = Packed(*w);
    if (pw == nullptr || !IsTernaryLayout(pw->layout)) continue;
    ++count;
    ++formats[DescribeTernary(pw->ternary)];
    packed_bytes += static_cast<int64_t>(pw->data.size() + pw->scales.size());
    bf16_bytes += w->out_features * w->in_features * 2;
  }
  if (count == 0) return "";
  std::string out =
      std::to_string(count) + " of " + std::to_string(ws.size()) + " linear weights ternary (";
  for (const auto& [what, n] : formats) {
    out += (out.back() == '(' ? "" : ", ") + what + ": " + std::to_string(n);
  }
  char sizes[96];
  std::snprintf(sizes, sizeof sizes, "), 2-bit codes + scales %.1f MB instead of %.1f MB of bf16",
                packed_bytes / 1e6, bf16_bytes / 1e6);
  return out + sizes;
}

}  // namespace cpm::kernels
