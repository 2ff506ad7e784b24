// Timeline writers: the Chrome trace must load in Perfetto, which drops X events that
// overlap on one thread.
#include "core/timeline.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "core/evaluator.hpp"
#include "test_support.hpp"

namespace loom {

TEST(ChromeTrace, NoTwoEventsOverlapOnOneThreadAndEveryOpHasOne) {
  // 1F1B with real messages: eager sends overlap each other and the receives.
  const auto study = test::example("uniform-1f1b.toml", {"cost.table.llm.output_bytes=1GiB"});
  const Timeline timeline = evaluate(study->schedule, study->config.cluster);
  test::TempDir dir;
  write_chrome_trace(dir.path("t.json"), study->schedule, timeline);
  std::ifstream in(dir.path("t.json"));
  const auto trace = nlohmann::json::parse(in);
  std::map<std::pair<int, int>, std::vector<std::pair<long long, long long>>> slices;  // ns
  size_t events = 0;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] != "X") continue;
    ++events;
    const auto ts = std::llround(e["ts"].get<double>() * 1e3),
               dur = std::llround(e["dur"].get<double>() * 1e3);
    slices[{e["pid"].get<int>(), e["tid"].get<int>()}].push_back({ts, ts + dur});
  }
  EXPECT_EQ(events, study->schedule.num_ops());
  bool sends_needed_lanes = false;
  for (auto& [thread, list] : slices) {
    std::sort(list.begin(), list.end());
    for (size_t k = 1; k < list.size(); ++k) {
      EXPECT_LE(list[k - 1].second, list[k].first)
          << "rank " << thread.first << " thread " << thread.second;
    }
    sends_needed_lanes |= thread.second > 2;
  }
  EXPECT_TRUE(sends_needed_lanes);  // the case this guards against actually occurs
}

TEST(Writers, AFailedWriteIsAnErrorNotATruncatedFile) {
  // /dev/full accepts the open and fails every write with ENOSPC, like a full disk.
  if (!std::ifstream("/dev/full")) GTEST_SKIP() << "no /dev/full";
  const std::vector<MemorySample> samples(1000, MemorySample{.rank = 0_rank,
                                                             .time_s = 0.0,
                                                             .parameters = 1e9,
                                                             .gradients = 1e9,
                                                             .optimizer = 1e9,
                                                             .activations = 1e9});
  EXPECT_THROW(write_memory_csv("/dev/full", samples), std::runtime_error);
}

}  // namespace loom
