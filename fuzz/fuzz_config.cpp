// Fuzz target: a config file (TOML) -> the resolved config and its semantic checks, as
// `loom config` reads it up to planning: load_study() parses the TOML, applies overrides,
// checks every key (ranges, units, unknown keys), builds the cost model and the workload
// and runs the plan-size and tensor-parallel checks.
//
// Leading lines `#set KEY=VALUE` are also applied as `--set` overrides (to TOML they are
// comments, so the seeds are plain config files).
#include <string>
#include <vector>

#include "app/study.hpp"
#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text = loom::fuzz::as_text(data, size);
  std::vector<std::string> overrides;
  for (std::size_t at = 0; text.substr(at, 4) == "#set";) {
    const std::size_t end = std::min(text.find('\n', at), text.size());
    overrides.emplace_back(text.substr(at + 4, end - at - 4));
    while (!overrides.back().empty() && overrides.back().front() == ' ')
      overrides.back().erase(0, 1);
    at = end + 1;
    if (at >= text.size()) break;
  }
  const std::string path = loom::fuzz::write_input(data, size, "config.toml");
  return loom::fuzz::run([&] { (void)loom::load_study(path, overrides); });
}
