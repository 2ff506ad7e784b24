#!/usr/bin/env python3
"""Derives samples.csv (a Loom workload CSV) from ServeGen's multimodal image-request
distributions (Alibaba, github.com/alibaba/ServeGen, data/mm-image, Apache-2.0).

ServeGen publishes, per client ("chunk") and per six-hour window, the distributions of a
request's text tokens, image tokens (the tokens the LLM serves, summed over the request's
images) and image count. This draws N samples from one client's day: a window uniformly,
then text and image tokens independently from that window's distributions (ServeGen gives
marginals only; their joint is not published). Loom's `vision` modality counts the
encoder's tokens, so each image token becomes 4 (Qwen2-VL merges 2x2 patches into one LLM
token; ServeGen's 1,196-token images are Qwen2-VL's 1280x720, 4,784 patches).

Usage: derive_workload.py SERVEGEN_MM_IMAGE_DIR [--chunk 10] [--samples 4096] [--seed 1]
Writes samples.csv next to this script; same inputs, same bytes.
"""

import argparse
import ast
import bisect
import json
import pathlib
import random

MERGE = 4  # Qwen2-VL: one LLM token per 2x2 ViT patches


def inverse_cdf(dist: dict) -> tuple[list, list]:
    values = sorted(dist)
    cdf, total = [], 0.0
    for v in values:
        total += dist[v]
        cdf.append(total)
    return values, [c / total for c in cdf]


def draw(table: tuple[list, list], u: float) -> int:
    values, cdf = table
    return int(values[min(bisect.bisect_left(cdf, u), len(values) - 1)])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("servegen_dir", type=pathlib.Path)
    ap.add_argument("--chunk", type=int, default=10)
    ap.add_argument("--samples", type=int, default=4096)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    data = json.loads((args.servegen_dir / f"chunk-{args.chunk}-dataset.json").read_text())
    windows = [(inverse_cdf(ast.literal_eval(w["text_tokens"])),
                inverse_cdf(ast.literal_eval(w["image_tokens"]))) for _, w in sorted(
                    data.items(), key=lambda kv: int(kv[0]))]
    rng = random.Random(args.seed)
    rows = ["sample_id,text_tokens,vision_tokens"]
    for i in range(args.samples):
        text, image = windows[rng.randrange(len(windows))]
        t = max(1, draw(text, rng.random()))
        rows.append(f"{i},{t},{MERGE * draw(image, rng.random())}")
    out = pathlib.Path(__file__).with_name("samples.csv")
    out.write_text("\n".join(rows) + "\n")
    print(f"wrote {out} ({args.samples} samples of chunk {args.chunk})")


if __name__ == "__main__":
    main()
