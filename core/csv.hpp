#pragma once
// fccp (Debian libfccp-dev) with a GCC 12 false positive silenced: its error class copies
// the file name with strncpy into a fixed buffer, which -Wstringop-truncation flags when
// inlined into our code. (Clang has no such warning: the pragma is GCC's only.)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstringop-truncation"
#endif
#include <libfccp/csv.h>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
