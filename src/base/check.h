// CPM_CHECK: for broken invariants (programmer errors) only; aborts with file, line and message.
// Anything a user or a file can cause returns a Status instead (base/status.h).
#pragma once

#include <cstdio>
#include <cstdlib>

#define CPM_CHECK(cond)                                                              \
  do {                                                                               \
    if (!(cond)) {                                                                   \
      std::fprintf(stderr, "%s:%d: CPM_CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                  \
    }                                                                                \
  } while (0)

#define CPM_CHECK_MSG(cond, msg)                                                           \
  do {                                                                                     \
    if (!(cond)) {                                                                         \
      std::fprintf(stderr, "%s:%d: CPM_CHECK failed: %s (%s)\n", __FILE__, __LINE__, #cond, \
                   msg);                                                                   \
      std::abort();                                                                        \
    }                                                                                      \
  } while (0)

#ifdef NDEBUG
#define CPM_DCHECK(cond) \
  do {                   \
  } while (0)
#else
#define CPM_DCHECK(cond) CPM_CHECK(cond)
#endif
