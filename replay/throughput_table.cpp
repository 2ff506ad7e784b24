#include "replay/throughput_table.hpp"

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/errors.hpp"
#include "core/io.hpp"

namespace loom {
namespace {

double checked(double v, const std::string& where) {
  if (!std::isfinite(v) || v < 0)
    throw InputError(where + ": throughput must be a finite number >= 0, got " + std::to_string(v));
  return v;
}

int node_count(const std::string& text, const std::string& where) {
  size_t used = 0;
  int n = 0;
  try {
    n = std::stoi(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || n < 1)
    throw InputError(where + ": expected a node count >= 1, got '" + text + "'");
  return n;
}

std::map<int, double> from_object(const nlohmann::json& obj, const std::string& where) {
  std::map<int, double> out;
  for (const auto& [key, value] : obj.items()) {
    const std::string at = where + " key '" + key + "'";
    if (!value.is_number()) throw InputError(at + ": expected a number");
    out[node_count(key, at)] = checked(value.get<double>(), at);
  }
  return out;
}

std::map<int, double> load_json(const std::string& path, const std::string& model) {
  std::ifstream in(path);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    // parse_error, and also out_of_range for a number past double's range ("1e400").
    throw InputError(path + ": not valid JSON: " + e.what());
  }
  if (!j.is_object()) throw InputError(path + ": expected a JSON object");
  if (!j.contains("throughput_samples_per_s")) return from_object(j, path);
  const nlohmann::json& models = j["throughput_samples_per_s"];
  if (!models.is_object() || models.empty())
    throw InputError(path + ": 'throughput_samples_per_s' must be a non-empty object");
  std::string names;
  for (const auto& [name, table] : models.items()) names += (names.empty() ? "" : ", ") + name;
  std::string pick = model;
  if (pick.empty()) {
    if (models.size() != 1)
      throw InputError(path + ": holds several models (" + names +
                       "); choose one with replay.throughput_model");
    pick = models.begin().key();
  }
  if (!models.contains(pick) || !models[pick].is_object())
    throw InputError(path + ": no model '" + pick + "' (known: " + names + ")");
  return from_object(models[pick], path + " model '" + pick + "'");
}

std::map<int, double> load_csv(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (!std::getline(in, line) || line.rfind("nodes,samples_per_s", 0) != 0)
    throw InputError(path + ":1: expected the header 'nodes,samples_per_s'");
  std::map<int, double> out;
  for (int number = 2; std::getline(in, line); ++number) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    const std::string where = path + ":" + std::to_string(number);
    const auto comma = line.find(',');
    if (comma == std::string::npos) throw InputError(where + ": expected 'nodes,samples_per_s'");
    const int n = node_count(line.substr(0, comma), where);
    std::istringstream value(line.substr(comma + 1));
    double v = 0;
    if (!(value >> v) || !(value >> std::ws).eof())
      throw InputError(where + ": expected a number after the comma, got '" +
                       line.substr(comma + 1) + "'");
    if (out.count(n)) throw InputError(where + ": node count " + std::to_string(n) + " twice");
    out[n] = checked(v, where);
  }
  return out;
}

}  // namespace

ThroughputTable::ThroughputTable(std::map<int, double> samples_per_s, std::string source)
    : by_nodes_(std::move(samples_per_s)), source_(std::move(source)) {}

ThroughputTable ThroughputTable::load(const std::string& path, const std::string& model) {
  check_readable_file(path, "throughput table");
  const bool json = path.size() >= 5 && path.substr(path.size() - 5) == ".json";
  std::map<int, double> table = json ? load_json(path, model) : load_csv(path);
  if (table.empty()) throw InputError(path + ": the throughput table has no entries");
  return ThroughputTable(std::move(table), path);
}

double ThroughputTable::samples_per_s(int nodes) const {
  auto it = by_nodes_.upper_bound(nodes);
  if (it == by_nodes_.begin()) return 0;
  return std::prev(it)->second;
}

IterationTimer ThroughputTable::timer(int global_batch) const {
  return [table = *this, global_batch](const Layout& layout) {
    const double rate = table.samples_per_s(layout.nodes());
    if (rate <= 0) {
      throw TooFewNodesError(table.source() + ": no measured throughput with " +
                             std::to_string(layout.nodes()) + " nodes (0: does not fit)");
    }
    return global_batch / rate;
  };
}

}  // namespace loom
