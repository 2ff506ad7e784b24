// PyTorch pipelining's action CSV: export from the IR, import through Loom's lowering, and
// the round trip 1F1B / interleaved 1F1B (Megatron's groups too) / ZB-H1 / ZB-V (V
// placement) / looped BFS / interleaved ZB -> CSV -> Loom giving the same schedule.
#include "app/pytorch_csv.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <regex>
#include <sstream>

#include "core/errors.hpp"
#include "core/evaluator.hpp"
#include "core/timeline.hpp"
#include "core/validate.hpp"
#include "test_support.hpp"

namespace loom {
namespace {

std::unique_ptr<Study> uniform(const std::string& scheduler, int pp, int m, int chunks = 1,
                               int dp = 1, int group = 0) {
  std::vector<std::string> overrides = {
      "schedule.name=" + scheduler, "parallel.pp=" + std::to_string(pp),
      "schedule.microbatches=" + std::to_string(m), "parallel.dp=" + std::to_string(dp)};
  if (chunks != 1)
    overrides.push_back("schedule." + scheduler + ".chunks=" + std::to_string(chunks));
  if (group != 0)
    overrides.push_back("schedule." + scheduler +
                        ".microbatch_group_size=" + std::to_string(group));
  return test::example("uniform-1f1b.toml", overrides);
}

std::string import_error(const Study& study, const std::string& csv) {
  try {
    import_pytorch_csv(study.problem, csv, "s.csv");
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(PytorchCsv, ExportsOneRowOfActionsPerRank) {
  const auto study = uniform("1f1b", 2, 3, 1, 2);
  // Replica 0 only (replica 1 runs the same program); stage 0 warms up with one forward.
  EXPECT_EQ(format_pytorch_csv(study->schedule, false),
            "0F0,0F1,0B0,0F2,0B1,0B2\n"
            "1F0,1B0,1F1,1B1,1F2,1B2\n");
  EXPECT_EQ(format_pytorch_csv(study->schedule, true),
            "0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0F2,0SEND_F2,0RECV_B1,0B1,0RECV_B2,0B2\n"
            "1RECV_F0,1F0,1B0,1SEND_B0,1RECV_F1,1F1,1B1,1SEND_B1,1RECV_F2,1F2,1B2,1SEND_B2\n");
  // Gradient all-reduces are REDUCE_GRAD (this table's layers have no parameters: none
  // above); the segments of a multi-module stage are one action; copies are left out.
  Schedule s = test::ranks_on({0, 1});
  s.module_names = {"vision", "llm"};
  s.groups = {{0_rank, 1_rank}};
  Compute copy = test::compute_op(Pass::kF, 0, 0, 0, 1, 1e-3);
  copy.redundant = true;
  s.programs[0_rank] = {copy, test::compute_op(Pass::kF, 0, 0, 0, 1, 1e-3),
                        Compute{.pass = Pass::kF,
                                .stage = StageId{0},
                                .microbatch = MicrobatchId{0},
                                .module = ModuleId{1},
                                .first_layer = 1,
                                .end_layer = 2,
                                .seconds = 1e-3},
                        Collective{.kind = CollectiveKind::kAllReduce,
                                   .group = GroupId{0},
                                   .stage = StageId{0},
                                   .module = ModuleId{1},
                                   .bytes = 1e6}};
  s.programs[1_rank] = {Collective{.kind = CollectiveKind::kAllReduce,
                                   .group = GroupId{0},
                                   .stage = StageId{0},
                                   .module = ModuleId{1},
                                   .bytes = 1e6}};
  s.ranks[1_rank].replica = ReplicaId{1};
  EXPECT_EQ(format_pytorch_csv(s, true), "0F0,0REDUCE_GRAD\n");
  EXPECT_EQ(format_pytorch_csv(s, false), "0F0\n");
}

TEST(PytorchCsv, FsdpGatheringPerMicrobatchExportsItsComputesButNotItsCommunication) {
  // PyTorch's UNSHARD / RESHARD hold a stage across the step; a layer gathered again
  // (reshard_after_forward) has no action.
  const Schedule s = test::prefetched_gathers(1e-3, 1e6);  // two ranks, one stage each
  EXPECT_EQ(format_pytorch_csv(s, false), "0F0\n0F0\n");
  try {
    format_pytorch_csv(s, true);
    FAIL() << "expected a refusal";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("--set parallel.fsdp_reshard_after_forward=false"),
              std::string::npos)
        << e.what();
  }
  const auto per_microbatch =
      test::megatron_gpt({"parallel.fsdp=true", "parallel.fsdp_reshard_after_forward=true"});
  EXPECT_THROW(format_pytorch_csv(per_microbatch->schedule, true), InputError);
}

TEST(PytorchCsv, FsdpHeldAcrossTheStepIsUnshardReduceGradAndReshardPerStage) {
  // torchtitan under pipelining: each stage UNSHARDs before its first compute, and after
  // its last backward its gradients are reduced (REDUCE_GRAD) and it is freed (RESHARD).
  for (const char* scheduler : {"gpipe", "1f1b", "zb-h1"}) {
    const auto study =
        test::megatron_gpt({"parallel.fsdp=true", "schedule.name=" + std::string(scheduler)});
    const int pp = study->problem.parallel.pp;
    const std::string csv = format_pytorch_csv(study->schedule, true);
    std::stringstream rows(csv);
    int rank = 0;
    for (std::string row; std::getline(rows, row); ++rank) {
      std::vector<std::string> cells;
      std::stringstream fields(row);
      for (std::string cell; std::getline(fields, cell, ',');) cells.push_back(cell);
      {
        const std::string s = std::to_string(rank);  // one stage per rank
        auto at = [&](const std::string& action) {
          return std::find(cells.begin(), cells.end(), s + action) - cells.begin();
        };
        auto last_backward = [&] {
          std::ptrdiff_t last = -1;
          for (std::ptrdiff_t i = 0; i < std::ssize(cells); ++i)
            if (std::regex_match(cells[i], std::regex(s + "[BW]\\d+"))) last = i;
          return last;
        };
        EXPECT_EQ(std::count(cells.begin(), cells.end(), s + "UNSHARD"), 1) << scheduler << row;
        EXPECT_EQ(std::count(cells.begin(), cells.end(), s + "REDUCE_GRAD"), 1) << row;
        EXPECT_LT(at("UNSHARD"), at("F0")) << scheduler << " " << row;
        EXPECT_EQ(at("REDUCE_GRAD"), last_backward() + 1) << scheduler << " " << row;
        EXPECT_EQ(at("RESHARD"), at("REDUCE_GRAD") + 1) << scheduler << " " << row;
      }
    }
    EXPECT_EQ(rank, pp);
    // Imported with the same config (parallel.fsdp), the lowering adds the same gathers.
    Schedule imported = import_pytorch_csv(study->problem, csv, "s.csv");
    imported.scheduler = study->schedule.scheduler;
    EXPECT_TRUE(imported == study->schedule) << scheduler;
    EXPECT_EQ(format_pytorch_csv(imported, true), csv) << scheduler;
  }
}

TEST(PytorchCsv, RoundTripGivesTheSameScheduleAndTimeline) {
  struct Case {
    const char* scheduler;
    int pp, m, chunks, dp, group = 0;
  };
  // interleaved-1f1b with m = 6 on 4 ranks in one group of 6 is PyTorch's
  // ScheduleInterleaved1F1B for 6 microbatches (one round of 6); 5 on 2 ranks in groups of 3
  // is Megatron's docstring example (a last group of 2).
  for (const Case& c :
       {Case{"1f1b", 4, 8, 1, 2}, Case{"interleaved-1f1b", 2, 4, 2, 1},
        Case{"interleaved-1f1b", 4, 8, 2, 1}, Case{"interleaved-1f1b", 4, 6, 2, 1, 6},
        Case{"interleaved-1f1b", 2, 5, 2, 2, 3}, Case{"zb-h1", 4, 6, 1, 1},
        Case{"zb-h1", 2, 5, 1, 2}, Case{"zb-v", 4, 8, 1, 1}, Case{"zb-v", 2, 3, 1, 2},
        Case{"looped-bfs", 4, 8, 2, 1}, Case{"looped-bfs", 2, 3, 2, 2},
        Case{"interleaved-zb", 4, 8, 2, 1}, Case{"interleaved-zb", 2, 3, 2, 2},
        Case{"interleaved-zb", 4, 6, 2, 1}, Case{"dualpipe-v", 4, 8, 1, 1},
        Case{"dualpipe-v", 2, 5, 1, 2}}) {
    const auto study = uniform(c.scheduler, c.pp, c.m, c.chunks, c.dp, c.group);
    const Schedule& original = study->schedule;
    for (bool comms : {false, true}) {
      const std::string csv = format_pytorch_csv(original, comms);
      Schedule imported = import_pytorch_csv(study->problem, csv, "s.csv");
      EXPECT_EQ(imported.scheduler, "pytorch-csv");
      imported.scheduler = original.scheduler;
      EXPECT_TRUE(imported == original) << c.scheduler << " pp " << c.pp << "\n" << csv;
      const Metrics a = compute_metrics(original, evaluate(original, study->config.cluster));
      const Metrics b = compute_metrics(imported, evaluate(imported, study->config.cluster));
      EXPECT_EQ(a.iteration_time_s, b.iteration_time_s) << c.scheduler;
      EXPECT_EQ(a.bubble_fraction, b.bubble_fraction) << c.scheduler;
      EXPECT_EQ(format_pytorch_csv(imported, comms), csv) << c.scheduler;
    }
  }
}

TEST(PytorchCsv, EveryExportedActionMatchesPytorchsActionPattern) {
  // torch.distributed.pipelining's _Action.from_str pattern; csv.reader splits at commas.
  // DualPipeV's overlapped pairs are "(0F3;3B1)OVERLAP_F_B" (_Action's sub_actions).
  const std::string one =
      "(\\d+)(F|I|B|W|UNSHARD|RESHARD|REDUCE_GRAD|SEND_F|RECV_F|SEND_B|RECV_B)(\\d*)";
  const std::regex action(one + "|\\((\\d+)F(\\d+);(\\d+)B(\\d+)\\)OVERLAP_F_B");
  for (const char* scheduler : {"gpipe", "1f1b", "zb-h1", "zb-h2", "interleaved-1f1b", "zb-v",
                                "looped-bfs", "interleaved-zb", "dualpipe-v", "chimera"}) {
    const std::string name = scheduler;
    const bool looped =
        name == "interleaved-1f1b" || name == "looped-bfs" || name == "interleaved-zb";
    const auto study = uniform(scheduler, 4, 8, looped ? 2 : 1, 2);
    int actions = 0;
    for (bool comms : {false, true}) {
      std::stringstream csv(format_pytorch_csv(study->schedule, comms));
      for (std::string row; std::getline(csv, row);) {
        std::stringstream cells(row);
        for (std::string cell; std::getline(cells, cell, ',');) {
          EXPECT_TRUE(std::regex_match(cell, action)) << scheduler << ": '" << cell << "'";
          ++actions;
        }
      }
    }
    EXPECT_GT(actions, 4 * 8 * 2) << scheduler;
  }
}

TEST(PytorchCsv, ReadsWhatPytorchWrites) {
  // csv.writer ends rows with "\r\n"; None (an idle step) is an empty field; compute_comms
  // rows carry communication actions; DualPipeV overlaps an F and a B in one action.
  const RankOrders orders = parse_pytorch_csv(
      "0F0,,0SEND_F0,0UNSHARD,0RECV_B0,0B0,0REDUCE_GRAD\r\n"
      "1RECV_F0,(1F0;1B0)OVERLAP_F_B,1SEND_B0, 1I1 ,1W1\r\n",
      "p.csv");
  ASSERT_EQ(orders.size(), 2u);
  ASSERT_EQ(orders[PipelineRank{0}].size(), 2u);
  EXPECT_EQ(orders[PipelineRank{0}][1].pass, Pass::kB);
  ASSERT_EQ(orders[PipelineRank{1}].size(), 4u);
  EXPECT_EQ(orders[PipelineRank{1}][1].pass, Pass::kB);
  EXPECT_EQ(orders[PipelineRank{1}][2].pass, Pass::kI);
  EXPECT_EQ(orders[PipelineRank{1}][2].microbatch, MicrobatchId{1});
  EXPECT_EQ(orders[PipelineRank{1}][3].stage, StageId{1});
}

TEST(PytorchCsv, ReadsPytorchsLegacyNamesWithTheFlag) {
  // Before PyTorch 2.5, "B" was the input-gradient backward beside "W" (BACKWARD, WEIGHT),
  // the full backward "BW"; a schedule without W ran its B as the full backward.
  const std::string split = "0F0,0B0,0W0\n1F0,1BW0\n";
  const RankOrders legacy = parse_pytorch_csv(split, "p.csv", PytorchNaming::kLegacy);
  EXPECT_EQ(legacy[PipelineRank{0}][1].pass, Pass::kI);
  EXPECT_EQ(legacy[PipelineRank{0}][2].pass, Pass::kW);
  EXPECT_EQ(legacy[PipelineRank{1}][1].pass, Pass::kB);
  EXPECT_EQ(
      parse_pytorch_csv("0F0,0B0\n", "p.csv", PytorchNaming::kLegacy)[PipelineRank{0}][1].pass,
      Pass::kB);
  // Today's names have no BW: the error says what follows B.
  EXPECT_THROW(parse_pytorch_csv(split, "p.csv"), InputError);
  // A ZB-H1 schedule in the legacy names imports as the schedule Loom exports today.
  const auto study = uniform("zb-h1", 2, 4);
  const std::string today = format_pytorch_csv(study->schedule, false);
  const std::string old =
      std::regex_replace(std::regex_replace(today, std::regex("(\\d)B(\\d)"), "$1BW$2"),
                         std::regex("(\\d)I(\\d)"), "$1B$2");
  ASSERT_NE(old, today);
  Schedule imported =
      import_pytorch_csv(study->problem, old, "old.csv", nullptr, PytorchNaming::kLegacy);
  imported.scheduler = study->schedule.scheduler;
  EXPECT_TRUE(imported == study->schedule);
}

TEST(PytorchCsv, ReadsPytorchsOwnPublishedActionFiles) {
  // PyTorch's pipelining test artifacts, unchanged (tests/data/pytorch/README.md).
  const auto file = [](const std::string& name) {
    std::ifstream in(test::source_path("tests/data/pytorch/" + name));
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  const auto runs = [](const Study& study, const Schedule& s) {
    EXPECT_NO_THROW(validate(s, *study.problem.model));
    EXPECT_GT(evaluate(s, *study.problem.cluster).iteration_time_s(), 0);
  };
  // Interleaved ZB-1P on 2 ranks x 2 stages, 8 microbatches, in PyTorch's pre-2.5 names:
  // compute only (idle steps as empty fields), and with its communication.
  const auto zb1p = uniform("1f1b", 2, 8);
  const std::string compute = file("zb1p_2rank_2stagep_compute.csv");
  const std::string comms = file("zb1p_2rank_2stagep_comms.csv");
  ASSERT_FALSE(compute.empty());
  const Schedule from_compute =
      import_pytorch_csv(zb1p->problem, compute, "compute.csv", nullptr, PytorchNaming::kLegacy);
  const Schedule from_comms =
      import_pytorch_csv(zb1p->problem, comms, "comms.csv", nullptr, PytorchNaming::kLegacy);
  runs(*zb1p, from_compute);
  runs(*zb1p, from_comms);
  // Row 0 splits every backward into B (input) and W in the compute file and runs it whole
  // (BW) in the comms file: the same forwards, in the same order, both ways.
  const RankOrders a = parse_pytorch_csv(compute, "compute.csv", PytorchNaming::kLegacy);
  const RankOrders b = parse_pytorch_csv(comms, "comms.csv", PytorchNaming::kLegacy);
  const auto forwards = [](const std::vector<RankAction>& row) {
    std::vector<std::pair<StageId, MicrobatchId>> out;
    for (const RankAction& x : row)
      if (x.pass == Pass::kF) out.emplace_back(x.stage, x.microbatch);
    return out;
  };
  EXPECT_EQ(forwards(a[PipelineRank{0}]), forwards(b[PipelineRank{0}]));
  EXPECT_EQ(std::count_if(b[PipelineRank{0}].begin(), b[PipelineRank{0}].end(),
                          [](const RankAction& x) { return x.pass == Pass::kB; }),
            16);
  // Without the flag the pre-2.5 BW is refused.
  EXPECT_THROW(import_pytorch_csv(zb1p->problem, comms, "comms.csv"), InputError);

  // DualPipeV on 4 ranks (8 stages in a V), 10 microbatches, today's names, overlapped
  // F;B pairs.
  const auto dualpipe = uniform("dualpipe-v", 4, 10);
  const Schedule v =
      import_pytorch_csv(dualpipe->problem, file("dualpipev_4rank_10mb.csv"), "dualpipev.csv");
  runs(*dualpipe, v);
}

TEST(PytorchCsv, ErrorsNameLineColumnAndTheFix) {
  const auto study = uniform("1f1b", 2, 2);
  auto expect = [&](const std::string& csv, const std::string& at, const std::string& what) {
    const std::string error = import_error(*study, csv);
    EXPECT_EQ(error.rfind(at, 0), 0u) << error;
    EXPECT_NE(error.find(what), std::string::npos) << error;
  };
  expect("0F0,0F1,0B0,0B1\n1F0,1X0\n", "s.csv:2:6:", "unknown action type in '1X0'");
  expect("0F0,0F1,0B0,0B1\n1F0,1Bx\n", "s.csv:2:7:", "expected a microbatch number");
  expect("0F0,0F1,0B0,0B1\n", "s.csv:2:1:", "--set parallel.pp=1");
  expect("0F0,0F1,0B0,0B1\n1F0,1B0,0F1\n", "s.csv:2:9:", "stage 0 on rank 1");
  expect("0F0,0F2,0B0,0B2\n1F0,1B0,1F2,1B2\n", "s.csv:1:5:", "--set schedule.microbatches=3");
  // A well-formed file whose order misses a producer is rejected by the lowering, naming
  // the rank, its step and what never arrives: microbatch 1 never runs B on stage 1.
  EXPECT_NE(import_error(*study, "0F0,0F1,0B0,0B1\n1F0,1B0,1F1\n")
                .find("rank 0 step 3 (0B1) needs the gradient of layer 4 for microbatch 1 from "
                      "rank 1, which never computes it"),
            std::string::npos);
}

TEST(PytorchCsv, ImportsAVShapedPlacement) {
  // ZB-V's placement: pp 2, four stages, rank 0 holds stages 0 and 3, rank 1 stages 1 and
  // 2, so a microbatch goes down and back up the ranks. Each stage runs where its row
  // says; the lowering sends stage 1 -> 2 within rank 1 without a message.
  const auto study = uniform("1f1b", 2, 2);
  const Schedule s = import_pytorch_csv(study->problem,
                                        "0F0,0F1,3F0,3B0,3F1,3B1,0B0,0B1\n"
                                        "1F0,2F0,1F1,2F1,2B0,1B0,2B1,1B1\n",
                                        "v.csv");
  std::string rank1;
  for (const Op& op : s.programs[1_rank]) rank1 += to_string(op, s) + " ";
  EXPECT_EQ(rank1.find("SEND_F0:L4->"), std::string::npos) << rank1;  // 1 -> 2 stays local
  EXPECT_NE(rank1.find("2SEND_F0"), std::string::npos) << rank1;      // 2 -> 3 crosses
  EXPECT_NO_THROW(validate(s, *study->problem.model));
  EXPECT_GT(evaluate(s, *study->problem.cluster).iteration_time_s(), 0);
  // A stage named on two rows is an error at the second.
  EXPECT_NE(import_error(*study, "0F0,3F0\n1F0,2F0,3F1\n").find("s.csv:2:9: stage 3 on rank 1"),
            std::string::npos);
}

}  // namespace
}  // namespace loom
