"""Every table and figure in the seeds that reproduce.py does not compare cell by cell,
with the reason (from a pass over all five seed texts; see docs/reproduction/README.md)."""

# (id, what it is, where it is covered instead or why it is not expressed)
NOT_COMPARED = [
    ("diss-T2.1", "Oobleck model and batch configurations",
     "setup only: read into configs/paper/oobleck-*.toml"),
    ("diss-F2.1", "effective training time of Bamboo and Varuna",
     "no numbers in the text; the replay summary's time breakdown answers it per run"),
    ("diss-F2.10, F2.11, FA.1", "throughput over the EC2 P3 / GCP spot traces, time breakdown",
     "no per-point numbers in the text; plotted by analysis/fig_2_10.sh"),
    ("diss-T2.3", "Oobleck planning latency",
     "times the authors' Python planner: only the growth shape compares "
     "(build/bench/loom_bench_oobleck)"),
    ("diss-F3.1, CA-F3", "frozen vs trainable forward/backward breakdown",
     "bar charts without numbers in the text"),
    ("diss-T3.1, CA-T1, CA-T5/T6/T9", "model sizes and parallel configurations",
     "setup only: read into configs/paper/cornstarch-*.toml"),
    ("diss-T3.3, FB.1 Model rows", "the whole LLM under each CP policy at 16-64k",
     "Loom's CP model times one attention layer (the Attn rows are compared above). The "
     "paper's Model time is, per layer, its Attn time plus an amount about the same under "
     "every policy (at 64k 98-103 ms for LLM-S, 296-307 and 614-641 ms for LLM-M and -L) "
     "whose content (the projections' and MLP's forward and backward, K/V all-gather) it "
     "does not state"),
    ("diss-T3.4, T3.5", "Cornstarch vs DCP attention and end-to-end time",
     "DCP places data and computation blocks by hypergraph partitioning and fetches blocks "
     "with its own all-to-all and FlashAttention fork (Jiang et al., SOSP'25, which the "
     "seeds cite but do not include; the dissertation calls it ring-based), and Table 3.5 "
     "adds its planner's run time: Loom has no DCP planner"),
    ("diss-F3.7, FB.2, TB.2", "CU activity traces, multistream balance",
     "hardware traces below a schedule simulator's level"),
    ("diss-TB.1, CA supported-model lists", "supported models", "a list, not a measurement"),
    ("diss-F4.2, F4.6, F4.13", "schedule drawings and bubble illustrations",
     "no numbers; analysis/gantt_all_schedulers.sh draws Loom's"),
    ("diss-F4.4/F4.5", "per-sample workload ratios of the datasets",
     "a property of the datasets (datasets/), not of a schedule"),
    ("diss-T4.1, C.1", "DistTrain / DIP / Entrain parallel configurations",
     "setup: configs/paper/entrain-*.toml use them (pp 8)"),
    ("diss-T4.2, C.2-C.8", "Bernoulli-trial profiling batch sizes",
     "the paper's ratios disagree with its own Table C.1 configs; "
     "`loom plan layout` prints Loom's b_min"),
    ("diss-F4.14-F4.16, C.1-C.13", "memory over time, sensitivity, per-microbatch curves",
     "plots without numbers in the text; analysis/memory_plot.py and table_4_3.py draw "
     "Loom's"),
    ("CA-F9..F15, CA-T2/T3/T7/T8/T10/T11", "Cornstarch arXiv per-GPU throughput tables",
     "the dissertation's A40 testbed with other models: Llama 3.1, EVA-CLIP and Whisper at "
     "Table 1's sizes (layers, hidden, parameters only); the text bounds a sample at "
     "1.5k-4k tokens with 1k of text, but not how many EVA-CLIP makes of the 1280x720 image "
     "(its input resolution), which sets every vision stage's time. The dissertation's "
     "Table 3.2 and Fig 3.6 (the same method with Qwen2 "
     "Vision and Phi-4 audio) are compared instead; the figures have no numbers in the text"),
    ("hetero-TA2, TA4, TA5, F7, F8", "hetero 8K, non-colocated 120B, operating range",
     "every row pairs an encoder with a 14B, 32B, 70B or 120B LLM whose architecture "
     "(layers, hidden, heads) the seed text does not give (hetero-TA3's 1B+7B rows are "
     "compared above)"),
    ("hetero-TA3 1B+14B rows", "colocated long context with a 14B LLM",
     "the seed text does not give the 14B LLM's architecture (layers, hidden, heads)"),
    ("hetero-F6, F10-F13, TA6-TA8; O-F3", "convergence and loss curves",
     "training accuracy, not time"),
    ("O-T1..T7", "OmniBal InternVL-Chat results and ablations",
     "the GPU count, parallel layout and global batch are in an appendix the seed text "
     "lacks; the balancing steps have no on/off switches in Loom's omnibal"),
]
