#pragma once
/// Where a schedule gets stuck, in the words of its programs: for a saved, hand-edited or
/// imported schedule the question is not "is there a cycle" but "which rank waits at which
/// step for which producer, and why that producer never comes".
#include "core/op_origin.hpp"
#include "core/schedule.hpp"

namespace loom {

/// Runs the programs with their waits alone (no time): a Recv waits for its matching Send
/// (core/matching.hpp), a Collective for every member of its group to reach it. Throws
/// InfeasibleError when some rank can never finish, listing for up to 8 stuck ranks
///   "rank 1 stuck at step 3 (1RECV_F0:L5<-0): waits for its producer, rank 0 step 7
///    (0SEND_F0:L5->1), which rank 0 never reaches (stuck at step 5 (0RECV_B0:L5<-1))"
/// and for a collective the members that never arrive. Also throws (from matching) when a
/// Send or Recv has no partner at all. With `origins` (a schedule read from a file) each op
/// is named by the file's step and line: "step 3 (1B0, line 2:9)", and an op the file does
/// not have by the file's step it serves: "Loom's 1RECV_B0:L4<-2 before step 3 (...)".
void check_runs_to_completion(const Schedule& schedule, const OpOrigins* origins = nullptr);

}  // namespace loom
