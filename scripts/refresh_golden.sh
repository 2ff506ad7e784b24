#!/usr/bin/env bash
# Regenerates the golden outputs in tests/golden/: tests/golden/evaluator/<scheduler>/
# <examples|paper>/<config>.txt, one file per registered scheduler x config of
# configs/examples and configs/paper (the evaluator's iteration time, bubble fraction,
# per-rank busy time and peak memory, and per-rank op order, or the rejection), and
# tests/golden/simgrid/ for the examples under SimGrid with their own scheduler. Run it
# after a deliberate change to a scheduler, a cost model or a config, or after registering
# a scheduler (which adds its own folder), then review and commit `git diff tests/golden`.
# tests/core/golden_test.cpp compares; it writes the files instead when
# LOOM_REFRESH_GOLDEN is set. tests/golden/evaluator/ is rewritten from scratch, so files
# of a renamed or removed scheduler or config go.
#
# Usage: scripts/refresh_golden.sh [BUILD_DIR]   (default: build; -j2)
# Every config gets its file, but the test suite skips the slow ones unless
# LOOM_SLOW_TESTS=1 (skip_slow() in tests/config_sweep.hpp; 4-17 s each, dataset workloads
# of thousands of samples planned by every scheduler): paper/entrain-{chartqa-llama3-1b,
# cocoqa-llama3-1b, cocoqa-llama3-3b, llava-150k-llama3-1b, llava-150k-llama3-3b,
# synthchartnet-llama3-1b, synthchartnet-llama3-3b} and paper/oobleck-gpt3-{350m, 2.7b,
# 6.7b}. entrain-chartqa-llama3-3b and oobleck-gpt3-1.3b stay in the suite.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
[ -f "$build/CMakeCache.txt" ] || cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release
cmake --build "$build" -j2 --target loom_unit_tests loom_sim_tests
rm -rf tests/golden/evaluator
LOOM_SLOW_TESTS=1 LOOM_REFRESH_GOLDEN=1 "$build/tests/loom_unit_tests" --gtest_filter='Configs/Golden.*' \
  --gtest_brief=1 >/dev/null
LOOM_SLOW_TESTS=1 "$build/tests/loom_unit_tests" --gtest_filter='Configs/Golden.*:GoldenFiles.*' \
  --gtest_brief=1
# SimGrid, examples only (one engine per process: one test per run).
for t in Uniform1f1b VlmFrozen; do
  LOOM_REFRESH_GOLDEN=1 "$build/tests/sim/loom_sim_tests" --gtest_filter="GoldenSimGrid.$t" \
    --gtest_brief=1 >/dev/null
  "$build/tests/sim/loom_sim_tests" --gtest_filter="GoldenSimGrid.$t" --gtest_brief=1
done
git status --short tests/golden
