// Fuzz target: PyTorch pipelining's action CSV (`loom sim --schedule FILE`, one row per
// rank: `0F0,1B3,0I2,0W2`), parsed, lowered against configs/examples/uniform-1f1b.toml's
// problem and held to the same checks as a planned schedule.
#include <memory>

#include "app/pytorch_csv.hpp"
#include "app/schedule_import.hpp"
#include "core/schedule_text.hpp"
#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::unique_ptr<loom::Study> study =
      loom::load_study(loom::fuzz::source_path("configs/examples/uniform-1f1b.toml"), {});
  const std::string_view text = loom::fuzz::as_text(data, size);
  if (loom::is_loom_schedule_text(text)) return 0;  // fuzz_schedule_ir's
  return loom::fuzz::run([&] {
    (void)loom::parse_pytorch_csv(text, "fuzz.csv");
    (void)loom::load_schedule_text(*study, text, "fuzz.csv");
  });
}
