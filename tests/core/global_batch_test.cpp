// schedule.global_batch (core/config.cpp): samples per iteration, from which the
// microbatches per replica follow, so a sweep over microbatch_size or dp keeps the batch.
#include <gtest/gtest.h>

#include "core/config.hpp"
#include "core/errors.hpp"
#include "test_support.hpp"

namespace loom {
namespace {

Config with(const std::vector<std::string>& overrides) {
  return load_config(test::source_path("configs/examples/uniform-1f1b.toml"), overrides);
}

std::string error_of(const std::vector<std::string>& overrides) {
  return test::input_error([&] { with(overrides); });
}

TEST(GlobalBatch, MicrobatchesFollowFromTheBatchTheMicrobatchSizeAndTheReplicas) {
  // Over microbatch size x dp the batch stays 64 samples (uniform-1f1b: pp 4 on 8 GPUs).
  for (const auto& [size, dp, microbatches] :
       std::vector<std::tuple<int, int, int>>{{1, 1, 64}, {2, 1, 32}, {4, 2, 8}, {8, 2, 4}}) {
    const Config c =
        with({"schedule.global_batch=64", "schedule.microbatch_size=" + std::to_string(size),
              "parallel.dp=" + std::to_string(dp)});
    EXPECT_EQ(c.schedule.microbatches, microbatches) << size << " x " << dp;
    EXPECT_EQ(c.schedule.microbatches * size * dp, 64);
  }
  // Without the key the config resolves as before: 8 microbatches from the file.
  EXPECT_EQ(with({}).schedule.microbatches, 8);
  EXPECT_EQ(with({}).schedule.global_batch, 0);
}

TEST(GlobalBatch, ABatchThatDoesNotSplitNamesTheNearestThatDo) {
  EXPECT_NE(error_of({"schedule.global_batch=30", "parallel.dp=2", "schedule.microbatch_size=4"})
                .find("key 'schedule.global_batch': 30 samples do not split into microbatches of 4 "
                      "over 2 data-parallel replicas (8 samples a step); use 24 or 32"),
            std::string::npos);
}

TEST(GlobalBatch, ItOverridesTheFilesMicrobatchesButNotOnesSetBesideIt) {
  // The file says microbatches = 8; a --set global batch wins over it.
  EXPECT_EQ(with({"schedule.global_batch=16"}).schedule.microbatches, 16);
  // Both on the command line, disagreeing: exit 2 naming both keys.
  const std::string e = error_of({"schedule.global_batch=16", "schedule.microbatches=4"});
  EXPECT_NE(e.find("key 'schedule.microbatches': 4 disagrees with schedule.global_batch = 16"),
            std::string::npos)
      << e;
  EXPECT_EQ(error_of({"schedule.global_batch=16", "schedule.microbatches=16"}), "(no InputError)");
}

}  // namespace
}  // namespace loom
