#pragma once
// A rank's action order as text ("0F0 2F0 2B0 ..."), for tests that write orders by hand.
#include <string>
#include <vector>

#include "schedulers/lowering/programs.hpp"

namespace loom::test {

/// An overlapped pair prints as "(0F3;3B1)", like PyTorch's OVERLAP_F_B action.
inline std::string order_text(const std::vector<RankAction>& order) {
  std::string out;
  bool closes = false;  // this action is the B half of an overlapped pair
  for (const RankAction& a : order) {
    const bool opens = a.with_next == Join::kOverlap;
    out += out.empty() ? "" : closes ? ";" : " ";
    out += (opens ? "(" : "") + to_string(a.stage) + to_string(a.pass) + to_string(a.microbatch) +
           (closes ? ")" : "");
    closes = opens;
  }
  return out;
}

}  // namespace loom::test
