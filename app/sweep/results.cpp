#include "app/sweep/results.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <stdexcept>
#include <utility>

#include "core/errors.hpp"

namespace loom::sweep {
namespace {

void write_atomically(const std::filesystem::path& path, const std::string& text) {
  const std::filesystem::path tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text;
    if (!out) throw InputError(tmp.string() + ": cannot write");
  }
  std::filesystem::rename(tmp, path);
}

size_t point_of(const std::vector<std::string>& row) {
  size_t v = 0;
  std::from_chars(row.front().data(), row.front().data() + row.front().size(), v);
  return v;
}

}  // namespace

nlohmann::json json_cell(const std::string& column, const std::string& cell) {
  static const std::set<std::string> kText = {"config", "scheduler", "config_hash", "status",
                                              "reason"};
  if (kText.count(column)) return cell;
  if (cell.empty()) return nullptr;
  if (cell == "true" || cell == "false") return cell == "true";
  double v = 0;
  const auto r = std::from_chars(cell.data(), cell.data() + cell.size(), v);
  if (r.ec == std::errc() && r.ptr == cell.data() + cell.size()) {
    long long i = 0;
    const auto ri = std::from_chars(cell.data(), cell.data() + cell.size(), i);
    if (ri.ec == std::errc() && ri.ptr == cell.data() + cell.size()) return i;
    return v;
  }
  return cell;
}

std::optional<size_t> find_column(const std::vector<std::string>& columns,
                                  const std::string& column) {
  for (size_t i = 0; i < columns.size(); ++i)
    if (columns[i] == column) return i;
  return std::nullopt;
}

std::optional<size_t> Table::find(const std::string& column) const {
  return find_column(columns, column);
}

const std::vector<std::string>& result_columns() {
  static const std::vector<std::string> kColumns = {"config_hash",
                                                    "status",
                                                    "iteration_time_s",
                                                    "throughput_samples_per_s",
                                                    "bubble_fraction",
                                                    "peak_memory_max_bytes",
                                                    "peak_memory_mean_bytes",
                                                    "tflops_per_gpu",
                                                    "mfu",
                                                    "tokens_per_s_per_gpu",
                                                    "busiest_link_utilisation",
                                                    "busiest_link_tier",
                                                    "reason"};
  return kColumns;
}

std::vector<std::string> all_columns(const std::vector<std::string>& axis) {
  std::vector<std::string> cols = {"point"};
  cols.insert(cols.end(), axis.begin(), axis.end());
  cols.insert(cols.end(), result_columns().begin(), result_columns().end());
  return cols;
}

std::vector<std::string> row_cells(size_t point, const std::vector<std::string>& axis_cells,
                                   const std::string& hash, const PointResult& r) {
  std::vector<std::string> cells = {std::to_string(point)};
  cells.insert(cells.end(), axis_cells.begin(), axis_cells.end());
  for (const std::string* s :
       {&hash, &r.status, &r.iteration_time_s, &r.throughput_samples_per_s, &r.bubble_fraction,
        &r.peak_memory_max_bytes, &r.peak_memory_mean_bytes, &r.tflops_per_gpu, &r.mfu,
        &r.tokens_per_s_per_gpu, &r.busiest_link_utilisation, &r.busiest_link_tier, &r.reason})
    cells.push_back(*s);
  return cells;
}

std::string csv_line(const std::vector<std::string>& cells) {
  std::string line;
  for (size_t i = 0; i < cells.size(); ++i) {
    if (i) line += ',';
    const std::string& c = cells[i];
    if (c.find_first_of(",\"\n\r") == std::string::npos) {
      line += c;
      continue;
    }
    line += '"';
    for (char ch : c) {
      if (ch == '"') line += '"';
      line += ch;
    }
    line += '"';
  }
  return line + "\n";
}

Table read_csv(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path + ": cannot read");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  // Only complete lines count: cut at the last newline outside quotes.
  std::vector<std::vector<std::string>> records;
  std::vector<std::string> record;
  std::string cell;
  bool quoted = false;
  int line = 1;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quoted) {
      if (c == '"' && i + 1 < text.size() && text[i + 1] == '"') {
        cell += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        if (c == '\n') ++line;
        cell += c;
      }
    } else if (c == '"') {
      if (!cell.empty()) throw InputError(path + ":" + std::to_string(line) + ": stray quote");
      quoted = true;
    } else if (c == ',') {
      record.push_back(std::move(cell));
      cell.clear();
    } else if (c == '\n') {
      record.push_back(std::move(cell));
      cell.clear();
      records.push_back(std::move(record));
      record.clear();
      ++line;
    } else {
      cell += c;
    }
  }
  if (records.empty()) throw InputError(path + ": empty (no header)");
  Table t;
  t.columns = records.front();
  for (size_t i = 1; i < records.size(); ++i) {
    if (records[i].size() != t.columns.size()) {
      throw InputError(path + ": row " + std::to_string(i + 1) + " has " +
                       std::to_string(records[i].size()) + " cells, the header " +
                       std::to_string(t.columns.size()));
    }
    t.rows.push_back(std::move(records[i]));
  }
  if (t.find("point") != size_t{0} || !t.find("config_hash"))
    throw InputError(path + ":1: not a loom sweep results.csv (no point / config_hash columns)");
  return t;
}

