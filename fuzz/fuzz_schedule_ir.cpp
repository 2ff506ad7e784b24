// Fuzz target: the Schedule IR text (`loom sim --schedule FILE` in the `loom` format),
// parsed and then held to every check `loom sim` applies (the config's modules, GPU
// placement, a dependency-only run, validate(), memory) against
// configs/examples/uniform-1f1b.toml. Inputs without the `loom-schedule 1` header would be
// read as PyTorch's CSV: fuzz_pytorch_csv covers those.
#include <memory>

#include "app/schedule_import.hpp"
#include "core/schedule_text.hpp"
#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::unique_ptr<loom::Study> study =
      loom::load_study(loom::fuzz::source_path("configs/examples/uniform-1f1b.toml"), {});
  const std::string_view text = loom::fuzz::as_text(data, size);
  if (!loom::is_loom_schedule_text(text)) return 0;
  return loom::fuzz::run([&] { (void)loom::load_schedule_text(*study, text, "fuzz.txt"); });
}
