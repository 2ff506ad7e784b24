#pragma once
/// Schedule IR: what every scheduler produces and every backend runs.
///
/// A Schedule is, per rank, an ordered program of operations. Different kinds of operation
/// are different types (a std::variant visited exhaustively): Compute, Send, Recv,
/// Collective and OptimizerStep. Idle time is never in the IR; it is an output of running it.
///
/// Semantics every backend implements identically:
///   - A rank executes its program in order, one operation at a time.
///   - Compute and OptimizerStep occupy the rank for `seconds`.
///   - Send is eager and asynchronous: it costs the rank no time; the transfer starts
///     when the Send is reached and crosses the route to the peer.
///   - Recv blocks the rank until the matching transfer has arrived.
///     Sends and receives match in program order per ordered pair of ranks and edge of
///     the layer graph (tag pass, producer and boundary layer): the k-th Send from a to
///     b on an edge is the k-th Recv on b from a on that edge, as NCCL point-to-point does
///     on one communicator per module edge; their tags and sizes must agree.
///   - A Collective is a ring over its group's ranks (all-reduce: 2(n-1) steps of
///     bytes/n; all-gather and reduce-scatter: n-1 steps); members match their k-th collective on a
///     group. It starts when every member has reached it (NCCL's ring cannot progress sooner). Each
///     member's steps towards its ring successor travel as one stream of steps x bytes/n, so every
///     link carries exactly the ring's load and shares it with other traffic; the collective ends
///     for all members when every stream has arrived, plus (steps - 1) x the ring's largest hop
///     latency for the per-step handshakes. Uncontended, that is steps x (latency + bytes/n /
///     bandwidth) of the slowest hop: NCCL's ring bound (2(n-1)/n x bytes / bus bandwidth for
///     all-reduce).
///   - An all-to-all (CollectiveKind::kAllToAll) starts, like a ring, when every member has
///     reached it; then each member sends bytes/n to each other member, all n(n-1) flows at
///     once, each on its own route and sharing links with everything else. It ends for all
///     when every flow has arrived. Uncontended: the busiest link's load over its bandwidth
///     (or a flow's size over its rate cap, if slower) plus the longest route's latency
///     (core/ring.hpp).
///   - An async Collective (a gradient bucket overlapped with the backward pass) costs
///     its rank no time: the rank goes on. Each rank runs its async collectives in program
///     order on one communication stream: one starts when every member has reached it and
///     each member's previous async collective has ended. The rank's next OptimizerStep,
///     and the end of its program, wait until all its async collectives have ended.
///   - A Compute with `async_pending` = k >= 0 starts only once every async collective its
///     rank issued before it has ended, except the k issued last (FSDP's prefetch: a
///     layer's compute waits for its own parameters' all-gather, not the next layer's).
///
/// Text form (after PyTorch pipelining's actions): "2F0" stage 2 forward microbatch 0,
/// "2I0"/"2W0" split backward, "2B0" fused backward; a module suffix "@llm" when a stage
/// spans several modules, then "(copy)" on a redundant compute or "(F+B)" on a half of an
/// overlapped forward-backward action; "1SEND_F3->2", "2RECV_F3<-1",
/// "ALLREDUCE_s1[g0]", "REDUCESCATTER_s0[g2]", "ALLTOALL_s3[g5]".
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "core/index.hpp"

