#include "core/validate.hpp"

#include <gtest/gtest.h>

#include "core/errors.hpp"
#include "core/matching.hpp"
#include "test_support.hpp"

namespace loom {
namespace {

std::string error_of(const Schedule& s, const Model& m) {
  try {
    validate(s, m);
  } catch (const InfeasibleError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(Validate, AcceptsTheBuiltInSchedulers) {
  for (const char* name : {"gpipe", "1f1b"}) {
    const auto study = test::example("uniform-1f1b.toml", {std::string("schedule.name=") + name});
    EXPECT_EQ(error_of(study->schedule, study->config.model), "") << name;
  }
}

TEST(Validate, RejectsABrokenOverlappedPair) {
  // dualpipe-v's (F+B) pairs validate; a lone overlapped forward (its B unflagged) does not.
  const auto study =
      test::example("uniform-1f1b.toml",
                    {"schedule.name=dualpipe-v", "parallel.pp=2", "schedule.microbatches=4"});
  EXPECT_EQ(error_of(study->schedule, study->config.model), "");
  Schedule s = study->schedule;
  for (Op& op : s.programs[0_rank]) {
    auto* c = std::get_if<Compute>(&op);
    if (c && c->overlapped && c->pass == Pass::kB) {
      c->overlapped = false;
      break;
    }
  }
  const std::string error = error_of(s, study->config.model);
  EXPECT_NE(error.find("broken overlapped pair"), std::string::npos) << error;
  EXPECT_NE(error.find(">>0F3(F+B)<<"), std::string::npos) << error;
}

TEST(Validate, RejectsADroppedBackward) {
  const auto study = test::example("uniform-1f1b.toml");
  Schedule s = study->schedule;
  auto& program = s.programs[3_rank];
  for (size_t i = 0; i < program.size(); ++i) {
    const auto* c = std::get_if<Compute>(&program[i]);
    if (c && c->pass == Pass::kB && c->microbatch == MicrobatchId{5}) {
      program.erase(program.begin() + static_cast<long>(i));
      break;
    }
  }
  const std::string error = error_of(s, study->config.model);
  EXPECT_NE(error, "");
  EXPECT_NE(error.find("microbatch 5"), std::string::npos) << error;
}

TEST(Validate, RejectsAForwardRunTwice) {
  const auto study = test::example("uniform-1f1b.toml", {"parallel.pp=1"});
  Schedule s = study->schedule;
  s.programs[0_rank].insert(s.programs[0_rank].begin() + 1, s.programs[0_rank].front());
  const std::string error = error_of(s, study->config.model);
  EXPECT_NE(error.find("twice"), std::string::npos) << error;
  EXPECT_NE(error.find(">>0F0<<"), std::string::npos) << error;  // the offending op, marked
}

TEST(Validate, RejectsBackwardBeforeItsGradientArrives) {
  const auto study =
      test::example("uniform-1f1b.toml", {"parallel.pp=2", "schedule.microbatches=2"});
  Schedule s = study->schedule;
  // Stage 0's first backward needs the gradient that stage 1 sends: remove that receive
  // and the matching send, keeping the pairs matched, so only the dependency is wrong.
  auto drop_first = [](std::vector<Op>& program, auto pred) {
    for (size_t i = 0; i < program.size(); ++i) {
      if (pred(program[i])) {
        program.erase(program.begin() + static_cast<long>(i));
        return;
      }
    }
  };
  drop_first(s.programs[0_rank], [](const Op& op) {
    return std::holds_alternative<Recv>(op) && std::get<Recv>(op).tag.pass == Pass::kB;
  });
  drop_first(s.programs[1_rank], [](const Op& op) {
    return std::holds_alternative<Send>(op) && std::get<Send>(op).tag.pass == Pass::kB;
  });
  const std::string error = error_of(s, study->config.model);
  EXPECT_NE(error.find("input gradient"), std::string::npos) << error;
}

TEST(Validate, RejectsSwappedReceivesThatDeadlock) {
  const auto study =
      test::example("uniform-1f1b.toml", {"parallel.pp=2", "schedule.microbatches=2"});
  Schedule s = study->schedule;
  // Stage 0 waits for microbatch 0's gradient before sending microbatch 0's activations:
  // every message still has its partner (matching passes), but the waits form a cycle.
  auto& p0 = s.programs[0_rank];
  const auto is = [&](auto pred) { return std::find_if(p0.begin(), p0.end(), pred); };
  const auto recv_grad = is([](const Op& op) {
    const auto* r = std::get_if<Recv>(&op);
    return r && r->tag.pass == Pass::kB && r->tag.microbatch == MicrobatchId{0};
  });
  const auto first_send = is([](const Op& op) { return std::holds_alternative<Send>(op); });
  ASSERT_TRUE(recv_grad != p0.end() && first_send < recv_grad);
  std::rotate(first_send, recv_grad, recv_grad + 1);  // the receive moves before the send
  EXPECT_NO_THROW(match_operations(s));
  const std::string error = error_of(s, study->config.model);
  EXPECT_NE(error.find("deadlock"), std::string::npos) << error;
}

TEST(Validate, ADroppedSendSaysWhichMessageTheReceiveTakesAndWhy) {
  const auto study =
      test::example("uniform-1f1b.toml", {"parallel.pp=2", "schedule.microbatches=2"});
  Schedule s = study->schedule;
  // Rank 0 drops its first forward send: rank 1's receive of microbatch 0 would take the
  // message of microbatch 1.
  auto& p0 = s.programs[0_rank];
  p0.erase(std::find_if(p0.begin(), p0.end(),
                        [](const Op& op) { return std::holds_alternative<Send>(op); }));
  const std::string error = error_of(s, study->config.model);
  EXPECT_NE(error.find("1RECV_F0:L4<-0) takes message 1 that rank 0 sends it on this layer "
                       "edge, rank 0 op #2 (0SEND_F1:L4->1)"),
            std::string::npos)
      << error;
  EXPECT_NE(error.find("which carries another microbatch or pass: rank 0 is missing a send "
                       "before it, or sends in another order than rank 1 receives"),
            std::string::npos)
      << error;
}

}  // namespace loom
