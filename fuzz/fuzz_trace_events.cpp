// Fuzz target: a spot trace in the events format (`time_ms,add|remove,node`), read with
// the default options and again through a time-scaled window with preemption notices.
#include <sstream>

#include "fuzz_support.hpp"
#include "traces/trace_io.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(loom::fuzz::as_text(data, size));
  loom::TraceOptions options;
  options.format = loom::TraceFormat::kEvents;
  loom::fuzz::run([&] {
    std::istringstream in(text);
    (void)loom::read_availability_trace(in, "fuzz.csv", options);
  });
  options.notice_s = 120;
  options.time_scale = 0.5;
  options.start_s = 60;
  options.max_duration_s = 3600;
  return loom::fuzz::run([&] {
    std::istringstream in(text);
    (void)loom::read_availability_trace(in, "fuzz.csv", options);
  });
}
