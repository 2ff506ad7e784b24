#pragma once
// fccp (Debian libfccp-dev) with a GCC 12 false positive silenced: its error class copies
// the file name with strncpy into a fixed buffer, which -Wstringop-truncation flags when
// inlined into our code.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstringop-truncation"
#include <libfccp/csv.h>
#pragma GCC diagnostic pop
