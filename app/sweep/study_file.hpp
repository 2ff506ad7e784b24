#pragma once
/// A sweep study file (`loom sweep STUDY.toml`, docs/sweep.md): base configs, axes over any
/// config key, schedulers, seeds and the backend, expanded into points. Each point is a
/// base config plus `--set` overrides, so every config key works as an axis and is checked
/// by the same reader as `loom sim --set`.
///
///   base = "../configs/examples/vlm-frozen.toml"   # or a list; relative to the study file
///   schedulers = ["1f1b", "gpipe"]                 # or "all"; default: each base's own
///   seeds = [1, 2]                                 # workload.seed; default: the config's
///   backend = "evaluator"                          # or "simgrid"
///   [set]                                          # fixed overrides for every point
///   "schedule.microbatch_size" = 2
///   [axes]                                         # crossed with each other (product)
///   "schedule.microbatches" = [4, 8, 16]
///   "parallel.pp" = { start = 1, stop = 4, step = 1 }   # stop inclusive
///   [[zip]]                                        # keys advancing together: one axis
///   "parallel.pp" = [2, 4]
///   "schedule.chunks" = [2, 1]
#include <cstdint>
#include <string>
#include <vector>

namespace loom::sweep {

/// A line of the study file, 1-based as toml++ counts them (toml::source_index); 0: none.
using StudyLine = std::uint32_t;

/// One value of an axis: the `--set` text (TOML: strings quoted) and the CSV cell text.
struct AxisValue {
  std::string toml;
  std::string cell;
  StudyLine line = 0;  ///< the study file's line holding the value
};

/// One config key varied by an axis.
struct AxisKey {
  std::string key;  ///< dotted config key, e.g. "schedule.microbatches"
  StudyLine line = 0;
  std::vector<AxisValue> values;
};

/// An axis: one key, or a zip group of keys of equal length that advance together.
struct Axis {
  std::vector<AxisKey> keys;
  size_t size() const { return keys.front().values.size(); }
};

struct StudyFile {
  std::string path;                     ///< as given
  std::vector<std::string> bases;       ///< config paths, resolved against the study's folder
  std::vector<std::string> base_cells;  ///< as written in the study (the `config` column)
  std::vector<std::string> schedulers;  ///< empty: each base's own schedule.name
  StudyLine schedulers_line = 0;
  std::vector<int> seeds;  ///< empty: each config's workload.seed
  std::string backend = "evaluator";
  std::vector<std::string> fixed;  ///< [set] overrides, "key=value"
  std::vector<Axis> axes;          ///< in the file's order; [axes] keys, then [[zip]] groups
};

/// One point of the expanded study.
struct Point {
  size_t index = 0;  ///< position in the full expansion (bases, axes, schedulers, seeds)
  size_t base = 0;   ///< index into StudyFile::bases
  std::vector<std::string> overrides;  ///< fixed, axes, scheduler, seed, backend
  std::vector<std::string> cells;      ///< axis cells in column order (see columns())
};

/// Parses and checks a study file. Throws InputError naming `path:line` for a TOML error,
/// an unknown study key, a missing or empty base, an empty axis or zip group of unequal
/// lengths, a bad range, an unknown scheduler or backend.
StudyFile parse_study(const std::string& path);

/// The axis columns of results.csv, in order: `config`, each axis key, `scheduler`, and
/// `seed` when the study has seeds.
std::vector<std::string> axis_columns(const StudyFile& study);

/// Every point: bases outermost, then the axes in order, schedulers, seeds innermost.
std::vector<Point> expand(const StudyFile& study);

/// Checks every axis key and value against each base config with load_config (so unknown
/// keys and out-of-range values are reported before any point runs), naming the study
/// file's line. Throws InputError.
void check_axes(const StudyFile& study);

}  // namespace loom::sweep
