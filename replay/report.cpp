#include "replay/report.hpp"

#include <cstdio>
#include <filesystem>

#include "core/io.hpp"

namespace loom {
namespace {

std::string num(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.10g", v);
  return buf;
}

std::string csv_field(const std::string& text) {
  if (text.find_first_of(",\"\n") == std::string::npos) return text;
  std::string out = "\"";
  for (char c : text) out += c == '"' ? std::string("\"\"") : std::string(1, c == '\n' ? ' ' : c);
  return out + "\"";
}

}  // namespace

nlohmann::json replay_summary(const ReplayResult& r) {
  nlohmann::json parts = nlohmann::json::object();
  for (TimeUse use : {TimeUse::kTraining, TimeUse::kRestart, TimeUse::kCheckpoint,
                      TimeUse::kReconfiguration, TimeUse::kLostWork, TimeUse::kIdle})
    parts[to_string(use)] = r.time_in(use);
  nlohmann::json j = {{"policy", r.policy},
                      {"trace", r.trace},
                      {"duration_s", r.duration_s},
                      {"average_throughput_samples_per_s", r.average_throughput()},
                      {"samples_committed", r.samples_committed},
                      {"iterations", r.iterations},
                      {"global_batch", r.global_batch},
                      {"time_s", parts}};
  if (!r.stop_reason.empty())
    j["stopped"] = {{"time_s", r.stopped_at_s}, {"reason", r.stop_reason}};
  return j;
}

void write_replay_outputs(const ReplayResult& r, const std::string& dir) {
  namespace fs = std::filesystem;
  {
    const std::string path = (fs::path(dir) / "throughput.csv").string();
    std::ofstream out = open_for_write(path);
    out << "time_s,nodes,samples_per_s\n";
    for (const ThroughputStep& s : r.throughput)
      out << num(s.time_s) << ',' << s.nodes << ',' << num(s.samples_per_s) << '\n';
    const int last_nodes = r.throughput.empty() ? 0 : r.throughput.back().nodes;
    const double last_rate = r.throughput.empty() ? 0 : r.throughput.back().samples_per_s;
    if (r.throughput.empty() || r.throughput.back().time_s < r.duration_s)
      out << num(r.duration_s) << ',' << last_nodes << ',' << num(last_rate) << '\n';
    finish_write(out, path);
  }
  {
    const std::string path = (fs::path(dir) / "events.csv").string();
    std::ofstream out = open_for_write(path);
    out << "time_s,event,nodes_alive,action,cost_s,detail\n";
    for (const ReplayEvent& e : r.events)
      out << num(e.time_s) << ',' << e.event << ',' << e.nodes_alive << ',' << csv_field(e.action)
          << ',' << num(e.cost_s) << ',' << csv_field(e.detail) << '\n';
    finish_write(out, path);
  }
  {
    const std::string path = (fs::path(dir) / "summary.json").string();
    std::ofstream out = open_for_write(path);
    out << replay_summary(r).dump(2) << '\n';
    finish_write(out, path);
  }
}

}  // namespace loom
