// `loom compare PRED_DIR MEAS_DIR`: a prediction (`loom sim`) against a measurement
// (`loom exec`) of the same schedule. Matches operations one to one (same rank, same
// position among that rank's ops of the same kind, module, stage and microbatch), prints
// the per-operation duration error of compute ops by kind and module, the per-iteration
// error, and draws both timelines on one PNG (analysis/compare_plot.py).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/commands.hpp"
#include "cli/run_output.hpp"
#include "core/errors.hpp"

namespace loom {
namespace {

struct Row {
  int rank = 0;
  std::string kind, module, stage, microbatch;
  double start_s = 0, end_s = 0;
  double duration() const { return end_s - start_s; }
  std::string label() const {
    return "rank " + std::to_string(rank) + " " + kind + " " + module + " stage " + stage +
           (microbatch.empty() ? "" : " mb " + microbatch);
  }
};

std::vector<Row> read_timeline(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / "timeline.csv").string();
  std::ifstream in(path);
  if (!in)
    throw InputError(path + ": cannot open (is " + dir + " a loom sim/exec --out directory?)");
  std::string line;
  std::getline(in, line);
  if (line != "rank,kind,module,stage,microbatch,start_s,end_s")
    throw InputError(path + ":1: not a Loom timeline.csv header");
  std::vector<Row> rows;
  for (int n = 2; std::getline(in, line); ++n) {
    if (line.empty()) continue;
    std::vector<std::string> cells;
    std::stringstream ss(line);
    for (std::string cell; std::getline(ss, cell, ',');) cells.push_back(cell);
    if (line.back() == ',') cells.emplace_back();
    if (cells.size() != 7)
      throw InputError(path + ":" + std::to_string(n) + ": expected 7 columns");
    try {
      rows.push_back({std::stoi(cells[0]), cells[1], cells[2], cells[3], cells[4],
                      std::stod(cells[5]), std::stod(cells[6])});
    } catch (const std::exception&) {
      throw InputError(path + ":" + std::to_string(n) + ": rank, start_s or end_s is not a number");
    }
  }
  return rows;
}

double iteration_time(const std::string& dir, const std::vector<Row>& rows) {
  const std::string path = (std::filesystem::path(dir) / "metrics.json").string();
  std::ifstream in(path);
  if (in) {
    try {
      const auto j = nlohmann::json::parse(in);
      if (j.contains("iteration_time_s")) return j["iteration_time_s"].get<double>();
    } catch (const std::exception& e) {
      throw InputError(path + ": " + e.what());
    }
  }
  double end = 0;
  for (const Row& r : rows) end = std::max(end, r.end_s);
  return end;
}

bool is_compute(const std::string& kind) {
  return kind == "F" || kind == "B" || kind == "I" || kind == "W";
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::string pct(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%+.2f%%", x * 100);
  return buf;
}

struct CompareOptions {
  std::string pred, meas;
  std::string png;  ///< default out/compare.png, like every command's out/
  bool all_ops = false;
  bool no_plot = false;
  bool json = false;
};

/// Both runs must have executed one schedule. timeline.csv rows name rank, kind, module,
/// stage and microbatch but not the layers, so two runs planned with different cost models
/// (a stage boundary one layer apart) would match row by row; schedule.txt names the
/// layer edges of every message and tells them apart.
void require_same_schedule(const CompareOptions& o) {
  const auto pred_path = std::filesystem::path(o.pred) / "schedule.txt";
  const auto meas_path = std::filesystem::path(o.meas) / "schedule.txt";
  if (!std::filesystem::exists(pred_path) || !std::filesystem::exists(meas_path)) return;
  auto lines = [](const std::filesystem::path& path) {
    std::vector<std::string> out;
    std::ifstream in(path);
    for (std::string line; std::getline(in, line);) out.push_back(line);
    return out;
  };
  const std::vector<std::string> pred = lines(pred_path), meas = lines(meas_path);
  for (size_t i = 0; i < std::max(pred.size(), meas.size()); ++i) {
    if (i < pred.size() && i < meas.size() && pred[i] == meas[i]) continue;
    throw InputError(meas_path.string() + ":" + std::to_string(i + 1) + ": differs from " +
                     pred_path.string() +
                     ": the runs executed different schedules (different stage partitions "
                     "come from different cost models: plan both with the same --set cost.*)");
  }
}

int run_compare(CompareOptions o) {
  if (o.png.empty()) {
    o.png = "out/compare.png";
    if (!o.no_plot && !o.json) std::filesystem::create_directories("out");
  }
  if (!o.no_plot && !o.json) {
    // Checked first: the plot comes last, after the comparison was printed.
    check_png_path(o.png, "compare.png");
  }
  require_same_schedule(o);
  const std::vector<Row> pred = read_timeline(o.pred), meas = read_timeline(o.meas);
  if (pred.size() != meas.size()) {
    throw InputError(o.meas + ": " + std::to_string(meas.size()) + " operations but " + o.pred +
                     " has " + std::to_string(pred.size()) + ": not the same schedule");
  }
  struct Group {
    std::vector<double> abs_err;
    double signed_sum = 0, pred_s = 0, meas_s = 0;
  };
  std::map<std::string, Group> groups;  // "kind module"
  std::vector<double> all_abs;
  nlohmann::json ops = nlohmann::json::array();
  std::ostringstream text;  // the human-readable report; --json prints JSON instead
  std::ostream& os = text;
  for (size_t i = 0; i < pred.size(); ++i) {
    const Row& p = pred[i];
    const Row& m = meas[i];
    if (p.label() != m.label()) {
      throw InputError(o.meas + "/timeline.csv:" + std::to_string(i + 2) + ": '" + m.label() +
                       "' where the prediction has '" + p.label() + "': not the same schedule");
    }
    if (!is_compute(p.kind) || p.duration() <= 0) continue;
    const double err = (m.duration() - p.duration()) / p.duration();
    Group& g = groups[p.kind + " " + p.module];
    g.abs_err.push_back(std::abs(err));
    g.signed_sum += err;
    g.pred_s += p.duration();
    g.meas_s += m.duration();
    all_abs.push_back(std::abs(err));
    if (o.json && o.all_ops)
      ops.push_back({{"op", p.label()},
                     {"predicted_s", p.duration()},
                     {"measured_s", m.duration()},
                     {"error", err}});
    if (o.all_ops)
      os << p.label() << ": predicted " << ms(p.duration()) << ", measured " << ms(m.duration())
         << " (" << pct(err) << ")\n";
  }
  const double tp = iteration_time(o.pred, pred), tm = iteration_time(o.meas, meas);
  if (o.json) {
    nlohmann::json by_kind = nlohmann::json::array();
    for (const auto& [name, g] : groups) {
      const size_t space = name.find(' ');
      by_kind.push_back({{"kind", name.substr(0, space)},
                         {"module", name.substr(space + 1)},
                         {"ops", g.abs_err.size()},
                         {"median_abs_error", median(g.abs_err)},
                         {"mean_error", g.signed_sum / static_cast<double>(g.abs_err.size())},
                         {"predicted_s", g.pred_s},
                         {"measured_s", g.meas_s}});
    }
    nlohmann::json out = {{"prediction", o.pred},
                          {"measurement", o.meas},
                          {"compute_ops", all_abs.size()},
                          {"median_abs_error", median(all_abs)},
                          {"by_kind", by_kind},
                          {"iteration_time_s", {{"predicted", tp}, {"measured", tm}}},
                          {"iteration_error", tp > 0 ? (tm - tp) / tp : 0}};
    if (o.all_ops) out["per_op"] = ops;
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  os << "per-operation error of compute ops (measured vs predicted duration):\n";
  for (const auto& [name, g] : groups) {
    char line[160];
    std::snprintf(line, sizeof line,
                  "  %-22s %5zu ops  median |err| %6.2f%%  mean err %+7.2f%%  total %s vs %s\n",
                  name.c_str(), g.abs_err.size(), median(g.abs_err) * 100,
                  g.signed_sum / static_cast<double>(g.abs_err.size()) * 100, ms(g.pred_s).c_str(),
                  ms(g.meas_s).c_str());
    os << line;
  }
  char all[96];
  std::snprintf(all, sizeof all, "  all compute ops: %zu, median |err| %.2f%%\n", all_abs.size(),
                median(all_abs) * 100);
  os << all;
  os << "iteration time: predicted " << ms(tp) << ", measured " << ms(tm) << ", error "
     << pct(tp > 0 ? (tm - tp) / tp : 0) << "\n";
  std::cout << text.str();
  if (o.no_plot) return 0;
  if (!run_analysis_script("compare_plot.py", {o.pred, o.meas, "-o", o.png, "--quiet"})) {
    std::cerr << "loom: error: --png " << o.png << ": the plot was not written\n";
    return 1;
  }
  std::cout << "wrote " << o.png << " (predicted above, measured below)\n";
  return 0;
}

}  // namespace

CommandRun attach_compare(CLI::App& sub) {
  auto o = std::make_shared<CompareOptions>();
  sub.description(
      "Compare a prediction with a measurement of the same schedule: per-operation duration\n"
      "error of compute ops (by kind and module), iteration-time error, and one PNG with both\n"
      "timelines (predicted above, measured below).\n"
      "Example: loom sim C --out pred && loom exec C --out meas && loom compare pred meas");
  sub.add_option("PRED_DIR", o->pred, "Output directory of the prediction (loom sim --out)")
      ->required()
      ->check(CLI::ExistingDirectory);
  sub.add_option("MEAS_DIR", o->meas, "Output directory of the measurement (loom exec --out)")
      ->required()
      ->check(CLI::ExistingDirectory);
  sub.add_option("--png", o->png, "Where to draw both timelines (default out/compare.png)");
  sub.add_flag("--ops", o->all_ops, "Also print every compute operation's error");
  sub.add_flag("--no-plot", o->no_plot, "Skip the PNG");
  sub.add_flag("--json", o->json,
               "Print the errors as JSON instead (no PNG; with --ops every op's error too)");
  return [o]() { return run_compare(*o); };
}

}  // namespace loom
