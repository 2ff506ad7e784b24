#pragma once
/// Resource guards: before building something whose size follows from the input (a
/// schedule, a model's layers, a trace, a profiling tensor), estimate the bytes it takes
/// and refuse it (InfeasibleError, exit 3) past a limit, naming the estimate and the knob,
/// instead of growing to many GB and ending in std::bad_alloc or the OOM killer.
#include <cstdint>
#include <string>

namespace loom {

/// The limit: set_memory_limit's value, else $LOOM_MAX_MEMORY ("8GB"), else half of this
/// machine's physical memory.
double memory_limit_bytes();
/// Overrides the limit (`--max-memory`); `bytes` > 0.
void set_memory_limit(double bytes);

/// Throws InfeasibleError when `bytes` exceeds the limit: "WHAT needs about N GiB (more
/// than the M GiB limit, half this machine's memory); KNOB, or raise --max-memory".
void check_memory_estimate(const std::string& what, double bytes, const std::string& knob);

/// "12.3 GiB"
std::string format_gib(double bytes);

}  // namespace loom
