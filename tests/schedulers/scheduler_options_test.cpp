// Scheduler-owned options (schedulers/scheduler_options.hpp): a [schedule.<name>] table
// applies to its scheduler only, flat keys of earlier releases still apply with a warning
// naming the new key, and every bad table, key or value is an InputError naming the file,
// line, key and the nearest spelling.
#include "schedulers/scheduler_options.hpp"

#include <gtest/gtest.h>

#include "core/errors.hpp"
#include "core/spelling.hpp"
#include "schedulers/scheduler.hpp"
#include "test_support.hpp"

namespace loom {
namespace {

using test::input_error;

constexpr const char* kModel =
    "[[model.modules]]\nname = \"llm\"\nkind = \"llm\"\nlayers = 8\nhidden = 1024\n"
    "[cost]\nmodel = \"table\"\n[cost.table.llm]\nforward = \"1ms\"\nbackward = \"2ms\"\n"
    "[cluster]\nnodes = 1\ngpus_per_node = 8\n[parallel]\npp = 4\n";

Config load(const test::TempDir& dir, const std::string& schedule,
            const std::vector<std::string>& overrides = {}) {
  return load_config(dir.write("c.toml", std::string(kModel) + schedule), overrides);
}

struct Looped {
  int chunks = 1;
  std::string order = "a";
  bool eager = true;
  double cap = 0;
  std::vector<int> stages;
};
const OptionSet<Looped> kLooped{
    {"chunks", &Looped::chunks, "chunks per rank", at_least(1)},
    {"order", &Looped::order, "an order", one_of({"a", "b"}).formerly("looped_order")},
    {"eager", &Looped::eager, "eager forwards"},
    {"cap", &Looped::cap, "a cap, GB", at_least(0)},
    {"stages", &Looped::stages, "stages", at_least(0)},
};

TEST(SchedulerOptions, DefaultsThenTheFlatKeyThenTheTable) {
  test::TempDir dir;
  EXPECT_EQ(kLooped.read(load(dir, "[schedule]\n").schedule, "looped-bfs").chunks, 1);
  const Config flat = load(dir, "[schedule]\nchunks = 3\nlooped_order = \"b\"\n");
  const Looped f = kLooped.read(flat.schedule, "looped-bfs");
  EXPECT_EQ(f.chunks, 3);
  EXPECT_EQ(f.order, "b");  // read under its former flat name
  const Config both = load(dir,
                           "[schedule]\nchunks = 3\n[schedule.looped-bfs]\nchunks = 2\n"
                           "eager = false\ncap = 1.5\nstages = [1, 2]\n");
  const Looped b = kLooped.read(both.schedule, "looped-bfs");
  EXPECT_EQ(b.chunks, 2);
  EXPECT_FALSE(b.eager);
  EXPECT_DOUBLE_EQ(b.cap, 1.5);
  EXPECT_EQ(b.stages, (std::vector<int>{1, 2}));
  // Another scheduler's table is not this one's; the flat key applies to both.
  EXPECT_EQ(kLooped.read(both.schedule, "interleaved-zb").chunks, 3);
}

TEST(SchedulerOptions, BadValuesNameTheFileLineKeyAndWhatIsAccepted) {
  test::TempDir dir;
  const Config c = load(dir, "[schedule.looped-bfs]\nchunks = 0\norder = \"c\"\n");
  std::string e = input_error([&] { kLooped.read(c.schedule, "looped-bfs"); });
  EXPECT_NE(e.find("c.toml:17: key 'schedule.looped-bfs.chunks': expected an integer >= 1, got 0"),
            std::string::npos)
      << e;
  const Config word = load(dir, "[schedule.looped-bfs]\nchunks = \"two\"\n");
  e = input_error([&] { kLooped.read(word.schedule, "looped-bfs"); });
  EXPECT_NE(e.find("expected an integer >= 1, got \"two\""), std::string::npos) << e;
  const Config choice = load(dir, "[schedule.looped-bfs]\norder = \"bb\"\n");
  e = input_error([&] { kLooped.read(choice.schedule, "looped-bfs"); });
  EXPECT_NE(e.find("'bb' is not one of \"a\" | \"b\" (did you mean 'b'?)"), std::string::npos) << e;
  const Config set = load(dir, "[schedule]\n", {"schedule.looped-bfs.chunks=-1"});
  e = input_error([&] { kLooped.read(set.schedule, "looped-bfs"); });
  EXPECT_NE(e.find("c.toml (--set): key 'schedule.looped-bfs.chunks'"), std::string::npos) << e;
}

TEST(SchedulerOptions, SpecsCarryDefaultsAndTypes) {
  const std::vector<OptionSpec> specs = kLooped.specs();
  ASSERT_EQ(specs.size(), 5u);
  EXPECT_EQ(specs[0].default_text, "1");
  EXPECT_EQ(specs[0].type_text(), "an integer >= 1");
  EXPECT_EQ(specs[1].default_text, "\"a\"");
  EXPECT_EQ(specs[1].legacy_key(), "looped_order");
  EXPECT_EQ(specs[2].default_text, "true");
  EXPECT_EQ(specs[3].default_text, "0");
  EXPECT_EQ(specs[4].default_text, "[]");
}

TEST(SchedulerOptions, TheLoadCheckRejectsUnknownTablesAndKeysWithTheNearestName) {
  test::TempDir dir;
  std::string e = input_error([&] {
    check_scheduler_options(load(dir, "[schedule.interleaved-1fb1]\nchunks = 2\n").schedule);
  });
  EXPECT_NE(e.find("c.toml:17: table [schedule.interleaved-1fb1]: no scheduler is named"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("(did you mean 'interleaved-1f1b'?)"), std::string::npos) << e;
  e = input_error([&] {
    check_scheduler_options(load(dir, "[schedule.interleaved-1f1b]\nchunk = 2\n").schedule);
  });
  EXPECT_NE(e.find("key 'schedule.interleaved-1f1b.chunk': interleaved-1f1b has no option 'chunk' "
                   "(did you mean 'chunks'?) (its options: chunks, microbatch_group_size, "
                   "overlap_moe_a2a)"),
            std::string::npos)
      << e;
  e = input_error(
      [&] { check_scheduler_options(load(dir, "[schedule.gpipe]\nchunks = 2\n").schedule); });
  EXPECT_NE(e.find("gpipe takes no options"), std::string::npos) << e;
  e = input_error(
      [&] { check_scheduler_options(load(dir, "[schedule]\nmicrobatchs = 2\n").schedule); });
  EXPECT_NE(e.find("key 'schedule.microbatchs': unknown key (did you mean 'microbatches'?)"),
            std::string::npos)
      << e;
  e = input_error(
      [&] { check_scheduler_options(load(dir, "[schedule.dip]\nseed = -1\n").schedule); });
  EXPECT_NE(e.find("key 'schedule.dip.seed': expected an integer >= 0, got -1"), std::string::npos)
      << e;
}

TEST(SchedulerOptions, AFlatKeyWarnsNamingEveryTableThatTakesIt) {
  test::TempDir dir;
  const auto warnings =
      check_scheduler_options(load(dir, "[schedule]\nname = \"1f1b\"\nchunks = 2\n").schedule);
  ASSERT_EQ(warnings.size(), 1u);
  const std::string& w = warnings[0];
  EXPECT_NE(w.find("c.toml:18: schedule.chunks is deprecated"), std::string::npos) << w;
  for (const char* table :
       {"[schedule.interleaved-1f1b] chunks = 2", "[schedule.looped-bfs] chunks = 2",
        "[schedule.interleaved-zb] chunks = 2"})
    EXPECT_NE(w.find(table), std::string::npos) << w;
  EXPECT_NE(w.find("(schedule.name = \"1f1b\" has no such option: ignored)"), std::string::npos)
      << w;
  const auto renamed =
      check_scheduler_options(load(dir, "[schedule]\nname = \"dip\"\ndip_seed = 3\n").schedule);
  ASSERT_EQ(renamed.size(), 1u);
  EXPECT_NE(renamed[0].find("[schedule.dip] seed = 3, [schedule.omnibal] seed = 3"),
            std::string::npos)
      << renamed[0];
  EXPECT_EQ(renamed[0].find("ignored"), std::string::npos) << renamed[0];
}

TEST(SchedulerOptions, ADegenerateFormWarnsThatItIsAnotherScheduler) {
  // interleaved-1f1b with one chunk (its default) runs 1F1B's order with more memory.
  test::TempDir dir;
  auto warnings_for = [&](const std::string& schedule) {
    return check_scheduler_options(load(dir, schedule).schedule);
  };
  const auto by_default = warnings_for("[schedule]\nname = \"interleaved-1f1b\"\n");
  ASSERT_EQ(by_default.size(), 1u);
  EXPECT_NE(by_default[0].find("schedule.interleaved-1f1b.chunks = 1 (the default): one chunk "
                               "per rank runs 1F1B's order; set chunks >= 2"),
            std::string::npos)
      << by_default[0];
  const auto stated = warnings_for(
      "[schedule]\nname = \"interleaved-1f1b\"\n[schedule.interleaved-1f1b]\nchunks = 1\n");
  ASSERT_EQ(stated.size(), 1u);
  EXPECT_EQ(stated[0].find("(the default)"), std::string::npos) << stated[0];
  EXPECT_TRUE(warnings_for("[schedule]\nname = \"interleaved-1f1b\"\n"
                           "[schedule.interleaved-1f1b]\nchunks = 2\n")
                  .empty());
  // Only the selected scheduler's form counts.
  EXPECT_TRUE(warnings_for("[schedule]\nname = \"1f1b\"\n").empty());
}

TEST(SchedulerOptions, EveryRegisteredOptionIsDocumentedAndItsDefaultReadsBack) {
  for (const SchedulerInfo& info : scheduler_registry()) {
    for (const OptionSpec& spec : info.option_specs()) {
      EXPECT_FALSE(spec.help.empty()) << info.name << " " << spec.key;
      EXPECT_FALSE(spec.default_text.empty()) << info.name << " " << spec.key;
      if (spec.kind == OptionKind::kChoice) {
        EXPECT_FALSE(spec.limits.choices.empty()) << spec.key;
      }
    }
  }
}

TEST(Spelling, EditDistanceAndTheNearestCloseName) {
  EXPECT_EQ(edit_distance("", "abc"), 3);
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3);
  EXPECT_EQ(edit_distance("hiden", "hidden"), 1);
  EXPECT_EQ(closest_spelling("hiden", {"heads", "hidden"}), "hidden");
  EXPECT_EQ(closest_spelling("kv_head", {"heads", "kv_heads"}), "kv_heads");
  EXPECT_EQ(closest_spelling("paralel", {"parallel", "schedule"}), "parallel");
  EXPECT_EQ(closest_spelling("xyz", {"parallel", "schedule"}), "");
  EXPECT_EQ(did_you_mean("zbv", {"zb-v", "zb-h1"}), " (did you mean 'zb-v'?)");
}

}  // namespace
}  // namespace loom
