#include "core/units.hpp"

#include <gtest/gtest.h>

namespace loom {

TEST(Units, SecondsWithSuffixes) {
  EXPECT_DOUBLE_EQ(*parse_seconds("0.5ms"), 0.5e-3);
  EXPECT_DOUBLE_EQ(*parse_seconds("24us"), 24e-6);
  EXPECT_DOUBLE_EQ(*parse_seconds("2"), 2.0);
  EXPECT_DOUBLE_EQ(*parse_seconds("3 min"), 180.0);
  EXPECT_FALSE(parse_seconds("fast"));
  EXPECT_FALSE(parse_seconds("1parsec"));
}

TEST(Units, BandwidthDistinguishesBitsAndBytes) {
  EXPECT_DOUBLE_EQ(*parse_bandwidth("25GBps"), 25e9);
  EXPECT_DOUBLE_EQ(*parse_bandwidth("200Gbps"), 25e9);
  EXPECT_FALSE(parse_bandwidth("25 GB"));
}

TEST(Units, BytesAndFlops) {
  EXPECT_DOUBLE_EQ(*parse_bytes("48GiB"), 48.0 * 1024 * 1024 * 1024);
  EXPECT_DOUBLE_EQ(*parse_bytes("80GB"), 80e9);
  EXPECT_DOUBLE_EQ(*parse_flops("312TFLOPS"), 312e12);
}

}  // namespace loom
