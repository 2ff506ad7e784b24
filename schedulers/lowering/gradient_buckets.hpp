#pragma once
/// Pass 6 under parallel.overlap_grad_reduce: Megatron-LM's overlapped data-parallel
/// gradient reduction (Megatron-Core DistributedDataParallel with overlap_grad_reduce).
///
/// Each rank's trainable layers, in the order their gradients become final (the last
/// microbatch's backward, top layer first), are cut into buckets: the rank's first stage
/// (model chunk) into buckets of parallel.grad_bucket_size parameters per GPU (default
/// max(40M, 1M x dp), Megatron-Core's DistributedDataParallelConfig.bucket_size), every
/// later chunk into one bucket, as Megatron-Core does. A bucket's all-reduce is async
/// (Collective::async): issued right after the compute that finishes its last gradient, it
/// overlaps the backward work that follows, and the optimizer step waits for it. To let a
/// bucket go before the whole final backward is done, that backward is split at the
/// buckets' layer boundaries into computes of its layer ranges, timed by their layers'
/// costs (DDP's per-parameter hooks fire in the same place).
///
/// Buckets keep one order in every replica (each issued once all earlier ones are ready
/// there), so their all-reduces match in program order on one group per rank. A tied
/// embedding's all-reduce then goes async too, behind the buckets on the communication
/// stream (Megatron's finalize_model_grads reduces it after the gradient sync finished).
#include <functional>

#include "core/schedule.hpp"
#include "schedulers/lowering/passes.hpp"

namespace loom::lowering {

/// Whether the overlapped buckets apply: the option is on, there are several replicas and
/// one pipeline per replica (Chimera's two copies per rank reduce as one blocking bucket).
bool overlaps_gradient_reduce(const Context& ctx);

/// Splits every rank's final backward computes and adds the buckets' async all-reduces;
/// `extra_bytes(r)` (a tied embedding's copy) joins rank r's first bucket.
void add_gradient_buckets(const Context& ctx, Schedule& schedule,
                          const std::function<double(PipelineRank)>& extra_bytes);

}  // namespace loom::lowering