PointResult result_of(const Table& t, const std::vector<std::string>& row) {
  auto get = [&](const char* column) {
    const std::optional<size_t> i = t.find(column);
    return i ? row[*i] : std::string();
  };
  PointResult r;
  r.status = get("status");
  r.iteration_time_s = get("iteration_time_s");
  r.throughput_samples_per_s = get("throughput_samples_per_s");
  r.bubble_fraction = get("bubble_fraction");
  r.peak_memory_max_bytes = get("peak_memory_max_bytes");
  r.peak_memory_mean_bytes = get("peak_memory_mean_bytes");
  r.tflops_per_gpu = get("tflops_per_gpu");  // "" in a results.csv of an earlier release
  r.mfu = get("mfu");
  r.tokens_per_s_per_gpu = get("tokens_per_s_per_gpu");
  r.busiest_link_utilisation = get("busiest_link_utilisation");  // "" before 2026-12
  r.busiest_link_tier = get("busiest_link_tier");
  r.reason = get("reason");
  return r;
}

void write_results(const std::string& dir, const std::string& study, size_t points, Table table) {
  std::stable_sort(table.rows.begin(), table.rows.end(),
                   [](const auto& a, const auto& b) { return point_of(a) < point_of(b); });
  std::string csv = csv_line(table.columns);
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& row : table.rows) {
    csv += csv_line(row);
    nlohmann::json obj = nlohmann::json::object();
    for (size_t i = 0; i < row.size(); ++i)
      obj[table.columns[i]] = json_cell(table.columns[i], row[i]);
    rows.push_back(std::move(obj));
  }
  // Keys keep the CSV's column order (nlohmann sorts object keys; `columns` restores it).
  const nlohmann::json doc = {
      {"study", study}, {"points", points}, {"columns", table.columns}, {"rows", rows}};
  std::filesystem::create_directories(dir);
  write_atomically(std::filesystem::path(dir) / "results.json",
                   doc.dump(1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
  write_atomically(std::filesystem::path(dir) / "results.csv", csv);
}

int open_for_append(const std::string& dir, const Table& table) {
  std::filesystem::create_directories(dir);
  std::string csv = csv_line(table.columns);
  for (const auto& row : table.rows) csv += csv_line(row);
  const std::filesystem::path path = std::filesystem::path(dir) / "results.csv";
  write_atomically(path, csv);
  const int fd = open(path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
  if (fd < 0) throw InputError(path.string() + ": " + std::strerror(errno));
  return fd;
}

void append_row(int fd, const std::vector<std::string>& cells) {
  const std::string line = csv_line(cells);
  if (std::cmp_not_equal(write(fd, line.data(), line.size()), line.size()))
    throw std::runtime_error(std::string("results.csv: write failed: ") + std::strerror(errno));
}

std::pair<size_t, size_t> merge_results(const std::vector<std::string>& inputs,
                                        const std::string& out_dir) {
  Table merged;
  std::string study;
  size_t points = 0;
  std::map<size_t, std::vector<std::string>> by_point;
  for (const std::string& input : inputs) {
    const std::filesystem::path dir = std::filesystem::is_directory(input)
                                          ? std::filesystem::path(input)
                                          : std::filesystem::path(input).parent_path();
    const std::string csv_path = (dir / "results.csv").string();
    const std::string json_path = (dir / "results.json").string();
    const Table t = read_csv(csv_path);
    nlohmann::json meta;
    try {
      std::ifstream in(json_path);
      meta = nlohmann::json::parse(in);
    } catch (const std::exception& e) {
      throw InputError(json_path + ": cannot read the study's description: " + e.what());
    }
    const std::string s = meta.value("study", "");
    const size_t n = meta.value("points", size_t{0});
    if (merged.columns.empty()) {
      merged.columns = t.columns;
      study = s;
      points = n;
    } else if (t.columns != merged.columns || s != study || n != points) {
      throw InputError(csv_path + ": another study than " + inputs.front() +
                       " (columns, study file or point count differ)");
    }
    for (const auto& row : t.rows) {
      const auto [it, inserted] = by_point.emplace(point_of(row), row);
      if (!inserted && it->second != row) {
        throw InputError(csv_path + ": point " + row.front() +
                         " differs from the same point in another input");
      }
    }
  }
  for (auto& [p, row] : by_point) merged.rows.push_back(std::move(row));
  write_results(out_dir, study, points, merged);
  return {merged.rows.size(), points};
}

}  // namespace loom::sweep
