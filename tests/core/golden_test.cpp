// Golden outputs (SimGrid's .tesh files are the model): for every config of
// configs/examples and configs/paper and every registered scheduler, the evaluator's
// iteration time, bubble fraction, per-rank busy time and peak memory, and every rank's op
// order, compared with the snapshot in tests/golden/. Op order and rejections must match
// exactly, numbers to a relative 1e-9. A deliberate change is refreshed by
// scripts/refresh_golden.sh (LOOM_REFRESH_GOLDEN=1 makes this test write the files).
#include <gtest/gtest.h>

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "config_sweep.hpp"
#include "core/evaluator.hpp"
#include "core/schedule_text.hpp"
#include "core/timeline.hpp"
#include "schedulers/scheduler.hpp"

namespace loom {
namespace {

std::string golden_path(const std::string& config) {
  return test::source_path("tests/golden/" + config + ".txt");
}

/// Rank r's ops in order, as schedule.txt writes them. A program longer than kMaxOrder
/// characters (thousands of microbatches: the Oobleck and Entrain configs) is kept as its
/// length and FNV-1a hash, so the snapshots stay small; `loom schedule export` before and
/// after a change shows such a rank's ops.
constexpr size_t kMaxOrder = 2000;

std::string order_line(const Schedule& s, int r) {
  std::string ops;
  for (const Op& op : s.programs[static_cast<size_t>(r)]) ops += " " + to_string(op, s);
  const std::string head = "order " + std::to_string(r) + ":";
  if (ops.size() <= kMaxOrder) return head + ops + "\n";
  std::uint64_t hash = 14695981039346656037ull;
  for (unsigned char c : ops) hash = (hash ^ c) * 1099511628211ull;
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(hash));
  return head + " " + std::to_string(s.programs[static_cast<size_t>(r)].size()) + " ops, fnv1a " +
         hex + "\n";
}

/// The snapshot of one config: one section per registered scheduler.
std::string snapshot(const std::string& config) {
  std::string out = "# Golden output of configs/" + config +
                    ".toml for every registered scheduler, contention-free evaluator.\n"
                    "# Regenerate with scripts/refresh_golden.sh; tests/core/golden_test.cpp "
                    "compares.\n";
  for (const SchedulerInfo& info : scheduler_registry()) {
    out += "scheduler " + std::string(info.name) + "\n";
    const test::Planned p = test::plan(config, info.name);
    if (!p.study) {
      out += "rejected " + p.rejected + "\n";
      continue;
    }
    const Schedule& s = p.study->schedule;
    const Metrics m = compute_metrics(s, evaluate(s, p.study->config.cluster));
    out += "iteration_time_s " + exact_double(m.iteration_time_s) + "\n";
    out += "bubble_fraction " + exact_double(m.bubble_fraction) + "\n";
    for (const RankMetrics& r : m.per_rank) {
      out += "rank " + std::to_string(r.rank) + " busy_s " + exact_double(r.busy_s) +
             " peak_memory_bytes " + exact_double(r.peak_memory_bytes) + "\n";
    }
    for (int r = 0; r < s.num_ranks(); ++r) out += order_line(s, r);
  }
  return out;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::vector<std::string> split(const std::string& text, char by) {
  std::vector<std::string> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, by);) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

bool as_number(const std::string& token, double* value) {
  const auto [ptr, ec] = std::from_chars(token.data(), token.data() + token.size(), *value);
  return ec == std::errc() && ptr == token.data() + token.size();
}

/// Equal, token by token, with numbers to a relative `tolerance`.
bool same_line(const std::string& a, const std::string& b, double tolerance) {
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
std::string diff(const std::string& golden, const std::string& now) {
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

class Golden : public ::testing::TestWithParam<std::string> {};

TEST_P(Golden, MatchesTheSnapshot) {
  const std::string config = GetParam();
  if (test::skip_slow(config)) GTEST_SKIP() << config << ": slow, set LOOM_SLOW_TESTS=1";
  const std::string now = snapshot(config);
  const std::string path = golden_path(config);
  if (std::getenv("LOOM_REFRESH_GOLDEN")) {
    std::filesystem::create_directories(std::filesystem::path(path).parent_path());
    std::ofstream(path, std::ios::binary) << now;
    GTEST_SKIP() << "wrote " << path;
  }
  const std::string golden = read_file(path);
  ASSERT_FALSE(golden.empty()) << path << " is missing: run scripts/refresh_golden.sh";
  const std::string changes = diff(golden, now);
  EXPECT_TRUE(changes.empty())
      << "configs/" << config << ".toml no longer matches " << path << ":\n"
      << changes << "If the change is intended, run scripts/refresh_golden.sh and commit the diff.";
}

INSTANTIATE_TEST_SUITE_P(Configs, Golden, ::testing::ValuesIn(test::shipped_configs()),
                         [](const auto& param) { return test::test_name(param.param); });

TEST(GoldenDiff, NumbersWithinToleranceOthersExact) {
  EXPECT_TRUE(same_line("iteration_time_s 0.1", "iteration_time_s 0.10000000000000001", 1e-9));
  EXPECT_FALSE(same_line("iteration_time_s 0.1", "iteration_time_s 0.1000001", 1e-9));
  EXPECT_FALSE(same_line("order 0: 0F0 0F1", "order 0: 0F1 0F0", 1e-9));
  const std::string d =
      diff("scheduler 1f1b\nbubble_fraction 0.5\n", "scheduler 1f1b\nbubble_fraction 0.6\n");
  EXPECT_NE(d.find("line 2 (scheduler 1f1b)"), std::string::npos) << d;
  EXPECT_NE(d.find("golden: bubble_fraction 0.5"), std::string::npos) << d;
  EXPECT_EQ(diff("a\nb\n", "a\nb\n"), "");
}

}  // namespace
}  // namespace loom
