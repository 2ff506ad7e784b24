// DualPipeV: the V-shaped ("cut-in-half") DualPipe of DeepSeek-V3 (DeepSeek-AI, arXiv
// 2412.19437 §3.2.1, Figure 5; deepseek-ai/DualPipe dualpipev.py; PyTorch
// ScheduleDualPipeV). The chain is cut into 2p stages placed as ZB-V places them (rank r
// holds stage r, its chunk 0 on the way down, and stage 2p-1-r, chunk 1 on the way up).
// DualPipe's idea is the overlapped chunk: the forward of one microbatch and the full
// backward of another run as one fused action (F&B), each one's communication hidden behind
// the other's compute. Loom lowers it as the two computes back to back, flagged
// overlapped (Join::kOverlap), with both halves' receives before and both halves' sends after the
// pair (pass_p2p.cpp), and prints it as "(F+B)". The order of rank r, as the reference builds it
// (F0 = forward of chunk 0, I1 = input gradient of chunk 1, B = full backward,
// (F1;B0) = overlapped pair, W = the oldest deferred weight gradient):
//   1  2(p-r-1) x F0                      warm-up on chunk 0
//   2  r+1 x (F0, F1)                     chunk 0 / chunk 1 alternation
//   3  p-r-1 x (I1, W, F1)                zero bubble on chunk 1
//   4  m-2p+r+1 x ((F0;B1), (F1;B0))      main step; the last rank runs its first
//                                         (F0;B1) as F0, B1 without overlap
//   5  p-r-1 x (B1, (F1;B0))
//   6  r+1 x (B1, B0)                     from the middle on (rank parity decides whether
//                                         B1 or B0 switches first) as I, W deferred
//   7  p-r-1 x (W, I0)
//   8  r+1 x W                            the deferred W drain
// Steps 4 and 1..3 need m >= 2p (step 4 runs at least once on rank 0), the reference's rule.
//
//   p = 2, m = 4 (stages 0..3; rank 0 holds 0 and 3, rank 1 holds 1 and 2):
//     rank 0: 0F0 0F1 0F2 3F0 3I0 3W0 3F1 (0F3;3B1) (3F2;0B0) 3B2 (3F3;0B1) 3B3 0I2 0W2 0I3 0W3
//     rank 1: 1F0 2F0 1F1 2F1 1F2 2B0 (2F2;1B0) (1F3;2B1) (2F3;1B1) 2B2 1B2 2I3 1I3 2W3 1W3
#include <algorithm>
#include <deque>
#include <string>
#include <vector>

#include "core/errors.hpp"
#include "schedulers/llm/zero_bubble.hpp"

namespace loom {
namespace {

/// Builds one rank's order: per-chunk microbatch counters and the queue of deferred W.
class RankBuilder {
 public:
  RankBuilder(int stage0, int stage1) : stage_{stage0, stage1} {}

  /// The forward; `join` = Join::kOverlap makes it the first half of an overlapped pair.
  void forward(int chunk, Join join = Join::kNone) {
    add(stage_[chunk], Pass::kF, next_f_[chunk], join);
    ++next_f_[chunk];
  }
  /// The full backward (B), or with `zero_bubble` its I now and its W queued.
  void backward(int chunk, bool zero_bubble = false) {
    const MicrobatchId mb = next_b_[chunk];
    ++next_b_[chunk];
    if (!zero_bubble) return add(stage_[chunk], Pass::kB, mb, Join::kNone);
    add(stage_[chunk], Pass::kI, mb, Join::kNone);
    deferred_w_.push_back({.stage = StageId{stage_[chunk]}, .pass = Pass::kW, .microbatch = mb});
  }
  /// The W of the oldest deferred I.
  void weight() {
    order_.push_back(deferred_w_.front());
    deferred_w_.pop_front();
  }
  /// The overlapped action: forward of chunk `f`, full backward of chunk `b`.
  void overlapped(int f, int b) {
    forward(f, Join::kOverlap);
    backward(b);
  }
  std::vector<RankAction> take() { return std::move(order_); }

 private:
  void add(int stage, Pass pass, MicrobatchId mb, Join join) {
    order_.push_back({.stage = StageId{stage}, .pass = pass, .microbatch = mb, .with_next = join});
  }
  int stage_[2];
  MicrobatchId next_f_[2] = {MicrobatchId{0}, MicrobatchId{0}};
  MicrobatchId next_b_[2] = {MicrobatchId{0}, MicrobatchId{0}};
  std::deque<RankAction> deferred_w_;
  std::vector<RankAction> order_;
};

}  // namespace

RankOrders dualpipe_v_orders(int p, int m) {
  RankOrders orders(p);
  for (int r = 0; r < p; ++r) {
    RankBuilder b(r, 2 * p - 1 - r);
    for (int i = 0; i < 2 * (p - r - 1); ++i) b.forward(0);
    for (int i = 0; i < r + 1; ++i) {
      b.forward(0);
      b.forward(1);
    }
    for (int i = 0; i < p - r - 1; ++i) {
      b.backward(1, true);
      b.weight();
      b.forward(1);
    }
    for (int i = 0; i < m - 2 * p + r + 1; ++i) {
      if (i == 0 && r == p - 1) {  // the turn of the V: not overlapped, a shorter bubble
        b.forward(0);
        b.backward(1);
      } else {
        b.overlapped(0, 1);
      }
      b.overlapped(1, 0);
    }
    for (int i = 0; i < p - r - 1; ++i) {
      b.backward(1);
      b.overlapped(1, 0);
    }
    bool zero_bubble = false;
    const int half = (r + 1) / 2;
    for (int i = 0; i < r + 1; ++i) {
      if (i == half && r % 2 == 1) zero_bubble = true;
      b.backward(1, zero_bubble);
      if (i == half && r % 2 == 0) zero_bubble = true;
      b.backward(0, zero_bubble);
    }
    for (int i = 0; i < p - r - 1; ++i) {
      b.weight();
      b.backward(0, true);
    }
    for (int i = 0; i < r + 1; ++i) b.weight();
    orders[PipelineRank{r}] = b.take();
  }
  return orders;
}

std::string dualpipe_v_microbatch_error(int p, int m) {
  if (m >= 2 * p) return "";
  return "schedule.microbatches: dualpipe-v needs at least 2 x parallel.pp = " +
         std::to_string(2 * p) + " microbatches (every rank runs its overlapped main step at " +
         "least once; got " + std::to_string(m) +
         "); set schedule.microbatches >= " + std::to_string(2 * p);
}

Schedule generate_dualpipe_v(const SchedulingProblem& problem) {
  require_single_layout(problem, "dualpipe-v");
  const int p = problem.parallel.pp;
  const int m = problem.schedule.microbatches;
  if (const std::string error = dualpipe_v_microbatch_error(p, m); !error.empty())
    throw InputError(error);
  const PipelinePrograms programs =
      v_shaped_programs(problem, "dualpipe-v", dualpipe_v_orders(p, m));
  return lower(problem, "dualpipe-v", programs);
}

}  // namespace loom
