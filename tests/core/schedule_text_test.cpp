// The `loom` text form of the Schedule IR: parse(format(s)) == s for every registered
// scheduler on every shipped config, exact doubles, and parse errors that name the line
// and column.
#include "core/schedule_text.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "config_sweep.hpp"
#include "core/errors.hpp"
#include "schedulers/scheduler.hpp"

namespace loom {
namespace {

class ScheduleTextRoundTrip : public ::testing::TestWithParam<std::string> {};

TEST_P(ScheduleTextRoundTrip, EverySchedulerParsesBackEqual) {
  if (test::skip_slow(GetParam())) GTEST_SKIP() << GetParam() << ": slow, set LOOM_SLOW_TESTS=1";
  int planned = 0;
  for (const SchedulerInfo& info : scheduler_registry()) {
    const test::Planned p = test::plan(GetParam(), info.name);
    if (!p.study) continue;  // the scheduler rejects this config (see MultimodalCli)
    ++planned;
    const Schedule& s = p.study->schedule;
    const std::string text = format_schedule(s);
    const Schedule back = parse_schedule(text, GetParam());
    EXPECT_TRUE(back == s) << info.name << " on " << GetParam();
    EXPECT_EQ(format_schedule(back), text) << info.name << " on " << GetParam();
  }
  EXPECT_GE(planned, 1) << GetParam() << ": no scheduler accepts it";
}

INSTANTIATE_TEST_SUITE_P(Configs, ScheduleTextRoundTrip,
                         ::testing::ValuesIn(test::shipped_configs({"examples", "paper", "exec"})),
                         [](const auto& param) { return test::test_name(param.param); });

TEST(ScheduleText, RerunsAreByteIdentical) {
  for (const char* scheduler : {"1f1b", "zb-h1", "interleaved-1f1b", "cornstarch"}) {
    const std::string config = "paper/cornstarch-sss";
    const auto a = test::plan(config, scheduler), b = test::plan(config, scheduler);
    if (!a.study) continue;
    ASSERT_TRUE(b.study);
    EXPECT_EQ(format_schedule(a.study->schedule), format_schedule(b.study->schedule)) << scheduler;
  }
}

TEST(ScheduleText, DoublesReadBackBitForBit) {
  for (double v : {0.0, 0.1, 1.0 / 3, 1e-300, 4.9e-324, 123456789.123456789, 6.02214076e23,
                   std::numeric_limits<double>::max()}) {
    Schedule s = test::ranks_on({0});
    s.scheduler = "hand";
    s.programs[0_rank] = {Compute{.pass = Pass::kF,
                                  .stage = StageId{0},
                                  .microbatch = MicrobatchId{0},
                                  .module = ModuleId{0},
                                  .first_layer = 0,
                                  .end_layer = 1,
                                  .seconds = v,
                                  .activation_bytes = v,
                                  .releases_activation = false,
                                  .weight_grad_s = v}};
    s.static_memory[0_rank] = {v, v, v};
    const Schedule back = parse_schedule(format_schedule(s));
    EXPECT_EQ(std::get<Compute>(back.programs[0_rank][0]).seconds, v) << exact_double(v);
    EXPECT_TRUE(back == s) << exact_double(v);
  }
  EXPECT_EQ(exact_double(0.1), "0.1");
  EXPECT_EQ(exact_double(1e-6), "1e-06");
}

/// Two ranks, two modules, every op kind, every optional field.
Schedule every_kind() {
  Schedule s = test::ranks_on({0, 1});
  s.scheduler = "hand";
  s.module_names = {"vision", "llm"};
  s.groups = {{0_rank, 1_rank}};
  s.samples = {{{SampleId{0}, SampleId{1}}, {}}};
  s.microbatches = 2;
  s.static_memory[1_rank] = {1e9, 2e9, 4e9};
  s.programs[0_rank] = {Compute{.pass = Pass::kF,
                                .stage = StageId{0},
                                .microbatch = MicrobatchId{0},
                                .module = ModuleId{0},
                                .first_layer = 0,
                                .end_layer = 2,
                                .seconds = 1e-3,
                                .activation_bytes = 5e6,
                                .releases_activation = false,
                                .weight_grad_s = 0,
                                .redundant = true},
                        Compute{.pass = Pass::kF,
                                .stage = StageId{0},
                                .microbatch = MicrobatchId{0},
                                .module = ModuleId{0},
                                .first_layer = 0,
                                .end_layer = 2,
                                .seconds = 1e-3,
                                .activation_bytes = 5e6},
                        Send{.peer = 1_rank,
                             .stage = StageId{0},
                             .module = ModuleId{0},
                             .tag = MessageTag{.pass = Pass::kF,
                                               .microbatch = MicrobatchId{0},
                                               .boundary_layer = 3,
                                               .producer_layer = 1},
                             .bytes = 4096},
                        Recv{.peer = 1_rank,
                             .stage = StageId{0},
                             .module = ModuleId{0},
                             .tag = MessageTag{.pass = Pass::kB,
                                               .microbatch = MicrobatchId{0},
                                               .boundary_layer = 3,
                                               .producer_layer = 1},
                             .bytes = 4096},
                        test::compute_op(Pass::kI, 0, 0, 0, 2, 2e-3),
                        Compute{.pass = Pass::kW,
                                .stage = StageId{0},
                                .microbatch = MicrobatchId{0},
                                .module = ModuleId{0},
                                .first_layer = 0,
                                .end_layer = 2,
                                .seconds = 2e-3,
                                .activation_bytes = 0,
                                .releases_activation = true,
                                .weight_grad_s = 2e-3},
                        Collective{.kind = CollectiveKind::kAllGather,
                                   .group = GroupId{0},
                                   .stage = StageId{0},
                                   .module = ModuleId{0},
                                   .bytes = 1e6}};
  s.programs[1_rank] = {Recv{.peer = 0_rank,
                             .stage = StageId{1},
                             .module = ModuleId{1},
                             .tag = MessageTag{.pass = Pass::kF,
                                               .microbatch = MicrobatchId{0},
                                               .boundary_layer = 3,
                                               .producer_layer = 1},
                             .bytes = 4096},
                        Compute{.pass = Pass::kB,
                                .stage = StageId{1},
                                .microbatch = MicrobatchId{0},
                                .module = ModuleId{1},
                                .first_layer = 2,
                                .end_layer = 4,
                                .seconds = 3e-3,
                                .activation_bytes = 0,
                                .releases_activation = true,
                                .weight_grad_s = 1e-3},
                        Send{.peer = 0_rank,
                             .stage = StageId{1},
                             .module = ModuleId{1},
                             .tag = MessageTag{.pass = Pass::kB,
                                               .microbatch = MicrobatchId{0},
                                               .boundary_layer = 3,
                                               .producer_layer = 1},
                             .bytes = 4096},
                        Collective{.kind = CollectiveKind::kAllReduce,
                                   .group = GroupId{0},
                                   .stage = StageId{1},
                                   .module = ModuleId{1},
                                   .bytes = 2e6}};
  // FSDP (lowering/pass_fsdp.cpp): a compute that waits for a prefetched all-gather, and
  // a gradient reduce-scatter.
  std::get<Compute>(s.programs[1_rank][1]).async_pending = 1;
  s.programs[1_rank].push_back(Collective{.kind = CollectiveKind::kReduceScatter,
                                          .stage = StageId{1},
                                          .module = ModuleId{1},
                                          .bytes = 5e5,
                                          .async = true,
                                          .first_layer = 2,
                                          .end_layer = 3});
  // A gradient bucket overlapped with the backward (lowering/gradient_buckets.hpp).
  for (auto& program : s.programs) {
    program.push_back(Collective{.kind = CollectiveKind::kAllReduce,
                                 .stage = StageId{1},
                                 .module = ModuleId{1},
                                 .bytes = 3e6,
                                 .async = true,
                                 .first_layer = 2,
                                 .end_layer = 4});
  }
  return s;
}

TEST(ScheduleText, EveryOpKindAndFieldRoundTrips) {
  const Schedule s = every_kind();
  const std::string text = format_schedule(s);
  EXPECT_NE(text.find("0F0@vision(copy) layers=0:2"), std::string::npos) << text;
  EXPECT_NE(text.find("0SEND_F0:L1>3->1 module=vision bytes=4096"), std::string::npos) << text;
  EXPECT_NE(text.find("ALLREDUCE_s1[g0] module=llm bytes=2e+06"), std::string::npos) << text;
  EXPECT_NE(text.find("ALLREDUCE_s1[g0] module=llm bytes=3e+06 async=1 layers=2:4"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("1B0@llm layers=2:4 seconds=0.003 weight_grad=0.001 release=1 wait=1"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("REDUCESCATTER_s1[g0] module=llm bytes=5e+05 async=1 layers=2:3"),
            std::string::npos)
      << text;
  EXPECT_TRUE(parse_schedule(text) == s) << text;
  EXPECT_TRUE(is_loom_schedule_text(text));
  EXPECT_FALSE(is_loom_schedule_text("0F0,0B0\n"));
  // A field that changes must make the schedules differ (equality is not vacuous).
  Schedule other = s;
  std::get<Compute>(other.programs[1_rank][1]).weight_grad_s = 2e-3;
  EXPECT_FALSE(other == s);
  other = s;
  std::get<Send>(other.programs[0_rank][2]).tag.producer_layer = 2;
  EXPECT_FALSE(other == s);
  other = s;
  std::get<Compute>(other.programs[1_rank][1]).async_pending = 0;
  EXPECT_FALSE(other == s);
}

/// The message parse_schedule throws for `text`, or "" when it parses.
std::string parse_error(const std::string& text) {
  try {
    parse_schedule(text, "f.loom");
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

/// `text` with the first `from` after `after` replaced by `to`.
std::string edit(std::string text, const std::string& from, const std::string& to,
                 const std::string& after = "") {
  const size_t at = text.find(from, text.find(after));
  EXPECT_NE(at, std::string::npos) << from;
  return text.replace(at, from.size(), to);
}

/// "f.loom:LINE:COL:" of the first `needle` in `text` (1-based), plus `shift` columns.
std::string position(const std::string& text, const std::string& needle, int shift = 0) {
  const size_t at = text.find(needle);
  const size_t line_start =
      text.rfind('\n', at) == std::string::npos ? 0 : text.rfind('\n', at) + 1;
  const int line =
      1 + static_cast<int>(std::count(text.begin(), text.begin() + static_cast<long>(at), '\n'));
  return "f.loom:" + std::to_string(line) + ":" +
         std::to_string(static_cast<int>(at - line_start) + 1 + shift) + ":";
}

TEST(ScheduleText, AFoldedScheduleKeepsItsFold) {
  Schedule s = every_kind();
  EXPECT_EQ(format_schedule(s).find("replica_fold"), std::string::npos);  // unfolded: no line
  s.replica_fold = 32;
  const std::string text = format_schedule(s);
  EXPECT_NE(text.find("\nreplica_fold 32\n"), std::string::npos);
  EXPECT_TRUE(parse_schedule(text) == s);
  const std::string zero = edit(text, "replica_fold 32", "replica_fold 0");
  EXPECT_NE(parse_error(zero).find("replica_fold must be at least 1"), std::string::npos)
      << parse_error(zero);
}

TEST(ScheduleText, ParseErrorsNameLineAndColumn) {
  const std::string text = format_schedule(every_kind());
  struct Case {
    std::string text, at, mentions;
  };
  const std::string bad_pass = edit(text, "1B0", "1X0");
  const std::string bad_number = edit(text, "bytes=4096", "bytes=4k");
  const std::string bad_key = edit(text, "bytes=4096", "size=4096");
  const std::string bad_module = edit(text, "0F0@vision(copy)", "0F0@audio(copy)");
  const std::string bad_peer = edit(text, "->1 module", "->7 module");
  const std::string bad_group = edit(text, "[g0] module=llm", "[g3] module=llm");
  const std::string bad_magic = edit(text, "loom-schedule 1", "loom-schedule 2");
  const std::string trailing = edit(text, "0I0@", "0I0x@");
  for (const Case& c : std::vector<Case>{
           {bad_pass, position(bad_pass, "1X0", 1), "expected a pass"},
           {bad_number, position(bad_number, "4k", 0), "expected a number, found '4k'"},
           {bad_key, position(bad_key, "size="), "unknown key 'size'"},
           {bad_module, position(bad_module, "audio"), "unknown module 'audio'"},
           {bad_peer, position(bad_peer, "7 module"), "peer rank 7 does not exist"},
           {bad_group, position(bad_group, "3] module"), "group 3 does not exist"},
           {bad_magic, position(bad_magic, "loom-schedule"), "not a Loom schedule file"},
           {trailing, position(trailing, "x@"), "unexpected 'x@vision' after the operation"},
       }) {
    const std::string error = parse_error(c.text);
    EXPECT_EQ(error.rfind(c.at, 0), 0u) << "expected at " << c.at << ": " << error;
    EXPECT_NE(error.find(c.mentions), std::string::npos) << error;
  }
}

TEST(ScheduleText, CountsAndSectionsAreChecked) {
  const std::string text = format_schedule(every_kind());
  // Op lines are free to add or drop; the rank lines must stay in order.
  const std::string dropped = edit(text, "  0I0@vision layers=0:2 seconds=0.002\n", "");
  EXPECT_EQ(parse_error(dropped), "");
  EXPECT_EQ(parse_schedule(dropped).programs[0_rank].size(),
            every_kind().programs[0_rank].size() - 1);
  const std::string swapped = edit(text, "rank 1 gpu", "rank 2 gpu");
  std::string error = parse_error(swapped);
  EXPECT_EQ(error.rfind(position(swapped, "2 gpu"), 0), 0u) << error;
  EXPECT_NE(error.find("ranks come in order from 0"), std::string::npos) << error;
  error = parse_error(edit(text, "end\n", ""));
  EXPECT_NE(error.find("unexpected end of file, expected 'end'"), std::string::npos) << error;
  error = parse_error(text + "rank 2\n");
  EXPECT_NE(error.find("unexpected text after 'end'"), std::string::npos) << error;
  error = parse_error(edit(text, "modules 2 vision llm", "modules 3 vision llm"));
  EXPECT_NE(error.find("says 3 module(s) but names 2"), std::string::npos) << error;
  // Comments, blank lines, CRLF and indentation are free.
  std::string loose = "# a comment\n\n" + edit(text, "  0I0", "\t\t0I0") + "# done\n";
  for (size_t at = 0; (at = loose.find('\n', at)) != std::string::npos; at += 2)
    loose.insert(at, "\r");
  EXPECT_EQ(parse_error(loose), "");
}

}  // namespace
}  // namespace loom
