#!/usr/bin/env python3
"""GEMM and MoE-layer measurements for docs/gpu-validation.md (issues 48 and 50).

Runs on a lent Hopper machine with PyTorch (cuBLASLt underneath torch.mm and
torch._scaled_mm); figures, not tuning. Five parts, each fenced so one failure leaves the
others:

1. dense GEMMs of one Llama 3 70B layer at TP 4, sequence parallel, 8,192 tokens
   (validation/megatron-bridge-2511/llama3-70b-h100.toml): forward, dgrad and wgrad of
   QKV, the attention projection, fc1 (gated) and fc2, in BF16 and in FP8 with
   tensor-wise scales (Transformer Engine's delayed / current scaling GEMM: E4M3
   activations and weights, E5M2 gradients);
2. the routed experts of one Qwen3 30B-A3B layer on one EP-8 rank (16 experts, 4,096 rows
   each on H100 at MBS 2; 2,048 on B200 at MBS 1): one GEMM per expert (a loop, as
   Transformer Engine's GroupedLinear issues them; timed as launched and replayed from a
   CUDA graph, which leaves the GPU's time alone), torch._grouped_mm, and FP8;
3. one MoE layer's forward and backward in eager PyTorch with a dropless dispatcher
   (router, top-k, permutation, the token counts copied to the host as Megatron-Core's
   dispatcher does, grouped expert GEMMs, weighted unpermutation): wall time against
   GPU-busy time, kernel count, the per-launch host cost and one host synchronisation;
4. causal attention forward and backward per TP rank (SDPA's flash and cuDNN backends);
5. the FP8 GEMMs Transformer Engine's TP-communication overlap splits, whole and split.

usage: python3 bench/gpu/gemm_moe_bench.py [out.json]
       (LOOM_GPU_PARTS=dense,grouped,moe,attention,tp_overlap picks parts; default all)
"""
import json
import os
import statistics
import sys
import time

import torch

DEV = "cuda"
BF16 = torch.bfloat16
E4M3 = torch.float8_e4m3fn
E5M2 = torch.float8_e5m2


