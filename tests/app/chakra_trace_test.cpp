// Chakra execution traces (app/chakra_trace.hpp): every scheduler's schedule on two
// configs comes back from its traces equal, op for op, and runs to the same iteration
// time on both backends; the FLOP counts sum to the model's; and a broken trace (cut
// short, a cycle, a send or receive without its partner, a field that disagrees with its
// op, a node from another producer) is refused naming the file and node.
#include "app/chakra_trace.hpp"

#include <gtest/gtest.h>

#include <algorithm>

#include "app/backends.hpp"
#include "app/chakra/et_def.pb.h"
#include "app/child_run.hpp"
#include "app/schedule_import.hpp"
#include "config_sweep.hpp"
#include "core/errors.hpp"
#include "core/model_flops.hpp"
#include "core/schedule_text.hpp"
#include "schedulers/scheduler.hpp"
#include "test_support.hpp"

namespace loom {
namespace {

namespace chakra = ChakraProtoMsg;

ChakraTrace trace_of(const Study& study) {
  return export_chakra(study.schedule, study.config.model, study.problem.samples);
}

double time_on(const Study& study, const std::string& backend) {
  if (!find_backend(backend).once_per_process)
    return simulate(study, backend).timeline.iteration_time_s();
  return std::stod(run_in_child(
      [&] { return exact_double(simulate(study, backend).timeline.iteration_time_s()); }));
}

class ChakraRoundTrip : public ::testing::TestWithParam<std::string> {};

TEST_P(ChakraRoundTrip, EverySchedulerComesBackEqualAndRunsTheSame) {
  int planned = 0;
  for (const SchedulerInfo& info : scheduler_registry()) {
    test::Planned p = test::plan(GetParam(), info.name);
    if (!p.study) continue;  // the scheduler rejects this config
    ++planned;
    test::TempDir dir;
    write_chakra(trace_of(*p.study), dir.path(""));
    const Schedule back = load_schedule_file(*p.study, dir.path(""));
    EXPECT_TRUE(back == p.study->schedule) << info.name;
    EXPECT_EQ(format_schedule(back), format_schedule(p.study->schedule)) << info.name;
    for (const std::string& backend : backend_names()) {
      const double planned_s = time_on(*p.study, backend);
      Schedule original = std::exchange(p.study->schedule, back);
      EXPECT_EQ(time_on(*p.study, backend), planned_s) << info.name << " on " << backend;
      p.study->schedule = std::move(original);
    }
  }
  EXPECT_GE(planned, 10) << GetParam();
}

INSTANTIATE_TEST_SUITE_P(Configs, ChakraRoundTrip,
                         ::testing::Values("examples/uniform-1f1b", "examples/vlm-frozen"),
                         [](const auto& param) { return test::test_name(param.param); });

/// The traces' nodes, per rank, and their metadata, decoded from the bytes.
struct Decoded {
  chakra::GlobalMetadata metadata;
  std::vector<chakra::Node> nodes;
};
Decoded decode(const std::string& bytes) {
  Decoded d;
  google::protobuf::io::CodedInputStream in(reinterpret_cast<const std::uint8_t*>(bytes.data()),
                                            static_cast<int>(bytes.size()));
  bool first = true;
  while (in.CurrentPosition() < static_cast<int>(bytes.size())) {
    std::uint32_t size = 0;
    EXPECT_TRUE(in.ReadVarint32(&size));
    const auto limit = in.PushLimit(static_cast<int>(size));
    google::protobuf::MessageLite& m =
        first ? static_cast<google::protobuf::MessageLite&>(d.metadata) : d.nodes.emplace_back();
    EXPECT_TRUE(m.ParseFromCodedStream(&in));
    in.PopLimit(limit);
    first = false;
  }
  return d;
}

std::string encode(const Decoded& d) {
  std::string out;
  google::protobuf::io::StringOutputStream stream(&out);
  google::protobuf::io::CodedOutputStream coded(&stream);
  auto put = [&](const google::protobuf::MessageLite& m) {
    coded.WriteVarint32(static_cast<std::uint32_t>(m.ByteSizeLong()));
    m.SerializeWithCachedSizes(&coded);
  };
  put(d.metadata);
  for (const chakra::Node& n : d.nodes) put(n);
  return out;
}

TEST(ChakraTrace, FlopCountsSumToTheModelsAndDurationsToTheComputeTime) {
  const test::Planned p = test::plan("examples/vlm-frozen", "1f1b");
  ASSERT_TRUE(p.study);
  const Schedule& s = p.study->schedule;
  const ChakraTrace trace = trace_of(*p.study);
  double flops = 0;
  for (const RankId r : s.rank_ids()) {
    const Decoded d = decode(trace.ranks[r]);
    ASSERT_EQ(d.nodes.size(), s.programs[r].size());
    for (std::size_t i = 0; i < d.nodes.size(); ++i) {
      const chakra::Node& n = d.nodes[i];
      EXPECT_EQ(n.id(), i);
      const auto* c = std::get_if<Compute>(&s.programs[r][i]);
      if (!c) continue;
      EXPECT_EQ(n.type(), chakra::COMP_NODE);
      EXPECT_EQ(n.duration_micros(), std::llround(c->seconds * 1e6));
      for (const auto& a : n.attr())
        if (a.name() == "num_ops") flops += static_cast<double>(a.int64_val()) * s.ranks[r].tp;
    }
  }
  const double model =
      iteration_work(s, p.study->config.model, p.study->problem.samples).model_flops;
  EXPECT_NEAR(flops, model, 1e-9 * model);  // each op's count is rounded to a whole FLOP
  EXPECT_GT(model, 0);
}

/// Writes `trace` with rank `rank` changed by `edit` and returns the error reading it gives.
template <class Edit>
std::string broken(const Study& study, int rank, Edit edit) {
  ChakraTrace trace = trace_of(study);
  test::TempDir dir;
  Decoded d = decode(trace.ranks[RankId{rank}]);
  edit(d, trace.ranks[RankId{rank}]);
  if (!d.nodes.empty()) trace.ranks[RankId{rank}] = encode(d);
  write_chakra(trace, dir.path(""));
  try {
    load_schedule_file(study, dir.path(""));
  } catch (const InputError& e) {
    return e.what();
  }
  ADD_FAILURE() << "read without an error";
  return "";
}

void expect_has(const std::string& text, const std::string& part) {
  EXPECT_NE(text.find(part), std::string::npos) << "no '" << part << "' in: " << text;
}

TEST(ChakraTrace, BrokenTracesAreRefusedNamingFileAndNode) {
  const test::Planned p = test::plan("examples/uniform-1f1b", "1f1b");
  ASSERT_TRUE(p.study);
  const Study& study = *p.study;
  // Cut short: the last node's bytes are not all there.
  expect_has(broken(study, 2,
                    [](Decoded& d, std::string& bytes) {
                      d.nodes.clear();
                      bytes.resize(bytes.size() - 5);
                    }),
             "loom.2.et: truncated: a node at byte");
  // A cycle: node 4 depends on node 5, which depends on it.
  expect_has(broken(study, 0, [](Decoded& d, std::string&) { d.nodes[4].add_ctrl_deps(5); }),
             "loom.0.et: node 4 (0F2): depends on node 5, which comes after it (a cycle");
  // Rank 0's last send is gone: rank 1's last receive from it has no partner.
  expect_has(broken(study, 0,
                    [](Decoded& d, std::string&) {
                      auto last = std::find_if(d.nodes.rbegin(), d.nodes.rend(), [](auto& n) {
                        return n.type() == chakra::COMM_SEND_NODE;
                      });
                      d.nodes.erase(std::next(last).base());
                    }),
             "(1RECV_F7:L2<-0): no send matches this receive");
  // Rank 1's last receive from rank 0 is gone (what depended on it now depends on what it
  // did): rank 0's last send has no partner.
  expect_has(broken(study, 1,
                    [](Decoded& d, std::string&) {
                      auto last = std::find_if(d.nodes.rbegin(), d.nodes.rend(), [](auto& n) {
                        return n.type() == chakra::COMM_RECV_NODE &&
                               n.name().starts_with("1RECV_F");
                      });
                      const chakra::Node gone = *last;
                      d.nodes.erase(std::next(last).base());
                      for (chakra::Node& n : d.nodes) {
                        if (n.ctrl_deps_size() == 1 && n.ctrl_deps(0) == gone.id())
                          *n.mutable_ctrl_deps() = gone.ctrl_deps();
                      }
                    }),
             "loom.0.et: node 23 (0SEND_F7:L2->1): no receive matches this send");
  // A Chakra field that disagrees with the op it carries.
  expect_has(broken(study, 1, [](Decoded& d, std::string&) { d.nodes[1].set_duration_micros(5); }),
             "loom.1.et: node 1 (1F0): duration_micros 5, but its loom_op's seconds give 1000");
  expect_has(broken(study, 1,
                    [](Decoded& d, std::string&) {
                      for (auto& a : *d.nodes[0].mutable_attr())
                        if (a.name() == "comm_tag") a.set_int32_val(7);
                    }),
             "loom.1.et: node 0 (1RECV_F0:L2<-0): comm_tag 7, but its loom_op gives 0");
  // A node from another producer: no loom_op.
  expect_has(broken(study, 3,
                    [](Decoded& d, std::string&) {
                      chakra::Node& n = d.nodes[2];
                      n.clear_attr();
                      n.set_name("aten::mm");
                    }),
             "loom.3.et: node 2 (aten::mm): COMP_NODE without a loom_op attribute");
  // An op that spans lines would shift the joined text's lines.
  expect_has(broken(study, 3,
                    [](Decoded& d, std::string&) {
                      for (auto& a : *d.nodes[2].mutable_attr())
                        if (a.name() == "loom_op") a.set_string_val(a.string_val() + "\nend");
                    }),
             "loom.3.et: node 2 (3B0): loom_op holds a line break");
  // A blank or comment op would be skipped by the text reader, leaving a node without op.
  expect_has(broken(study, 2,
                    [](Decoded& d, std::string&) {
                      for (auto& a : *d.nodes.back().mutable_attr())
                        if (a.name() == "loom_op") a.set_string_val("# gone");
                    }),
             "loom_op is blank or a comment");
  // An op that does not parse names its node, not a line of Loom's own making.
  expect_has(broken(study, 3,
                    [](Decoded& d, std::string&) {
                      for (auto& a : *d.nodes[2].mutable_attr())
                        if (a.name() == "loom_op") a.set_string_val("3F1 layers=6:8 speed=2");
                    }),
             "loom.3.et: node 2 (3B0): unknown key 'speed'");
}

TEST(ChakraTrace, DeadlockNamesTheTracesNodes) {
  test::Planned p = test::plan("examples/uniform-1f1b", "1f1b");
  ASSERT_TRUE(p.study);
  // Rank 0 waits for microbatch 0's gradient before it sends its activations.
  std::vector<Op>& program = p.study->schedule.programs[0_rank];
  const auto recv = std::find_if(program.begin(), program.end(),
                                 [](const Op& op) { return std::holds_alternative<Recv>(op); });
  std::rotate(program.begin(), recv, recv + 1);
  test::TempDir dir;
  write_chakra(trace_of(*p.study), dir.path(""));
  try {
    load_schedule_file(*p.study, dir.path(""));
    ADD_FAILURE() << "a deadlocking trace was read";
  } catch (const InputError& e) {
    expect_has(e.what(), "step 0 (0RECV_B0:L2<-1, loom.0.et node 0)");
  }
}

}  // namespace
}  // namespace loom
