#pragma once
// A rank's action order as text ("0F0 2F0 2B0 ..."), for tests that write orders by hand.
#include <string>
#include <vector>

#include "schedulers/lowering/programs.hpp"

namespace loom::test {

/// An overlapped pair prints as "(0F3;3B1)", like PyTorch's OVERLAP_F_B action.
inline std::string order_text(const std::vector<RankAction>& order) {
  std::string out;
  for (const RankAction& a : order) {
    const bool opens = a.overlapped && a.pass == Pass::kF;
    out += (out.empty() || (a.overlapped && !opens) ? "" : " ");
    out += (a.overlapped ? (opens ? "(" : ";") : "") + to_string(a.stage) + to_string(a.pass) +
           to_string(a.microbatch) + (a.overlapped && !opens ? ")" : "");
  }
  return out;
}

}  // namespace loom::test
