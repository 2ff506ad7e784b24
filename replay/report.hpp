#pragma once
/// A replay's output files (the contract analysis/replay_plot.py reads):
///   throughput.csv  `time_s,nodes,samples_per_s`: a step function, one row per change and
///                   a last row at the end of the window
///   events.csv      `time_s,event,nodes_alive,action,cost_s,detail` (detail quoted when it
///                   holds a comma or a quote)
///   summary.json    {"policy","trace","duration_s","average_throughput_samples_per_s",
///                   "samples_committed","iterations","global_batch","time_s":{"training",
///                   "restart","checkpoint","reconfiguration","lost_work","idle"}, ...}
///                   where the time_s parts add up to duration_s.
/// Numbers are printed with fixed rules, so equal results give byte-identical files.
#include <nlohmann/json.hpp>
#include <string>

#include "replay/driver.hpp"

namespace loom {

nlohmann::json replay_summary(const ReplayResult& result);

/// Writes the three files into `dir` (which must exist). Throws on a failed write.
void write_replay_outputs(const ReplayResult& result, const std::string& dir);

}  // namespace loom
