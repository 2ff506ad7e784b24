// Progress lines of a long backend run: at most one per interval, each with the share done
// and an estimate of the time left from the rate so far.
#include "app/run_progress.hpp"

#include <gtest/gtest.h>

namespace loom {
namespace {

TEST(RunProgress, OneLinePerIntervalWithTheTimeLeft) {
  RunProgress progress("SimGrid", 10);
  EXPECT_FALSE(progress.update(0.05, 4));  // too soon: quick runs print nothing
  const auto first = progress.update(0.25, 12);
  ASSERT_TRUE(first);
  // 12 s for a quarter: three quarters more at that rate.
  EXPECT_EQ(*first, "SimGrid 25.0% of operations done after 12 s, about 36 s left");
  EXPECT_FALSE(progress.update(0.3, 20));  // 8 s after the last line
  const auto second = progress.update(0.5, 150);
  ASSERT_TRUE(second);
  EXPECT_EQ(*second, "SimGrid 50.0% of operations done after 2 min 30 s, about 2 min 30 s left");
}

TEST(RunProgress, SetupTimeIsNotCountedInTheRate) {
  // 11 s building the platform, then 10 s for 5 %: the rate is 5 % per 10 s.
  RunProgress progress("SimGrid", 10);
  EXPECT_FALSE(progress.update(0, 11));
  const auto line = progress.update(0.05, 21);
  ASSERT_TRUE(line);
  EXPECT_EQ(*line,
            "SimGrid 5.0% of operations done after 21 s (11 s of it setting up), about 3 min 10 "
            "s left");
}

TEST(RunProgress, DurationsReadAsAPersonWouldSayThem) {
  EXPECT_EQ(duration_text(0.4), "0 s");
  EXPECT_EQ(duration_text(59.6), "1 min 0 s");
  EXPECT_EQ(duration_text(3 * 3600 + 5 * 60 + 9), "3 h 05 min");
}

}  // namespace
}  // namespace loom
