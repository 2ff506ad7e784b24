#pragma once
/// results.csv and results.json of a sweep: one row per point.
///
/// Columns: `point` (index in the full expansion), the axis columns (study_file.hpp), then
/// `config_hash, status, iteration_time_s, throughput_samples_per_s, bubble_fraction,
/// peak_memory_max_bytes, peak_memory_mean_bytes, tflops_per_gpu, mfu,
/// tokens_per_s_per_gpu, busiest_link_utilisation, busiest_link_tier, reason`. Rows are appended as
/// points finish (each row is one write(), so an interrupted run leaves a valid CSV) and sorted by
/// `point` when the run ends, so the files do not depend on -j or completion order.
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "app/sweep/point.hpp"

namespace loom::sweep {

/// Position of `column` in `columns` (the index of its cell in each row), if there.
std::optional<size_t> find_column(const std::vector<std::string>& columns,
                                  const std::string& column);

/// A CSV table: header and rows of cells (RFC 4180 quoting).
struct Table {
  std::vector<std::string> columns;
  std::vector<std::vector<std::string>> rows;
  /// Index of `column` (find_column), or nullopt.
  std::optional<size_t> find(const std::string& column) const;
};

/// The columns after the axis columns.
const std::vector<std::string>& result_columns();

/// `point`, `axis`, then result_columns().
std::vector<std::string> all_columns(const std::vector<std::string>& axis);

/// The cells of one row.
std::vector<std::string> row_cells(size_t point, const std::vector<std::string>& axis_cells,
                                   const std::string& hash, const PointResult& r);

/// A cell as results.json holds it: numbers and booleans as such, except in the text
/// columns (config, scheduler, config_hash, status, reason); "" as null.
nlohmann::json json_cell(const std::string& column, const std::string& cell);

/// One CSV line (with its newline), cells quoted where they hold , " or a line break.
std::string csv_line(const std::vector<std::string>& cells);

/// Reads a CSV written by csv_line. A last line without its newline (a write cut short)
/// is dropped. Throws InputError naming the file and line for a malformed file.
Table read_csv(const std::string& path);

/// The result part of a row read back (by column name; empty fields if absent).
PointResult result_of(const Table& t, const std::vector<std::string>& row);

/// Sorts rows by `point` (numeric) and writes DIR/results.csv and DIR/results.json
/// (`study`, `points` = points in the whole study, `columns`, `rows` as objects; numbers
/// as numbers) through temporary files renamed into place.
void write_results(const std::string& dir, const std::string& study, size_t points, Table table);

/// Creates DIR/results.csv holding the header and `rows` (through a rename) and returns an
/// O_APPEND descriptor to append rows to.
int open_for_append(const std::string& dir, const Table& table);

/// Appends one row with a single write().
void append_row(int fd, const std::vector<std::string>& cells);

/// `loom sweep merge`: the union of shard directories' (or results.csv files') rows. Every
/// shard must have the same columns, study and point count; a point found twice must have
/// identical rows. Writes DIR/results.{csv,json}; returns (rows, points in the study).
/// Throws InputError naming the offending file.
std::pair<size_t, size_t> merge_results(const std::vector<std::string>& inputs,
                                        const std::string& out_dir);

}  // namespace loom::sweep
