#pragma once
// The zero-bubble papers' per-stage bubble, shared by the zero-bubble schedule tests.
#include <algorithm>
#include <variant>

#include "core/schedule.hpp"
#include "core/timeline.hpp"

namespace loom::test {

/// Idle time inside a rank's own span (first compute start to last compute end): the
/// zero-bubble paper's per-stage bubble, which does not count a stage's late start or early
/// finish (ZB-H2 relaxes the optimizer-step synchronisation). The worst rank's.
inline double max_span_bubble(const Schedule& s, const Timeline& t) {
  double worst = 0;
  for (int r = 0; r < s.num_ranks(); ++r) {
    double first = 1e300, last = 0, busy = 0;
    for (size_t k = 0; k < s.programs[RankId{r}].size(); ++k) {
      if (!std::holds_alternative<Compute>(s.programs[RankId{r}][k])) continue;
      const OpTiming& o = t.timings[RankId{r}][k];
      first = std::min(first, o.start_s);
      last = std::max(last, o.end_s);
      busy += o.end_s - o.start_s;
    }
    worst = std::max(worst, last - first - busy);
  }
  return worst;
}

}  // namespace loom::test
