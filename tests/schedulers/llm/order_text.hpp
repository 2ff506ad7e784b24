#pragma once
// A rank's action order as text ("0F0 2F0 2B0 ..."), for tests that write orders by hand.
#include <string>
#include <vector>

#include "schedulers/lowering/programs.hpp"

namespace loom::test {

inline std::string order_text(const std::vector<RankAction>& order) {
  std::string out;
  for (const RankAction& a : order)
    out += (out.empty() ? "" : " ") + std::to_string(a.stage) + to_string(a.pass) +
           std::to_string(a.microbatch);
  return out;
}

}  // namespace loom::test
