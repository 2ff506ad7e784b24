// Fuzz target: a spot trace in the counts format (`YYYY-MM-DD, HH:MM:SS, N`, the GCP
// series), read rejecting out-of-order samples and again dropping them, with a window
// and preemption notices.
#include <sstream>

#include "fuzz_support.hpp"
#include "traces/trace_io.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(loom::fuzz::as_text(data, size));
  loom::TraceOptions options;
  options.format = loom::TraceFormat::kCounts;
  loom::fuzz::run([&] {
    std::istringstream in(text);
    (void)loom::read_availability_trace(in, "fuzz.txt", options);
  });
  options.out_of_order = loom::OutOfOrder::kDrop;
  options.notice_s = 30;
  options.start_s = 600;
  options.max_duration_s = 86400;
  return loom::fuzz::run([&] {
    std::istringstream in(text);
    (void)loom::read_availability_trace(in, "fuzz.txt", options);
  });
}
