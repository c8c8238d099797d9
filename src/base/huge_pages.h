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

// A fresh zero-filled anonymous mapping of `bytes` rounded up to whole huge pages (that size in
// *mapped_bytes), starting on a huge-page boundary and advised before any page is touched;
// nullptr if the mapping fails. Fresh, because advice does not change pages already faulted:
// memory from malloc is often a freed block of the heap whose pages are small already (a model
// loader frees each weight's source after packing it): ~400 MB of a MiniCPM-V-4.6 process's
// 1.5 GB of packed weights were on small pages before. Release with UnmapPages.
void* MapHugePages(size_t bytes, size_t* mapped_bytes);
void UnmapPages(void* begin, size_t mapped_bytes);

// Gives back the whole pages inside [begin, begin + bytes) of a file mapping whose bytes were
// copied elsewhere (MADV_DONTNEED: they leave this process; the page cache keeps them). The
// partial pages at either end may hold other tensors and stay.
void ReleaseWholePages(const void* begin, size_t bytes);

}  // namespace cpm
