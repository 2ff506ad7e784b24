#pragma once
// Golden outputs (SimGrid's .tesh files are the model): a run's summary as text, compared
// with a checked-in snapshot token by token (numbers to a relative tolerance, everything
// else exactly), or rewritten when LOOM_REFRESH_GOLDEN is set (scripts/refresh_golden.sh).
#include <gtest/gtest.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/schedule.hpp"
#include "core/schedule_text.hpp"
#include "core/timeline.hpp"

namespace loom::test {

/// Rank r's ops in order, as schedule.txt writes them. A program longer than kMaxOrder
/// characters (thousands of microbatches: the Oobleck and Entrain configs) is kept as its
/// length and FNV-1a hash, so the snapshots stay small; `loom schedule export` before and
/// after a change shows such a rank's ops.
inline constexpr size_t kMaxOrder = 2000;

inline std::string order_line(const Schedule& s, int r) {
  std::string ops;
  for (const Op& op : s.programs[RankId{r}]) ops += " " + to_string(op, s);
  const std::string head = "order " + std::to_string(r) + ":";
  if (ops.size() <= kMaxOrder) return head + ops + "\n";
  std::uint64_t hash = 14695981039346656037ull;
  for (unsigned char c : ops) hash = (hash ^ c) * 1099511628211ull;
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(hash));
  return head + " " + std::to_string(s.programs[RankId{r}].size()) + " ops, fnv1a " + hex + "\n";
}

/// A run's numbers and op order: iteration time, bubble fraction, per-rank busy time and
/// peak memory, every rank's order_line().
inline std::string run_summary(const Schedule& s, const Metrics& m) {
  std::string out = "iteration_time_s " + exact_double(m.iteration_time_s) + "\n";
  out += "bubble_fraction " + exact_double(m.bubble_fraction) + "\n";
  for (const RankMetrics& r : m.per_rank) {
    out += "rank " + to_string(r.rank) + " busy_s " + exact_double(r.busy_s) +
           " peak_memory_bytes " + exact_double(r.peak_memory_bytes) + "\n";
  }
  for (int r = 0; r < s.num_ranks(); ++r) out += order_line(s, r);
  return out;
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

inline std::vector<std::string> split(const std::string& text, char by) {
  std::vector<std::string> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, by);) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

inline bool as_number(const std::string& token, double* value) {
  const auto [ptr, ec] = std::from_chars(token.data(), token.data() + token.size(), *value);
  return ec == std::errc() && ptr == token.data() + token.size();
}

/// Equal, token by token, with numbers to a relative `tolerance`.
inline bool same_line(const std::string& a, const std::string& b, double tolerance) {
  if (a == b) return true;
  const auto x = split(a, ' '), y = split(b, ' ');
  if (x.size() != y.size()) return false;
  for (size_t i = 0; i < x.size(); ++i) {
    double u = 0, v = 0;
    if (x[i] == y[i]) continue;
    if (!as_number(x[i], &u) || !as_number(y[i], &v)) return false;
    if (std::abs(u - v) > tolerance * std::max(std::abs(u), std::abs(v))) return false;
  }
  return true;
}

/// "" when equal; else the differing lines, golden first, with the scheduler they are in.
inline std::string diff(const std::string& golden, const std::string& now) {
  const auto g = split(golden, '\n'), n = split(now, '\n');
  std::string out, scheduler;
  int shown = 0;
  for (size_t i = 0; i < std::max(g.size(), n.size()) && shown < 12; ++i) {
    const std::string a = i < g.size() ? g[i] : "(nothing)";
    const std::string b = i < n.size() ? n[i] : "(nothing)";
    if (a.rfind("scheduler ", 0) == 0) scheduler = a;
    if (same_line(a, b, 1e-9)) continue;
    auto cut = [](const std::string& line) {
      return line.size() > 160 ? line.substr(0, 160) + " ..." : line;
    };
    out += "  line " + std::to_string(i + 1) + " (" + scheduler + ")\n    golden: " + cut(a) +
           "\n    now:    " + cut(b) + "\n";
    ++shown;
  }
  return out;
}

/// Compares `now` with the snapshot at `path` (a gtest failure listing the differing
/// lines), or writes it there when LOOM_REFRESH_GOLDEN is set.
inline void expect_golden(const std::string& path, const std::string& now,
                          const std::string& what) {
  if (std::getenv("LOOM_REFRESH_GOLDEN")) {
    std::filesystem::create_directories(std::filesystem::path(path).parent_path());
    std::ofstream(path, std::ios::binary) << now;
    GTEST_SKIP() << "wrote " << path;
  }
  const std::string golden = read_file(path);
  ASSERT_FALSE(golden.empty()) << path << " is missing: run scripts/refresh_golden.sh";
  const std::string changes = diff(golden, now);
  EXPECT_TRUE(changes.empty())
      << what << " no longer matches " << path << ":\n"
      << changes << "If the change is intended, run scripts/refresh_golden.sh and commit the diff.";
}

}  // namespace loom::test
