#include "core/validate.hpp"

#include <gtest/gtest.h>

#include "core/errors.hpp"
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

TEST(Validate, RejectsADroppedBackward) {
  const auto study = test::example("uniform-1f1b.toml");
  Schedule s = study->schedule;
  auto& program = s.programs[3];
  for (size_t i = 0; i < program.size(); ++i) {
    const auto* c = std::get_if<Compute>(&program[i]);
    if (c && c->pass == Pass::kB && c->microbatch == 5) {
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
  s.programs[0].insert(s.programs[0].begin() + 1, s.programs[0].front());
  const std::string error = error_of(s, study->config.model);
  EXPECT_NE(error.find("twice"), std::string::npos) << error;
  EXPECT_NE(error.find(">>0F0<<"), std::string::npos) << error;  // the offending op, marked
}

TEST(Validate, RejectsBackwardBeforeItsGradientArrives) {
  const auto study = test::example("uniform-1f1b.toml", {"parallel.pp=2", "schedule.microbatches=2"});
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
  drop_first(s.programs[0], [](const Op& op) { return std::holds_alternative<Recv>(op) && std::get<Recv>(op).tag.pass == Pass::kB; });
  drop_first(s.programs[1], [](const Op& op) { return std::holds_alternative<Send>(op) && std::get<Send>(op).tag.pass == Pass::kB; });
  const std::string error = error_of(s, study->config.model);
  EXPECT_NE(error.find("input gradient"), std::string::npos) << error;
}

TEST(Validate, RejectsSwappedReceivesThatDeadlock) {
  const auto study = test::example("uniform-1f1b.toml", {"parallel.pp=2", "schedule.microbatches=2"});
  Schedule s = study->schedule;
  // Stage 1 waits for the gradient it has not produced yet: move its first op (a receive
  // of activations) behind its first send of gradients -> a wait cycle or unmatched order.
  auto& p1 = s.programs[1];
  std::rotate(p1.begin(), p1.begin() + 1, p1.end());
  EXPECT_NE(error_of(s, study->config.model), "");
}

}  // namespace loom
