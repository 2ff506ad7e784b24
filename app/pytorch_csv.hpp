#pragma once
/// PyTorch pipelining's action CSV (torch.distributed.pipelining, `_dump_csv` /
/// `_load_csv`): one row per pipeline rank, comma-separated actions in `_Action`'s string
/// form, [stage][type][microbatch]:
///   compute        "0F0" forward, "1B3" full backward, "0I2" backward for inputs,
///                  "0W2" backward for weights
///   communication  "0SEND_F0" / "1RECV_F0" (activations), "1SEND_B0" / "0RECV_B0"
///                  (gradients), "0REDUCE_GRAD", "0UNSHARD", "0RESHARD" (no microbatch)
/// An empty field is an idle step (PyTorch writes None that way). Stage indices are the
/// IR's (virtual) stages; with v chunks per rank a stage runs on the row that names it:
/// the looped placement (stage s on rank s mod pp, Megatron's and PyTorch's interleaved
/// schedules), the V of ZB-V / DualPipeV, or any other with v stages per rank.
#include <string>
#include <string_view>

#include "core/op_origin.hpp"
#include "core/schedule.hpp"
#include "schedulers/lowering/lowering.hpp"

namespace loom {

/// The action names of a file. kCurrent: PyTorch 2.5 on (B the full backward, I and W its
/// input and weight halves). kLegacy: the releases before, whose `_ComputationType` named
/// the input-gradient backward BACKWARD "B" beside WEIGHT "W", and the full backward
/// FULL_BACKWARD "BW" (in the last of them); a schedule without W actions ran B as the full
/// backward (use_full_backward). So in a legacy file "BW" is B, and "B" is I where the file
/// has W actions, else B.
enum class PytorchNaming { kCurrent, kLegacy };

/// One row per rank of replica 0 (data-parallel replicas run the same program), in rank
/// order. Compute actions only, or with `comms` also SEND_F/RECV_F/SEND_B/RECV_B for the
/// schedule's point-to-point messages and REDUCE_GRAD for its gradient all-reduces (other
/// collectives have no PyTorch action and are left out). Under parallel.fsdp held across
/// the step (fsdp_reshard_after_forward = false) a stage's gathers are one UNSHARD before
/// its first compute and its reduce-scatters one REDUCE_GRAD then RESHARD after its last
/// backward; a schedule that re-gathers layers per microbatch throws InputError. A stage of several
/// modules is one action per (stage, pass, microbatch); redundant copies are left out.
std::string format_pytorch_csv(const Schedule& schedule, bool comms);

/// The compute actions of each row, in order (communication actions are checked and
/// dropped: Loom's lowering inserts its own). Throws InputError "SOURCE:LINE:COL: ..." on
/// an action that does not parse. OVERLAP_F_B "(a;b)OVERLAP_F_B" runs a then b, as an
/// overlapped pair (Join::kOverlap) when a is an F and b a B of another microbatch;
/// format_pytorch_csv writes Loom's overlapped pairs that way.
RankOrders parse_pytorch_csv(std::string_view text, const std::string& source,
                             PytorchNaming naming = PytorchNaming::kCurrent);

/// A full Schedule from a compute-only action CSV: the rows must be the problem's
/// parallel.pp ranks, the stages 0..pp*v-1 each on one row, v per row, and the
/// microbatches 0..schedule.microbatches-1; then Loom's lowering (schedulers/lowering,
/// the chain cut into pp*v stages, each on the row that runs it) adds messages,
/// all-reduces, samples and memory. The scheduler name is
/// "pytorch-csv". Throws InputError naming the line and column of the first action that
/// breaks a rule, with the --set that would fix a mismatch. `origins`, when given,
/// receives each compute op's line, column and step (its field in the row, idle fields
/// counted, as PyTorch numbers steps); the messages the lowering adds have none.
Schedule import_pytorch_csv(const SchedulingProblem& problem, std::string_view text,
                            const std::string& source, OpOrigins* origins = nullptr,
                            PytorchNaming naming = PytorchNaming::kCurrent);

}  // namespace loom
