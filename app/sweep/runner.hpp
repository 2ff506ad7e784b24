#pragma once
/// `loom sweep STUDY.toml`: expand the study, skip what --resume finds done, run the rest on
/// the process pool, append rows as they finish, write the sorted files at the end.
#include <string>
#include <utility>
#include <vector>

#include "app/sweep/study_file.hpp"

namespace loom::sweep {

struct SweepOptions {
  std::string study;
  std::string out;  ///< results directory
  int jobs = 1;     ///< concurrent points
  bool resume = false;
  size_t shard = 0;    ///< this shard's index, 0-based
  size_t shards = 1;   ///< number of shards
  bool quiet = false;  ///< no progress output
};

/// Parses "I/N" (0 <= I < N). Throws InputError.
std::pair<size_t, size_t> parse_shard(const std::string& text);

/// What a sweep did.
struct SweepSummary {
  size_t points = 0;  ///< in the whole study
  size_t in_shard = 0;
  size_t resumed = 0;  ///< rows kept from an earlier run
  size_t ran = 0;
  size_t ok = 0, infeasible = 0, failed = 0;  ///< over the shard's rows
  bool interrupted = false;
  double prepare_s = 0;  ///< parsing, checking and resolving the study (every point's config)
  double run_s = 0;      ///< running the points (pool start to last row)
  double point_s = 0;    ///< sum over the points run of their plan + simulate time
};

/// A point of a study with its config hash (point.hpp's resolve()).
struct ResolvedPoint {
  const Point* point;
  std::string hash;
};

/// Resolves every point of `o`'s shard (hash, and the scheduler cell filled in). A
/// combination of axis values the config reader rejects is bad input: InputError naming the
/// point's assignments.
std::vector<ResolvedPoint> resolve_points(const StudyFile& study, std::vector<Point>& points,
                                          const SweepOptions& o);

/// Runs the sweep. Bad input throws InputError before any point runs (the study file's
/// line named). Progress goes to stderr (a bar with an ETA on a terminal, one line per
/// point otherwise) unless `quiet`.
SweepSummary run_sweep(const SweepOptions& options);

}  // namespace loom::sweep
