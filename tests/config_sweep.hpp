#pragma once
// Every shipped config x every registered scheduler, planned in-process: the sweep behind
// the IR round-trip property test and the golden outputs (tests/golden/).
#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "app/study.hpp"
#include "core/errors.hpp"
#include "test_support.hpp"

namespace loom::test {

/// Configs of the given folders of configs/ as "examples/uniform-1f1b" (relative to
/// configs/, without .toml), sorted. configs/bench (thousands of ranks) is for benchmarks.
inline std::vector<std::string> shipped_configs(std::initializer_list<const char*> dirs = {
                                                    "examples", "paper"}) {
  std::vector<std::string> out;
  for (const char* dir : dirs) {
    for (const auto& e : std::filesystem::directory_iterator(source_path("configs/") + dir)) {
      if (e.path().extension() == ".toml")
        out.push_back(std::string(dir) + "/" + e.path().stem().string());
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

/// Configs whose sweep over every scheduler takes 4-17 s (dataset workloads of thousands of
/// samples, planned by each): the sweeps skip them unless LOOM_SLOW_TESTS is set, keeping
/// one of each family (entrain-chartqa-llama3-3b, oobleck-gpt3-1.3b) in the suite.
/// scripts/refresh_golden.sh sets it, so every scheduler x config has its golden file.
inline bool skip_slow(const std::string& config) {
  static const std::set<std::string> kSlow = {"paper/entrain-chartqa-llama3-1b",
                                              "paper/entrain-cocoqa-llama3-1b",
                                              "paper/entrain-cocoqa-llama3-3b",
                                              "paper/entrain-llava-150k-llama3-1b",
                                              "paper/entrain-llava-150k-llama3-3b",
                                              "paper/entrain-synthchartnet-llama3-1b",
                                              "paper/entrain-synthchartnet-llama3-3b",
                                              "paper/oobleck-gpt3-350m",
                                              "paper/oobleck-gpt3-2.7b",
                                              "paper/oobleck-gpt3-6.7b"};
  return kSlow.count(config) > 0 && std::getenv("LOOM_SLOW_TESTS") == nullptr;
}

/// A name gtest accepts for a config ("examples_uniform_1f1b").
inline std::string test_name(std::string config) {
  for (char& c : config) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return config;
}

/// The outcome of planning one config with one scheduler.
struct Planned {
  std::unique_ptr<Study> study;  ///< null when rejected
  std::string rejected;          ///< "input" (exit 2) or "infeasible" (exit 3) when rejected
};

inline Planned plan(const std::string& config, const std::string& scheduler) {
  Planned p;
  try {
    p.study =
        prepare_study(source_path("configs/" + config + ".toml"), {"schedule.name=" + scheduler});
  } catch (const InputError&) {
    p.rejected = "input";
  } catch (const InfeasibleError&) {
    p.rejected = "infeasible";
  }
  return p;
}

}  // namespace loom::test
