// Fuzz target: Chakra execution traces (`loom sim --schedule DIR` on a folder of .et
// files): the bytes are rank 1's trace among the other ranks' of
// configs/examples/uniform-1f1b.toml's 1F1B schedule, decoded (length-prefixed protobuf),
// parsed and held to every check `loom sim` applies. Seeds: that rank's exported trace.
#include <memory>

#include "app/chakra_trace.hpp"
#include "app/schedule_import.hpp"
#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::unique_ptr<loom::Study> study =
      loom::prepare_study(loom::fuzz::source_path("configs/examples/uniform-1f1b.toml"), {});
  static const loom::ChakraTrace exported =
      loom::export_chakra(study->schedule, study->config.model, study->problem.samples);
  loom::ChakraTrace trace = exported;
  trace.ranks[loom::RankId{1}] = std::string(loom::fuzz::as_text(data, size));
  return loom::fuzz::run([&] { (void)loom::load_chakra(*study, trace, "fuzz"); });
}
