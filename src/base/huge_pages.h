// Transparent huge pages for the buffers kernels stream: packed weights, recurrent states, the
// KV cache. With 4 KiB pages every 4 KiB of a stream is a TLB miss and a stop for the hardware
// prefetchers (which do not cross pages); on Zen 5, batch-1 gate/up streamed 55 GB/s from
// small pages and 72 from huge ones. Under THP's "madvise" mode (Debian's default) a range
// must be advised before its first write for its pages to be born huge.
#pragma once

#include <cstddef>

namespace cpm {

// What backs a buffer.
enum class Pages { kSmall, kHuge };

inline constexpr size_t kHugePage = size_t{2} << 20;

// Advises [begin, begin + bytes) to be backed by huge pages. Best effort: where the system
// declines (no THP, "never"), the range keeps small pages; only touched pages are committed
// either way, though a touch then commits a whole huge page.
void AdviseHugePages(void* begin, size_t bytes);

}  // namespace cpm
