#!/usr/bin/env bash
# Runs every libFuzzer target (fuzz/, one per input parser) for SECONDS each and prints,
# per target, execs/s, coverage (libFuzzer's final cov: edges and ft: features) and any
# crash file. A finding is a crash, an ASan/UBSan report, an uncaught exception other than
# Loom's InputError/InfeasibleError, a leak, a timeout (> 10 s for one input) or more than
# 2 GB RSS.
#
#   bash bench/fuzz.sh SECONDS [--jobs N] [--update-corpus] [--replay] [TARGET...]
#
# Builds $LOOM_FUZZ_BUILD (default build-fuzz) with clang-14, LOOM_FUZZ=ON and
# LOOM_SANITIZE=ON (ASan + UBSan; the same configuration as scripts/sanitize.sh's
# build-asan, so LOOM_FUZZ_BUILD=build-asan reuses that tree). Each target starts from its
# seeds in fuzz/corpus/<target>/; new interesting inputs go to
# $LOOM_FUZZ_BUILD/fuzz-out/corpus/<target>/ (scratch), and into the repo's corpus only
# with --update-corpus (merged, -merge=1, so it keeps only inputs that add coverage).
# --jobs N runs N targets at a time (default 1). --replay runs each seed once instead
# (SECONDS is ignored; what scripts/sanitize.sh does in CI). Crash files:
# $LOOM_FUZZ_BUILD/fuzz-out/<target>-crash-*; logs: $LOOM_FUZZ_BUILD/fuzz-out/<target>.log.
# Exit status 1 when any target found something.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
[ $# -ge 1 ] || usage
seconds=$1
shift
[[ "$seconds" =~ ^[0-9]+$ ]] || usage
jobs=1
update=0
replay=0
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --jobs) jobs=$2; shift 2 ;;
    --update-corpus) update=1; shift ;;
    --replay) replay=1; shift ;;
    -h|--help) usage ;;
    *) targets+=("$1"); shift ;;
  esac
done
if [ ${#targets[@]} -eq 0 ]; then
  targets=(config workload_csv trace_events trace_counts throughput_table
           profile_calibrated profile_oobleck schedule_ir pytorch_csv chakra)
fi

build=${LOOM_FUZZ_BUILD:-build-fuzz}
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S . -B "$build" -DCMAKE_CXX_COMPILER=clang++-14 -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g" -DLOOM_FUZZ=ON -DLOOM_SANITIZE=ON \
    "${launcher[@]}" >/dev/null
fi
cmake --build "$build" -j2 --target fuzz_all >/dev/null
for t in "${targets[@]}"; do
  if [ ! -x "$build/fuzz/fuzz_$t" ]; then
    echo "fuzz: no target '$t' (targets are named without the fuzz_ prefix:" \
      "$(cd "$build/fuzz" && ls fuzz_* | sed 's/^fuzz_//' | tr '\n' ' '))" >&2
    exit 2
  fi
done

out="$build/fuzz-out"
mkdir -p "$out"
# UBSan aborts (the build makes it fatal; the stack helps), LSan on (ASan's default), and
# the third-party leak suppressions shared with scripts/sanitize.sh.
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
export LSAN_OPTIONS="suppressions=$PWD/scripts/lsan.supp:print_suppressions=0"

run_one() {
  local t=$1 bin="$build/fuzz/fuzz_$1" seeds="fuzz/corpus/$1" scratch="$out/corpus/$1"
  local log="$out/$t.log"
  mkdir -p "$scratch"
  rm -f "$out/$t"-{crash,timeout,oom,leak}-*
  local status=0
  if [ "$replay" = 1 ]; then
    "$bin" -runs=0 -timeout=10 -rss_limit_mb=2048 -artifact_prefix="$out/$t-" "$seeds" \
      >"$log" 2>&1 || status=$?
  else
    # New inputs land in the scratch dir (the first corpus dir); the seeds are read only.
    "$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
      -artifact_prefix="$out/$t-" "$scratch" "$seeds" >"$log" 2>&1 || status=$?
  fi
  local execs cov ft crashes
  execs=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | grep -o '[0-9]*$' || true)
  cov=$(grep -Eo 'cov: [0-9]+' "$log" | tail -1 | grep -o '[0-9]*' || true)
  ft=$(grep -Eo 'ft: [0-9]+' "$log" | tail -1 | grep -o '[0-9]*' || true)
  crashes=$(ls "$out/$t"-{crash,timeout,oom,leak}-* 2>/dev/null | tr '\n' ' ' || true)
  if [ "$replay" = 1 ]; then
    printf '%-20s replayed %s inputs, cov %s, ft %s%s\n' "$t" \
      "$(ls "$seeds" | wc -l)" "${cov:-?}" "${ft:-?}" \
      "$([ $status -eq 0 ] || echo ", FAILED (see $log)")"
  else
    printf '%-20s %6s execs/s  cov %5s  ft %6s  %s\n' "$t" "${execs:-?}" "${cov:-?}" \
      "${ft:-?}" "${crashes:-no findings}"
  fi
  [ $status -eq 0 ] && [ -z "$crashes" ]
}

echo "fuzz: $([ "$replay" = 1 ] && echo "replaying the seeds" || echo "${seconds}s per target"), $jobs at a time, logs in $out" >&2
failed=0
pids=()
names=()
for t in "${targets[@]}"; do
  run_one "$t" > "$out/$t.summary" &
  pids+=($!)
  names+=("$t")
  if [ ${#pids[@]} -ge "$jobs" ]; then
    wait "${pids[0]}" || failed=1
    cat "$out/${names[0]}.summary"
    pids=("${pids[@]:1}")
    names=("${names[@]:1}")
  fi
done
for i in "${!pids[@]}"; do
  wait "${pids[$i]}" || failed=1
  cat "$out/${names[$i]}.summary"
done

if [ "$update" = 1 ] && [ "$replay" = 0 ]; then
  for t in "${targets[@]}"; do
    before=$(ls "fuzz/corpus/$t" | wc -l)
    "$build/fuzz/fuzz_$t" -merge=1 -timeout=10 -rss_limit_mb=2048 "fuzz/corpus/$t" \
      "$out/corpus/$t" >"$out/$t.merge.log" 2>&1
    echo "fuzz: $t corpus $before -> $(ls "fuzz/corpus/$t" | wc -l) files" >&2
  done
fi
exit $failed
