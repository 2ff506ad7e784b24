#include "app/sweep/runner.hpp"

#include <unistd.h>

#include <charconv>
#include <chrono>
#include <filesystem>
#include <map>
#include <utility>

#include "app/backends.hpp"
#include "app/sweep/pool.hpp"
#include "app/sweep/progress.hpp"
#include "app/sweep/results.hpp"
#include "app/sweep/study_file.hpp"
#include "core/errors.hpp"

namespace loom::sweep {

std::vector<ResolvedPoint> resolve_points(const StudyFile& study, std::vector<Point>& points,
                                          const SweepOptions& o) {
  const std::vector<std::string> cols = axis_columns(study);
  const size_t scheduler_col = *find_column(cols, "scheduler");
  std::vector<ResolvedPoint> out;
  for (Point& p : points) {
    // Shard I of N holds the points whose index is I mod N.
    if (p.index % o.shards != o.shard) continue;
    Resolved r;
    try {
      r = resolve(study.bases[p.base], p.overrides);
    } catch (const InputError& e) {
      std::string where;
      for (size_t i = 0; i < cols.size(); ++i)
        if (!p.cells[i].empty()) where += (where.empty() ? "" : ", ") + cols[i] + "=" + p.cells[i];
      throw InputError(study.path + ": point " + std::to_string(p.index) + " (" + where +
                       "): " + e.what());
    }
    p.cells[scheduler_col] = r.scheduler;
    out.push_back({&p, r.hash});
  }
  return out;
}

namespace {

/// Results of an earlier run in `dir`, by config hash (empty if there is none).
std::map<std::string, PointResult> earlier_results(const std::string& dir) {
  std::map<std::string, PointResult> out;
  const std::string path = (std::filesystem::path(dir) / "results.csv").string();
  if (!std::filesystem::exists(path)) return out;
  const Table t = read_csv(path);
  const size_t hash = *t.find("config_hash");  // read_csv checked it is there
  for (const auto& row : t.rows) {
    const PointResult r = result_of(t, row);
    if (!r.status.empty()) out.emplace(row[hash], r);
  }
  return out;
}

std::string label(const std::vector<std::string>& cols, const Point& p) {
  std::string out = "point " + std::to_string(p.index) + " (";
  for (size_t i = 0; i < cols.size(); ++i) out += (i ? " " : "") + cols[i] + "=" + p.cells[i];
  return out + ")";
}

}  // namespace

std::pair<size_t, size_t> parse_shard(const std::string& text) {
  const auto slash = text.find('/');
  size_t i = 0, n = 0;
  bool ok = slash != std::string::npos;
  if (ok) {
    const auto ri = std::from_chars(text.data(), text.data() + slash, i);
    const auto rn = std::from_chars(text.data() + slash + 1, text.data() + text.size(), n);
    ok = ri.ec == std::errc() && ri.ptr == text.data() + slash && rn.ec == std::errc() &&
         rn.ptr == text.data() + text.size() && n >= 1 && i < n;
  }
  if (!ok) throw InputError("--shard '" + text + "': expected I/N with 0 <= I < N (e.g. 0/4)");
  return {i, n};
}

SweepSummary run_sweep(const SweepOptions& o) {
  const auto start = std::chrono::steady_clock::now();
  const StudyFile study = parse_study(o.study);
  check_axes(study);
  std::vector<Point> points = expand(study);
  const std::vector<ResolvedPoint> shard = resolve_points(study, points, o);
  const std::vector<std::string> cols = axis_columns(study);

  SweepSummary sum;
  sum.points = points.size();
  sum.in_shard = shard.size();
  const auto earlier = o.resume ? earlier_results(o.out) : std::map<std::string, PointResult>{};
  Table table;
  table.columns = all_columns(cols);
  std::vector<const ResolvedPoint*> pending;
  for (const ResolvedPoint& rp : shard) {
    const auto it = earlier.find(rp.hash);
    if (it == earlier.end()) {
      pending.push_back(&rp);
      continue;
    }
    table.rows.push_back(row_cells(rp.point->index, rp.point->cells, rp.hash, it->second));
    ++sum.resumed;
  }
  const int fd = open_for_append(o.out, table);
  const auto run_start = std::chrono::steady_clock::now();
  sum.prepare_s = std::chrono::duration<double>(run_start - start).count();
  Progress progress(pending.size(), o.quiet);
  const bool complete = run_pool(
      pending.size(), o.jobs, find_backend(study.backend).once_per_process,
      [&](size_t i) {
        const Point& p = *pending[i]->point;
        return to_message(run_point(study.bases[p.base], p.overrides));
      },
      [&](size_t i, bool ok, const std::string& message) {
        PointResult r;
        if (ok) {
          r = from_message(message);
        } else {
          r.status = "failed";
          r.reason = message;
        }
        const ResolvedPoint& rp = *pending[i];
        std::vector<std::string> cells = row_cells(rp.point->index, rp.point->cells, rp.hash, r);
        append_row(fd, cells);
        table.rows.push_back(std::move(cells));
        ++sum.ran;
        sum.point_s += r.wall_s;
        progress.done(r.status, label(cols, *rp.point));
      });
  progress.finish();
  close(fd);
  sum.run_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - run_start).count();
  sum.interrupted = !complete;
  const size_t status = *table.find("status");
  for (const auto& row : table.rows) {
    const std::string& s = row[status];
    (s == "ok" ? sum.ok : s == "infeasible" ? sum.infeasible : sum.failed)++;
  }
  // The same file name whatever path ran it: shards merged equal a local run.
  write_results(o.out, std::filesystem::path(o.study).filename().string(), points.size(), table);
  return sum;
}

}  // namespace loom::sweep
