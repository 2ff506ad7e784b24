#pragma once
/// Measured training throughput by number of live nodes: what users measure on their own
/// cluster, and what the Oobleck artifact ships for five models (dissertation Table 2.2
/// inputs). Replaying with it replaces simulated iteration times.
///
/// Two file formats:
///   CSV   header `nodes,samples_per_s`, one row per node count.
///   JSON  the artifact's layout {"throughput_samples_per_s": {"<model>": {"<nodes>": v}}}
///         (pick the model with `model`; a file with one model needs none), or a flat
///         object {"<nodes>": v}.
/// A throughput of 0 means "does not run with this many nodes" (e.g. out of memory).
#include <map>
#include <string>

#include "replay/layout.hpp"

namespace loom {

class ThroughputTable {
 public:
  /// Throws InputError naming the file (and line or key) on malformed input, an unknown
  /// model (listing the known ones) or a negative or non-finite throughput.
  static ThroughputTable load(const std::string& path, const std::string& model);
  explicit ThroughputTable(std::map<int, double> samples_per_s, std::string source = "");

  /// Samples/s with `nodes` live nodes: the entry for the largest measured node count <=
  /// nodes (extra nodes beyond the table idle); 0 below the smallest.
  double samples_per_s(int nodes) const;
  int max_nodes() const { return by_nodes_.empty() ? 0 : by_nodes_.rbegin()->first; }
  const std::string& source() const { return source_; }

  /// A timer: global_batch / samples_per_s(layout.nodes()); InfeasibleError where the
  /// table has no positive throughput.
  IterationTimer timer(int global_batch) const;

 private:
  std::map<int, double> by_nodes_;
  std::string source_;
};

}  // namespace loom