def timed(fn, warmup=3, repeat=5, target_ms=100.0, graph=False):
    """Median milliseconds of one call over `repeat` samples of ~target_ms of back-to-back
    calls (sustained clocks, not a cold burst). With graph=True the calls replay from a CUDA
    graph, so the figure is the GPU's time without the host's launch cost."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    if graph:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            fn()
        torch.cuda.current_stream().wait_stream(stream)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            fn()
        call = g.replay
    else:
        call = fn
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    call()
    end.record()
    end.synchronize()
    inner = max(1, min(2000, int(target_ms / max(start.elapsed_time(end), 1e-3))))
    samples = []
    for _ in range(repeat):
        start.record()
        for _ in range(inner):
            call()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) / inner)
    return statistics.median(samples)


def sm_clock_mhz():
    try:
        import pynvml
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        return pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)
    except Exception:
        return None


def fp8_mm(m, n, k, a_dtype=E4M3, b_dtype=E4M3):
    """A tensor-wise scaled FP8 GEMM [m,k] x [k,n] -> bf16, B column-major as cuBLASLt needs."""
    a = torch.randn(m, k, device=DEV).to(a_dtype)
    b = torch.randn(n, k, device=DEV).to(b_dtype).t()
    one = torch.ones((), device=DEV)
    return lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=BF16)


def bf16_mm(m, n, k):
    a = torch.randn(m, k, device=DEV, dtype=BF16)
    b = torch.randn(k, n, device=DEV, dtype=BF16)
    return lambda: torch.mm(a, b)


def layer_gemms(model, t, h, f, heads, kv_heads, tp, head_dim=128):
    """(name, m, n, k) of one gated-MLP transformer layer's linears at TP tp, sequence
    parallel: every GEMM sees all t tokens of the microbatch."""
    qkv = (heads + 2 * kv_heads) * head_dim // tp
    linears = {"qkv": (h, qkv), "proj": (heads * head_dim // tp, h), "fc1": (h, 2 * f // tp),
               "fc2": (f // tp, h)}
    out = []
    for name, (k_in, n_out) in linears.items():
        out.append((f"{model} {name} fwd", t, n_out, k_in))
        out.append((f"{model} {name} dgrad", t, k_in, n_out))
        out.append((f"{model} {name} wgrad", k_in, n_out, t))
    return out


def dense_shapes():
    squares = [(f"square {n}", n, n, n) for n in (4096, 8192, 16384)]
    # Llama 3 8B (TP 1), 70B (TP 4), 405B (TP 8) at 8,192 tokens: the Megatron-Bridge rows.
    return (squares + layer_gemms("70b", 8192, 8192, 28672, 64, 8, 4)
            + layer_gemms("405b", 8192, 16384, 53248, 128, 8, 8)
            + layer_gemms("8b", 8192, 4096, 14336, 32, 8, 1) + squares[1:2])


def part_dense(results):
    rows = []
    for name, m, n, k in dense_shapes():
        flop = 2.0 * m * n * k
        ms_bf16 = timed(bf16_mm(m, n, k))
        # TE: forward E4M3 x E4M3; dgrad and wgrad take the E5M2 gradient as one operand.
        grad = "dgrad" in name or "wgrad" in name
        try:
            ms_fp8 = timed(fp8_mm(m, n, k, E5M2 if grad else E4M3, E4M3))
        except RuntimeError as error:  # an unsupported pairing: fall back to E4M3 x E4M3
            print(f"  {name}: E5M2 operand refused ({str(error)[:80]}); E4M3 used")
            ms_fp8 = timed(fp8_mm(m, n, k))
        row = dict(name=name, m=m, n=n, k=k, bf16_ms=ms_bf16, fp8_ms=ms_fp8, sm_mhz=sm_clock_mhz(),
                   bf16_tflops=flop / ms_bf16 / 1e9, fp8_tflops=flop / ms_fp8 / 1e9)
        rows.append(row)
        print(f"  {name:12s} {m:6d} x {n:6d} x {k:6d}  bf16 {ms_bf16:7.3f} ms {row['bf16_tflops']:6.0f} T"
              f"   fp8 {ms_fp8:7.3f} ms {row['fp8_tflops']:6.0f} T  SM {row['sm_mhz']} MHz", flush=True)
    results["dense_gemms"] = rows


def part_grouped(results):
    out = {}
    hidden, ffn, experts = 2048, 768, 16
    for rows_per_expert in (4096, 2048):
        r = rows_per_expert
        shapes = {"fc1 fwd": (r, 2 * ffn, hidden), "fc2 fwd": (r, hidden, ffn),
                  "fc1 dgrad": (r, hidden, 2 * ffn), "fc2 dgrad": (r, ffn, hidden),
                  "fc1 wgrad": (hidden, 2 * ffn, r), "fc2 wgrad": (ffn, hidden, r)}
        for name, (m, n, k) in shapes.items():
            flop = 2.0 * m * n * k * experts
            row = dict(rows_per_expert=rows_per_expert, experts=experts, name=name, m=m, n=n, k=k)
            mms = [bf16_mm(m, n, k) for _ in range(experts)]
            row["bf16_loop_ms"] = timed(lambda: [mm() for mm in mms])
            row["bf16_loop_gpu_ms"] = timed(lambda: [mm() for mm in mms], graph=True)
            fp8s = [fp8_mm(m, n, k) for _ in range(experts)]
            row["fp8_loop_ms"] = timed(lambda: [mm() for mm in fp8s])
            row["fp8_loop_gpu_ms"] = timed(lambda: [mm() for mm in fp8s], graph=True)
            if "wgrad" not in name:  # tokens stacked along M, one weight per expert
                try:
                    a = torch.randn(m * experts, k, device=DEV, dtype=BF16)
                    w = torch.randn(experts, n, k, device=DEV, dtype=BF16).transpose(-2, -1)
                    offs = torch.arange(1, experts + 1, device=DEV, dtype=torch.int32) * m
                    row["bf16_grouped_ms"] = timed(lambda: torch._grouped_mm(a, w, offs=offs))
                except (RuntimeError, AttributeError) as error:
                    row["bf16_grouped_error"] = str(error)[:200]
            for key in [k_ for k_ in row if k_.endswith("_ms")]:
                row[key.replace("_ms", "_tflops")] = flop / row[key] / 1e9
            out.setdefault(str(rows_per_expert), []).append(row)
            print(f"  {experts} x {name:9s} {m:5d} x {n:5d} x {k:5d}: "
                  + ", ".join(f"{key} {row[key]:.3f} ({row[key.replace('_ms', '_tflops')]:.0f} T)"
                              for key in row if key.endswith("_ms")), flush=True)
    results["grouped_gemms"] = out


class DroplessMoE(torch.nn.Module):
    """One MoE MLP in eager PyTorch, as a dropless dispatcher runs it on one EP rank."""

    def __init__(self, hidden, ffn, experts, local, top_k, grouped):
        super().__init__()
        self.router = torch.nn.Linear(hidden, experts, bias=False, device=DEV, dtype=BF16)
        self.fc1 = torch.nn.Parameter(torch.randn(local, hidden, 2 * ffn, device=DEV, dtype=BF16) * 0.02)
        self.fc2 = torch.nn.Parameter(torch.randn(local, ffn, hidden, device=DEV, dtype=BF16) * 0.02)
        self.local, self.top_k, self.grouped = local, top_k, grouped

    def forward(self, x):
        probs = torch.softmax(self.router(x).float(), dim=-1)
        weights, chosen = torch.topk(probs, self.top_k, dim=-1)
        # This rank's experts only (EP: the others' would leave through the all-to-all).
        flat = chosen.flatten()
        token = torch.arange(x.shape[0], device=DEV).repeat_interleave(self.top_k)
        mine = flat < self.local
        expert, token, weight = flat[mine], token[mine], weights.flatten()[mine]
        order = torch.argsort(expert, stable=True)
        expert, token, weight = expert[order], token[order], weight[order]
        counts = torch.bincount(expert, minlength=self.local)
        tokens = x[token]
        if self.grouped:
            offs = torch.cumsum(counts, 0).to(torch.int32)
            h = torch._grouped_mm(tokens, self.fc1, offs=offs)
            gate, up = h.chunk(2, dim=-1)
            y = torch._grouped_mm(torch.nn.functional.silu(gate) * up, self.fc2, offs=offs)
        else:
            splits = counts.tolist()  # the dispatcher's device-to-host copy: the host waits here
            outs = []
            for e, part in enumerate(tokens.split(splits)):
                gate, up = (part @ self.fc1[e]).chunk(2, dim=-1)
                outs.append((torch.nn.functional.silu(gate) * up) @ self.fc2[e])
            y = torch.cat(outs)
        out = torch.zeros_like(x)
        return out.index_add(0, token, (y.float() * weight[:, None]).to(BF16))


def busy_ms(prof):
    """Union of the GPU kernel and memcpy intervals, in ms, and the kernel count."""
    spans = sorted((e.time_range.start, e.time_range.end) for e in prof.events()
                   if e.device_type == torch.autograd.DeviceType.CUDA)
    total, cur_s, cur_e = 0.0, None, None
    for s, e in spans:
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        total += cur_e - cur_s
    return total / 1000.0, len(spans)


def host_costs(results):
    """Host cost of one eager launch, and of one device-to-host synchronisation on an idle GPU."""
    a = torch.zeros(16, device=DEV)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(2000):
        a.add_(1)
    results["eager_launch_us"] = (time.perf_counter() - t0) / 2000 * 1e6
    torch.cuda.synchronize()
    syncs = []
    for _ in range(200):
        t0 = time.perf_counter()
        a.sum().item()
        syncs.append((time.perf_counter() - t0) * 1e6)
    results["sync_roundtrip_us"] = statistics.median(syncs)
    print(f"  eager launch {results['eager_launch_us']:.2f} us (host), "
          f"sum().item() round trip {results['sync_roundtrip_us']:.1f} us", flush=True)


def part_moe_layer(results):
    host_costs(results)
    rows = results.setdefault("moe_layer", [])
    for tokens in (4096, 8192):
        for grouped in (False, True):
            try:
                layer = DroplessMoE(2048, 768, 128, 16, 8, grouped)
                x = torch.randn(tokens, 2048, device=DEV, dtype=BF16, requires_grad=True)
                step = lambda: layer(x).float().pow(2).mean().backward()
                for _ in range(3):
                    step()
                torch.cuda.synchronize()
                walls = []
                for _ in range(10):
                    t0 = time.perf_counter()
                    step()
                    torch.cuda.synchronize()
                    walls.append((time.perf_counter() - t0) * 1000)
                with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                                        torch.profiler.ProfilerActivity.CUDA]) as prof:
                    step()
                    torch.cuda.synchronize()
                busy, kernels = busy_ms(prof)
            except Exception as error:
                print(f"  {tokens} tokens, grouped {grouped}: failed {error!r}"[:300], flush=True)
                continue
            row = dict(tokens=tokens, experts_local=16, grouped=grouped, wall_ms=statistics.median(walls),
                       gpu_busy_ms=busy, gpu_ops=kernels)
            rows.append(row)
            print(f"  MoE layer fwd+bwd, {tokens} tokens, {'grouped_mm' if grouped else 'per-expert loop'}: "
                  f"wall {row['wall_ms']:.3f} ms, GPU busy {busy:.3f} ms (profiled step), {kernels} GPU ops",
                  flush=True)


def part_attention(results):
    """Causal self-attention forward and backward through SDPA's flash and cuDNN backends
    (Transformer Engine runs cuDNN's fused attention on Hopper), per TP rank, BF16."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    rows = []
    # (name, query heads, KV heads, sequence): Llama 3 70B at TP 4 and 405B at TP 8, 8k tokens.
    for name, heads, kv, seq in (("70b tp4", 16, 2, 8192), ("405b tp8", 16, 1, 8192),
                                 ("8b tp1", 32, 8, 8192)):
        q = torch.randn(1, heads, seq, 128, device=DEV, dtype=BF16, requires_grad=True)
        k = torch.randn(1, heads, seq, 128, device=DEV, dtype=BF16, requires_grad=True)
        v = torch.randn(1, heads, seq, 128, device=DEV, dtype=BF16, requires_grad=True)
        flop_fwd = 4.0 * seq * seq * 128 * heads / 2  # causal: half the score matrix
        for backend in (SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION):
            try:
                with sdpa_kernel([backend]):
                    fwd = lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
                    ms_f = timed(fwd)
                    o = fwd()
                    g = torch.randn_like(o)
                    ms_fb = timed(lambda: torch.autograd.grad(fwd(), (q, k, v), g))
            except Exception as error:
                print(f"  {name} {backend.name}: failed {error!r}"[:200], flush=True)
                continue
            row = dict(name=name, backend=backend.name, heads=heads, kv_heads=kv, seq=seq, fwd_ms=ms_f,
                       bwd_ms=ms_fb - ms_f, fwd_tflops=flop_fwd / ms_f / 1e9,
                       bwd_tflops=2.5 * flop_fwd / (ms_fb - ms_f) / 1e9)
            rows.append(row)
            print(f"  {name} {backend.name}: fwd {ms_f:.3f} ms ({row['fwd_tflops']:.0f} T), "
                  f"bwd {row['bwd_ms']:.3f} ms ({row['bwd_tflops']:.0f} T)", flush=True)
    results["attention"] = rows


def part_tp_overlap(results):
    """The FP8 GEMMs Transformer Engine's userbuffers overlap reshapes in the Megatron-Bridge
    recipes (megatron/bridge/training/comm_overlap.py, userbuffers_fp8_h100_h8192_tp4_... and
    _h16384_tp8_cp2_...): ring exchange (qkv, fc1 forward; proj, fc2 dgrad) runs tp GEMMs of
    T/tp rows (aggregate=False, 70B) or tp/2 of 2T/tp (aggregate=True, 405B); the pipelined
    reduce-scatter (proj, fc2 forward) runs 4
    splits on the SMs its communication kernel leaves (set_sm_margin=True, num_sm). Each as
    one GEMM, as that overlap runs it, and as tp chunks (the later configs' ring exchange
    everywhere, what Loom's cost.tp_overlap prices), GPU time from CUDA-graph replay."""
    rows = []
    carveout = getattr(torch._C, "_set_sm_carveout_experimental", None)
    # (model, tokens per rank, hidden, ffn, tp, attention width, ring chunks, proj num_sm,
    # fc2 num_sm): 70B's ring exchange runs aggregate=False (tp chunks), 405B's True (tp / 2).
    for model, t, h, f, tp, width, ring, proj_sm, fc2_sm in (
            ("70b tp4", 8192, 8192, 28672, 4, 8192, 4, 24, 16),
            ("405b tp8 cp2", 4096, 16384, 53248, 8, 16384, 4, 24, 8)):
        qkv = (width + 2 * 8 * 128) // tp
        shapes = [("qkv fwd", t, qkv, h, "ring", 0), ("fc1 fwd", t, 2 * f // tp, h, "ring", 0),
                  ("proj dgrad", t, width // tp, h, "ring", 0), ("fc2 dgrad", t, f // tp, h, "ring", 0),
                  ("proj fwd", t, h, width // tp, "pipeline", proj_sm),
                  ("fc2 fwd", t, h, f // tp, "pipeline", fc2_sm)]
        for name, m, n, k, how, num_sm in shapes:
            whole = timed(fp8_mm(m, n, k), graph=True)
            chunks = ring if how == "ring" else 4
            parts = [fp8_mm(m // chunks, n, k) for _ in range(chunks)]
            row = dict(model=model, name=name, m=m, n=n, k=k, overlap=how, chunks=chunks, whole_ms=whole)
            row["chunked_ms"] = timed(lambda: [p() for p in parts], graph=True)
            # Later configs (and Loom's cost.tp_overlap = "ring-exchange") run every one of
            # these as a ring exchange of tp chunks: time that split too.
            tp_parts = parts if chunks == tp else [fp8_mm(m // tp, n, k) for _ in range(tp)]
            row["tp_chunks_ms"] = timed(lambda: [p() for p in tp_parts], graph=True)
            if how == "pipeline" and carveout is not None:
                try:
                    carveout(num_sm)
                    row["chunked_carveout_ms"] = timed(lambda: [p() for p in parts], graph=True)
                    row["num_sm"] = num_sm
                except Exception as error:  # no carve-out in this build: say so, keep the rest
                    row["carveout_error"] = repr(error)[:200]
                finally:
                    try:
                        carveout(None)
                    except Exception:
                        carveout(0)
            rows.append(row)
            margin = (f", chunks on {132 - num_sm} SMs {row['chunked_carveout_ms']:.3f} ms"
                      if "chunked_carveout_ms" in row else "")
            print(f"  {model} {name:10s} {m}x{n}x{k}: whole {whole:.3f} ms, {chunks} chunks "
                  f"{row['chunked_ms']:.3f} ms{margin}, {tp} chunks {row['tp_chunks_ms']:.3f} ms",
                  flush=True)
    results["tp_overlap_gemms"] = rows


def main():
    out_path = (sys.argv[1] if len(sys.argv) > 1
                else os.path.join(os.environ.get("OUT", "."), "gemm_moe_bench.json"))
    props = torch.cuda.get_device_properties(0)
    results = dict(device=props.name, sms=props.multi_processor_count, torch=torch.__version__,
                   cuda=torch.version.cuda, date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))
    print(f"{props.name}, {props.multi_processor_count} SMs, torch {torch.__version__}, CUDA {torch.version.cuda}")
    parts = {"dense": part_dense, "grouped": part_grouped, "moe": part_moe_layer,
             "attention": part_attention, "tp_overlap": part_tp_overlap}
    only = os.environ.get("LOOM_GPU_PARTS")  # e.g. "tp_overlap,dense"; default: all
    for part in (parts[name] for name in (only.split(",") if only else parts)):
        print(f"== {part.__name__}", flush=True)
        try:
            part(results)
        except Exception as error:  # keep the other parts' figures
            results[f"{part.__name__}_error"] = repr(error)[:400]
            print(f"  failed: {error!r}"[:400], flush=True)
        with open(out_path, "w") as f:
            json.dump(results, f, indent=1)
    print(f"wrote {out_path}")


if __name__ == "__main__":
    main()
