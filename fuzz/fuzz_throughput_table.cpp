// Fuzz target: a replay throughput table (`--throughput-table`): JSON when the bytes start
// with '{' (after whitespace), else the `nodes,samples_per_s` CSV. The format follows the
// file name, so the bytes go to throughput.json or throughput.csv.
#include <cctype>

#include "fuzz_support.hpp"
#include "replay/throughput_table.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::size_t first = 0;
  while (first < size && std::isspace(data[first])) ++first;
  const bool json = first < size && data[first] == '{';
  const std::string path =
      loom::fuzz::write_input(data, size, json ? "throughput.json" : "throughput.csv");
  return loom::fuzz::run([&] {
    // "GPT-2" is one of the artifact's models; a flat table ignores the name.
    const loom::ThroughputTable table = loom::ThroughputTable::load(path, json ? "GPT-2" : "");
    for (int nodes : {0, 1, 7, 1 << 20}) (void)table.samples_per_s(nodes);
  });
}
