#pragma once
/// LLM-level reference schedules with split backward or virtual stages, as stage orders
/// that any lowering (lower_pipeline, lower_virtual_pipeline, a multimodal stage graph)
/// can take. Notation: p pipeline ranks, m microbatches, v chunks per rank; stage s is
/// 0-indexed. Backward is split into I (input gradients, the zero-bubble paper's B) and W
/// (weight gradients); see StageAction in schedulers/lowering/lowering.hpp.
#include <string>
#include <vector>

#include "schedulers/lowering/lowering.hpp"

namespace loom {

/// One stage's order under construction, pass by pass: the next microbatch of F, I and W,
/// each advanced as its pass is pushed (the ZB-H1 and ZB-H2 builders).
struct StageCursor {
  std::vector<StageAction>& order;
  MicrobatchId end;
  MicrobatchId f{0}, i{0}, w{0};

  /// The pass of its next microbatch, then advance that pass.
  void push(Pass pass) {
    MicrobatchId& next = pass == Pass::kF ? f : pass == Pass::kI ? i : w;
    order.push_back({pass, next});
    ++next;
  }
  /// The W still pending, oldest first (every zero-bubble order's tail).
  void drain_w() {
    while (w < end) push(Pass::kW);
  }
};

/// ZB-H1 (zero-bubble PP, Qi et al. ICLR'24 §2.2 / Table 2): stage s runs min(p-s-1, m)
/// warm-up forwards, then one F and one I per step; the first s W are deferred and every
/// later step ends with the W of the oldest pending microbatch; cool-down I,W pairs; the s
/// deferred W drain last. Same warm-up (hence peak activations, p microbatches on stage 0)
/// as 1F1B; the bubble shrinks from (p-1)(T_F+T_B+T_W) to (p-1)(T_F+T_B-T_W).
StageOrders zb_h1_orders(int p, int m);

/// ZB-H2 (same paper, §2.2 / Table 2): stage s runs min(2(p-s)-1, m) warm-up forwards,
/// then alternates I and F until 2s+1 I are done (W all deferred), then steady W,F,I with
/// W on the oldest pending microbatch; cool-down I,W pairs; the 2s+1 pending W drain
/// last. Every stage holds 2p-1 microbatches at the peak; the bubble inside each stage's
/// own span is (p-1)(T_F+T_B-2T_W), zero when T_F + T_B = 2 T_W (the paper removes the
/// optimizer-step synchronisation so stages need not end together).
StageOrders zb_h2_orders(int p, int m);

/// Megatron-LM interleaved 1F1B (schedules.py, forward_backward_pipelining_with_
/// interleaving; Narayanan et al. SC'21 §2.2): p x v virtual stages, chunk c of rank r is
/// virtual stage c p + r. Virtual microbatch k = 0..m v-1 is megatron_schedule_table(m, v,
/// N)[k] for the forward and the same microbatch on chunk v-1-c for the backward; rank r runs
/// min(m v, 2(p-r-1) + (v-1) N) warm-up forwards, then one F and one B per step, then the
/// remaining B. `group` is N (Megatron's microbatch_group_size_per_vp_stage; 0 = p). Throws
/// InputError (interleaved_group_error) unless p <= N <= m and m mod N is 0 or >= p. With
/// equal chunks, bubble time over ideal time (Megatron's bubble fraction) is (p-1)/(v m)
/// for every valid N; v = 1 is 1F1B with a longer warm-up.
RankOrders interleaved_1f1b_orders(int p, int m, int v, int group = 0);

/// One entry of Megatron's schedule table: a virtual microbatch's microbatch and chunk.
struct VirtualMicrobatch {
  int microbatch = 0;
  int chunk = 0;
};
/// Megatron's get_schedule_table: groups of `group` microbatches (the last one takes what
/// is left), each swept over chunks 0..v-1: for m = 5, v = 2, N = 3 the microbatches are
/// 0 1 2 0 1 2 3 4 3 4 and the chunks 0 0 0 1 1 1 0 0 1 1.
std::vector<VirtualMicrobatch> megatron_schedule_table(int m, int v, int group);
/// Rank r's action for virtual microbatch k of `table`: its forward on chunk c, or its
/// backward on the mirrored chunk v-1-c (virtual stage chunk x p + r).
inline RankAction virtual_action(const std::vector<VirtualMicrobatch>& table, int k, Pass pass,
                                 int p, int v, int r) {
  const VirtualMicrobatch& t = table[static_cast<size_t>(k)];
  const int chunk = pass == Pass::kF ? t.chunk : v - 1 - t.chunk;
  return {.stage = StageId{chunk * p + r}, .pass = pass, .microbatch = MicrobatchId{t.microbatch}};
}
/// The p ranks' orders over megatron_schedule_table(m, v, group): rank_order(r, push)
/// writes rank r's, push(k, pass) appending the pass of virtual microbatch k.
template <class RankOrder>
RankOrders virtual_orders(int p, int m, int v, int group, const RankOrder& rank_order) {
  const std::vector<VirtualMicrobatch> table = megatron_schedule_table(m, v, group);
  RankOrders orders(p);
  for (int r = 0; r < p; ++r) {
    std::vector<RankAction>& order = orders[PipelineRank{r}];
    rank_order(r,
               [&](int k, Pass pass) { order.push_back(virtual_action(table, k, pass, p, v, r)); });
  }
  return orders;
}

/// Megatron's rules for the group size N on p ranks and m microbatches, as the InputError
/// message naming the key and the nearest valid values ("" when valid): m >= p,
/// p <= N <= m, and a last group (m mod N) of 0 or >= p microbatches.
std::string interleaved_group_error(int p, int m, int group);

/// ZB-V (Qi et al., zero-bubble PP arXiv 2401.10241 §6; PyTorch ScheduleZBVZeroBubble): p
/// ranks, 2p stages, rank r holds stage r (chunk 0) and 2p-1-r (chunk 1), split backward.
/// The order is built for n = max(2p-1, m) microbatches: 2(p-r)-1 F0; r x (F1, F0); p-r x
/// (F1, I1, W1); steady [F0], I0, W0, F1, I1, W1 until all F are done; r x (I0, I1); p-r x
/// (I0, W0); the remaining W1, then W0; actions on microbatches >= m are then dropped.
/// Every rank keeps at most min(2p, 2m) chunk-microbatches alive (1F1B's rank-0 peak in
/// bytes when the 2p chunks are equal). orders[r] names stages, placed by zb_v_stage_ranks.
RankOrders zb_v_orders(int p, int m);

/// ZB-V's placement: stage s of 2p on rank s for s < p, on rank 2p-1-s otherwise.
PerStage<PipelineRank> zb_v_stage_ranks(int p);
/// The programs of a V schedule (zb-v, dualpipe-v): 2p planned stages on ZB-V's placement
/// with `orders`. Throws InputError naming `name` when the model has fewer than 2p layers.
PipelinePrograms v_shaped_programs(const SchedulingProblem& problem, const std::string& name,
                                   RankOrders orders);

/// DualPipeV (DeepSeek-V3 arXiv 2412.19437 §3.2.1; deepseek-ai/DualPipe dualpipev.py;
/// PyTorch ScheduleDualPipeV): ZB-V's placement (zb_v_stage_ranks), rank r's order in eight
/// steps: 2(p-r-1) F0; r+1 x (F0, F1); p-r-1 x (I1, W, F1); m-2p+r+1 x ((F0;B1), (F1;B0))
/// with (F;B) an overlapped pair (Join::kOverlap, lowering/features.hpp) and the last rank's first
/// (F0;B1) not overlapped; p-r-1 x (B1, (F1;B0)); r+1 x (B1, B0), from the middle on as I with W
/// deferred; p-r-1 x (W, I0); r+1 x W. W always takes the oldest deferred I. Needs m >= 2p.
RankOrders dualpipe_v_orders(int p, int m);

/// The InputError message for dualpipe-v's microbatch rule (m >= 2p), naming the key and
/// the smallest valid count; "" when m is valid.
std::string dualpipe_v_microbatch_error(int p, int m);

/// Chimera (Li and Hoefler, SC'21, arXiv 2107.06925 §3.1 Figure 3, §3.5): two pipelines of
/// the same p stages in opposite directions on the same p ranks (p even): "down" stage s on
/// rank s, "up" stage s on rank p-1-s (SecondPipeline, lowering/features.hpp), so rank r holds
/// stage r of one copy and stage p-1-r of the other. Microbatches 0..m/2-1 go down,
/// m/2..m-1 up, in units of p (p/2 each way). In slots of one pass, down microbatch k of unit
/// u runs F on rank r at 2pu + 2k + r and B at 2pu + 2k + 2p-1-r; up microbatch k runs F at
/// 2pu + 2k + p-1-r and B at 2pu + 2k + p+r (conflict-free for even p, the paper's merge of
/// two 1F1B pipelines, units concatenated 2p slots apart); each rank's order is its passes
/// by slot. Needs m a multiple of p (chimera_error). orders[r] names stages 0..p-1.
RankOrders chimera_orders(int p, int m);

/// The InputError message for chimera's rules (p even, m a positive multiple of p), naming
/// the key and the nearest valid values; "" when valid.
std::string chimera_error(int p, int m);

/// Breadth-first looped schedule (Lamy-Poirier, MLSys'23, arXiv 2211.05953; PyTorch
/// ScheduleLoopedBFS): v chunks per rank, chunk c of rank r is stage c p + r; rank r runs F of
/// chunk 0 for microbatches 0..m-1, then chunk 1, ..., chunk v-1; then B of chunk v-1 for
/// microbatches m-1 down to 0, ..., chunk 0. Peak v m chunk-microbatches per rank (GPipe's memory);
/// bubble over ideal (p-1)/(v m) for m >= p and equal chunk costs, as interleaved 1F1B.
RankOrders looped_bfs_orders(int p, int m, int v);

/// Interleaved zero bubble (PyTorch ScheduleInterleavedZeroBubble, ZB1P of Qi et al. ICLR'24 on
/// the looped placement): chunk c of rank r is stage c p + r, split backward. R =
/// interleaved_zb_round_size(p, m); the F and I sequences are interleaved 1F1B's with group R
/// (megatron_schedule_table(m, v, R)), the warm-up is min(m v, (v-1) R + p-1-r) forwards, and
/// after each steady or cool-down I, once more than r W are pending, the W of the oldest I;
/// the r deferred W drain last. v = 1 is zb-h1's order.
RankOrders interleaved_zb_orders(int p, int m, int v);

/// PyTorch's round size for interleaved-zb: m / max(1, m div p). Throws InputError naming
/// schedule.microbatches and the nearest valid counts when m does not divide evenly into its
/// max(1, m div p) rounds (PyTorch's rule: 9 on 4 ranks, 2 rounds of 4.5, is rejected).
int interleaved_zb_round_size(int p, int m);

}  // namespace loom
