#pragma once
/// `loom profile --backend cuda`: each module's layer timed on this GPU with CUDA events,
/// forward (F), backward-input (I) and backward-weight (W) as the separate launches the
/// executor runs, over the same sweep as the host profiler (executor/profile.hpp), so the
/// rows feed the `calibrated` cost model the same way.
#include <vector>

#include "core/model.hpp"
#include "core/workload.hpp"
#include "executor/profile.hpp"

namespace loom::exec::cuda {

/// Runs on the current device. Times are medians over request.repeats after one warm-up.
std::vector<ProfileRow> profile_cuda(const Model& model, const Sample& first_sample,
                                     const ProfileRequest& request);

}  // namespace loom::exec::cuda
