// Fuzz target: Oobleck's per-layer profile CSV (`loom plan templates --profile`:
// layer,forward_s,backward_s,memory_bytes[,state_bytes,allreduce_in_node_s,
// allreduce_across_nodes_s]).
#include "fuzz_support.hpp"
#include "schedulers/planners/oobleck/oobleck_planner.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = loom::fuzz::write_input(data, size, "layers.csv");
  return loom::fuzz::run([&] { (void)loom::oobleck::load_profile_csv(path); });
}