namespace loom {

/// Compute passes, named as in PyTorch pipelining: F forward, B fused backward,
/// I backward for inputs (the dissertation's Bd), W backward for weights (Bw).
enum class Pass : std::uint8_t { kF, kB, kI, kW };
const char* to_string(Pass pass);

/// Reduce-scatter is FSDP's gradient reduction (Zhao et al. VLDB'23 §3.2): each member keeps
/// the sum of its 1/n shard; its ring moves what an all-gather moves.
/// All-to-all is a mixture-of-experts layer's token dispatch and combine (docs/moe.md), or
/// Ulysses' context parallelism moving a layer's attention between rows and heads:
/// each member sends bytes/n of its buffer to every other member (n - 1 flows at once, not
/// a ring) and receives as much.
enum class CollectiveKind : std::uint8_t { kAllReduce, kAllGather, kReduceScatter, kAllToAll };
const char* to_string(CollectiveKind kind);

/// What a point-to-point message carries: the output of forward (`kF`, activations) or of
/// backward (`kB`, input gradients) of one microbatch across one edge of the layer graph,
/// from `producer()` into `boundary_layer`. Within one module the producer is the previous
/// layer; where modules meet, one consumer can have several producers (two encoders
/// feeding an LLM) and the producer tells their messages apart.
struct MessageTag {
  Pass pass = Pass::kF;  ///< kF activations, kB gradients
  MicrobatchId microbatch{0};
  int boundary_layer = 0;  ///< global index of the consuming layer
  /// Global index of the producing layer; none: the previous layer, boundary_layer - 1.
  std::optional<int> producer_layer = std::nullopt;
  int producer() const { return producer_layer.value_or(boundary_layer - 1); }
  /// A message from a layer into itself: the context-parallel exchange inside layer
  /// boundary_layer's attention (lowering/context_parallel.hpp): K/V blocks around the CP
  /// ring (kF), K/V with their dK/dV (kB). No edge of the layer graph; rank to rank of one
  /// stage, matched in program order like every other message.
  bool context_parallel() const { return producer() == boundary_layer; }
  friend bool operator==(const MessageTag& a, const MessageTag& b) {
    return a.pass == b.pass && a.microbatch == b.microbatch &&
           a.boundary_layer == b.boundary_layer && a.producer() == b.producer();
  }
};

struct Compute {
  Pass pass = Pass::kF;
  StageId stage{};
  MicrobatchId microbatch{0};
  ModuleId module{0};
  int first_layer = 0;  ///< global layer range [first_layer, end_layer)
  int end_layer = 0;
  double seconds = 0;
  /// Bytes of activations a forward keeps alive until its backward releases them
  /// (0 when the segment needs no backward).
  double activation_bytes = 0;
  /// True on the backward op that frees the forward's activations (B, or W when split).
  bool releases_activation = false;
  /// The part of `seconds` that is weight-gradient work (B ops; for timelines and checks:
  /// a frozen module's B has none, its time is all input gradients).
  double weight_grad_s = 0;
  /// A redundant forward-only copy of work another rank does for real (encoders-replicated
  /// runs every encoder on every pipeline stage, cornstarch-arxiv §2.2 Fig 1b): it costs
  /// time but its output feeds nothing, so exactly-once and data checks skip it.
  bool redundant = false;
  /// Half of an overlapped forward-backward action (DualPipe's "F&B" chunk, DeepSeek-V3
  /// §3.2.1; PyTorch's OVERLAP_F_B): the forward of one microbatch and the full backward of
  /// another, run as one fused action. Both halves carry the flag and are adjacent computes
  /// of the rank (F first); their time is the two computations serialized, the pair's
  /// receives come before the F and its sends after the B (the lowering groups them), so
  /// each half's communication is hidden behind the other's compute. Prints as "(F+B)".
  bool overlapped = false;
  /// -1: starts when reached. k >= 0: waits until the rank's async collectives issued
  /// before it have ended, all but the latest k (FSDP's per-layer all-gather, issued one
  /// layer ahead; lowering/pass_fsdp.cpp). Prints as "wait=k".
  int async_pending = -1;
  /// A part of one layer's pass that is split around its context-parallel exchange
  /// (lowering/context_parallel.hpp), followed by more parts of the same layer, pass and
  /// microbatch on this rank. The layer's pass counts as done (its outputs sent, once) with
  /// its last part, the one without the flag. Prints as "cont=1".
  bool continues = false;
  bool operator==(const Compute&) const = default;
};

struct Send {
  RankId peer{};
  StageId stage{};     ///< the sending stage
  ModuleId module{0};  ///< module of the data
  MessageTag tag;
  double bytes = 0;
  bool operator==(const Send&) const = default;
};

struct Recv {
  RankId peer{};
  StageId stage{};  ///< the receiving stage
  ModuleId module{0};
  MessageTag tag;
  double bytes = 0;
  bool operator==(const Recv&) const = default;
};

struct Collective {
  CollectiveKind kind = CollectiveKind::kAllReduce;
  GroupId group{0};
  StageId stage{};  ///< the stage whose data is reduced (for labels)
  ModuleId module{0};
  double bytes = 0;  ///< the full buffer size per member
  /// An all-reduce of a tied embedding's gradients between the ranks holding its copies
  /// (schedulers/lowering/tied_embedding.hpp), not of the layers' gradients: the executors
  /// sum no layer into it, and its group lies inside one replica.
  bool tied_embedding = false;
  /// Issued on the rank's communication stream (Megatron-LM's overlap_grad_reduce): the
  /// rank goes on at once, and its next OptimizerStep, and its program's end, wait for it.
  bool async = false;
  /// A gradient bucket: the global layers [first_layer, end_layer) whose gradients it
  /// sums, those of them this rank trains (empty: every trainable layer of `module` on
  /// the rank; executor/dataflow.hpp). FSDP's gathers and reduce-scatters, and context
  /// parallelism's K/V all-gather and dK/dV reduce-scatter, name their layer the same way.
  int first_layer = 0;
  int end_layer = 0;
  bool operator==(const Collective&) const = default;
};

/// The rank's optimizer step (Adam) over the trainable parameters it updates, after its
/// gradient all-reduces: it occupies the rank for `seconds` like a Compute. Memory-bound:
/// it reads and writes the fp32 optimizer state (master weights and two moments), reads
/// the gradients and writes the model's weights (lowering/pass_placement.cpp).
struct OptimizerStep {
  StageId stage{};        ///< the rank's first stage (for labels)
  ModuleId module{0};     ///< module of the last trainable parameters it holds (for labels)
  double parameters = 0;  ///< parameters it updates, per GPU (a shard with ZeRO-1)
  double seconds = 0;
  bool operator==(const OptimizerStep&) const = default;
};

using Op = std::variant<Compute, Send, Recv, Collective, OptimizerStep>;

/// One op of one rank's program: programs[rank][index].
struct OpRef {
  RankId rank;
  std::size_t index = 0;
  friend bool operator==(const OpRef&, const OpRef&) = default;
};

/// Where a rank lives: the first GPU of its tensor-parallel group, the group's size, and
/// which data-parallel replica of the pipeline it belongs to.
/// Sample ids (indices into the workload's samples) per microbatch of each data-parallel
/// replica: assignment[replica][microbatch].
using SampleAssignment = PerReplica<PerMicrobatch<std::vector<SampleId>>>;

struct RankInfo {
  int gpu = 0;
  int tp = 1;
  ReplicaId replica{0};
  bool operator==(const RankInfo&) const = default;
};

/// Bytes a rank holds for the whole iteration (parameters, their gradients and optimizer
/// state), per GPU of the rank's TP group.
struct StaticMemory {
  double parameters = 0;
  double gradients = 0;
  double optimizer = 0;
  double total() const { return parameters + gradients + optimizer; }
  StaticMemory& operator+=(const StaticMemory& o) {
    parameters += o.parameters;
    gradients += o.gradients;
    optimizer += o.optimizer;
    return *this;
  }
  bool operator==(const StaticMemory&) const = default;
};

struct Schedule {
  std::string scheduler;  ///< name of the scheduler that produced it
  PerModule<std::string> module_names;
  int num_stages = 0;
  int microbatches = 0;  ///< per pipeline replica
  PerRank<RankInfo> ranks;
  PerRank<std::vector<Op>> programs;     ///< per rank, in execution order
  PerGroup<std::vector<RankId>> groups;  ///< collective groups (rank lists, ring order)
  /// samples[replica][microbatch] -> the ids of the samples it covers
  SampleAssignment samples;
  PerRank<StaticMemory> static_memory;
  /// Symmetric folding (core/replica_fold.hpp): each data-parallel replica in the IR stands
  /// for `replica_fold` identical ones not simulated op by op. A ring group spanning replicas
  /// runs over members x replica_fold ranks: the whole ring's steps and bytes per link (an
  /// all-to-all's group, expert parallelism's, stays inside a block: its members alone).
  int replica_fold = 1;
  /// Context parallelism (parallel.cp): each pipeline rank of each replica is `cp` IR
  /// ranks, one per CP rank, numbered replica-major: rank = (replica x cp + cp_rank) x
  /// num_stages + pipeline rank. They share the replica's samples, each holding its 2 of
  /// the 2 cp chunks of every sequence.
  int cp = 1;

