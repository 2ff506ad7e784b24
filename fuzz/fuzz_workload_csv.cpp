// Fuzz target: a workload CSV (`workload.csv`: sample_id,<modality>_tokens,
// <modality>_resolution, ...), read by load_samples_csv() from a file.
#include "core/workload.hpp"
#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = loom::fuzz::write_input(data, size, "workload.csv");
  return loom::fuzz::run([&] { (void)loom::load_samples_csv(path); });
}