  /// The CP rank (0 .. cp - 1) of rank `r`.
  int cp_rank(RankId r) const { return cp == 1 ? 0 : r.value() / num_stages % cp; }
  int num_ranks() const { return programs.ssize(); }
  /// The samples microbatch `microbatch` of `replica` covers.
  const std::vector<SampleId>& samples_of(ReplicaId replica, MicrobatchId microbatch) const {
    return samples.at(replica).at(microbatch);
  }
  IdRange<RankId> rank_ids() const { return programs.ids(); }
  /// The ranks of collective group `group` (Collective::group), in ring order.
  const std::vector<RankId>& group_members(GroupId group) const { return groups.at(group); }
  /// Appends a collective group; its id is what the members' Collective ops name.
  GroupId add_group(std::vector<RankId> members) {
    const GroupId id = groups.next_id();
    groups.push_back(std::move(members));
    return id;
  }
  /// Whether every member of the group is in one data-parallel replica (a tied
  /// embedding's all-reduce; with one replica, every group).
  bool group_in_one_replica(GroupId group) const;
  /// Ranks a collective group's ring runs over: its members, times the fold for a group
  /// that spans the replicas (one inside a replica is that replica's alone).
  int ring_size(GroupId group) const {
    const int members = isize(group_members(group));
    return replica_fold > 1 && !group_in_one_replica(group) ? members * replica_fold : members;
  }
  size_t num_ops() const;
  const Op& op(OpRef ref) const { return programs[ref.rank][ref.index]; }
  /// Field by field (ops compare exactly, MessageTag by its producer()): what the text
  /// form's round trip preserves (core/schedule_text.hpp).
  bool operator==(const Schedule&) const = default;
};

/// "2F0", "1SEND_F3->2", ... (see the header comment). Stable: used in errors and diffs.
std::string to_string(const Op& op, const Schedule& schedule);

/// Throws InfeasibleError "schedule deadlocks<where>: N rank(s) can never finish",
/// naming up to 8 ranks and the op each is stuck at, if any rank's next op
/// (`next_op[rank]`) is short of the end of its program. Both backends report with it.
void throw_if_deadlocked(const Schedule& schedule, const PerRank<std::size_t>& next_op,
                         const std::string& where);

/// The ring decomposition of a collective over `members` ranks: how many steps, and how
/// many bytes each member sends to its ring successor per step.
int ring_steps(CollectiveKind kind, int members);
double ring_chunk_bytes(CollectiveKind kind, int members, double bytes);
/// Bytes each member streams to its ring successor over the whole collective.
double ring_stream_bytes(CollectiveKind kind, int members, double bytes);

/// Accessors that every consumer of an Op uses, so a new op kind is a compile error
/// everywhere it matters.
StageId op_stage(const Op& op);
ModuleId op_module(const Op& op);
/// Microbatch of the op; collectives and optimizer steps belong to none.
std::optional<MicrobatchId> op_microbatch(const Op& op);
/// Work that occupies the rank's GPU for its `seconds` (Compute, OptimizerStep): busy
/// time, and the compute lane of a trace.
inline bool occupies_rank(const Op& op) {
  return std::holds_alternative<Compute>(op) || std::holds_alternative<OptimizerStep>(op);
}
/// An all-to-all: a MoE layer's token dispatch or combine, or Ulysses' re-sharding of a
/// layer's attention between rows and heads (CollectiveKind::kAllToAll).
inline bool is_all_to_all(const Op& op) {
  const auto* c = std::get_if<Collective>(&op);
  return c && c->kind == CollectiveKind::kAllToAll;
}
/// "F","B","I","W","send","recv","allreduce","allgather","reducescatter","alltoall",
/// "optimizer"
const char* op_kind_name(const Op& op);
/// How many of its rank's async collectives must have ended before `op` starts, when the
/// rank issued `issued` of them before it (the header's semantics, for every backend): all
/// for an OptimizerStep (and the program's end), all but the latest
/// Compute::async_pending for a compute that waits, none otherwise.
std::size_t async_needed_before(const Op& op, std::size_t issued);

}  // namespace loom
