#!/usr/bin/env bash
# A change against a baseline revision on one GPU host, in one lease: both revisions' MATRIX built
# cold one after the other (host backend; sums of TU times of one machine on one day), this tree's
# minimal from the cached objects and its tarballs' GPU tests on four cores the baseline's build
# leaves them, then both full builds timed row by row in the same rounds (bench/bench_pair.py).
# Issue 33's closing checks. Not side by side on half the CPUs each: the build that ends first
# leaves the other an idle half, so their TUs see different loads (2026-11-28, H200 x4 host:
# sm90_fp8_prefill, whose sources the two revisions share, took 1.26x as long in the shorter build).
#
#   here:        bash scripts/gpu_pair.sh prepare REV
#                  clones REV into .devcarry/base (git-ignored) and packs both revisions' host
#                  carries (host_build_gpu.sh pack); carry .devcarry/host and .devcarry/base.
#   GPU machine: bash scripts/gpu_pair.sh start [MATRIX]     both builds in turn, then this tree's
#                                                             minimal and its GPU tests, detached
#                bash scripts/gpu_pair.sh poll SECONDS        until both builds and the tests ended
#                bash scripts/gpu_pair.sh report              build reports, test summaries
#                bash scripts/gpu_pair.sh bench [ARGS...]     bench_pair.py --before base --after this,
#                                                             then the other way round
#                bash scripts/gpu_pair.sh aa [ARGS...]        this build against a copy of itself
#   Logs in build/pair/; keep the machine held between calls (call the next one at once), carry
#   nothing after the first call (a carried path replaces what the build wrote there).
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
logs=build/pair base=.devcarry/base
export PATH=/usr/local/cuda/bin:$PATH PYTHONPATH="/tmp/flashbuild-site${PYTHONPATH:+:$PYTHONPATH}"
mode=${1:-}
shift || true

artifact_dir() { ls -d "$1"/artifacts/*/"$2"-host-cuda*-sm90a 2> /dev/null | head -1; }

tests() {  # TARBALL LABEL: every group in bf16, the attention group in fp16 and under memcheck
  local t=$1 l=$2 w
  bash scripts/gpu_check.sh "$t" --dtype bf16 --quick > "$logs/$l-bf16.log" 2>&1; echo "exit $?" >> "$logs/$l-bf16.log"
  bash scripts/gpu_check.sh "$t" --dtype fp16 --quick --only attention > "$logs/$l-fp16.log" 2>&1
  echo "exit $?" >> "$logs/$l-fp16.log"
  w=$(mktemp -d) && tar -xzf "$t" -C "$w"
  compute-sanitizer --tool memcheck "$(find "$w" -mindepth 1 -maxdepth 1 -type d)/bin/test_varlen_inference" \
    --dtype bf16 --quick --only attention > "$logs/$l-memcheck.log" 2>&1
  echo "exit $?" >> "$logs/$l-memcheck.log"
}

case $mode in
prepare)
  rev=${1:?usage: gpu_pair.sh prepare REV}
  rm -rf "$base" && git clone -q "$repo" "$base" && git -C "$base" checkout -q "$rev" || exit
  bash scripts/host_build_gpu.sh pack > /dev/null || exit
  ln -s "$repo/third_party" "$base/third_party" && (cd "$base" && bash scripts/host_build_gpu.sh pack > /dev/null)
  rc=$?; rm -f "$base/third_party"; du -sh "$base" .devcarry/host; exit $rc ;;
start)
  matrix=${1:-full}
  mkdir -p "$logs" && echo "$matrix" > "$logs/matrix"
  { nvidia-smi -L; lscpu | grep -E "^(Model name|Core|Thread|CPU\(s\))"; nvcc --version | tail -1; } | tee "$logs/host.txt"
  # This tree's build on every core, then the baseline's on all cores but the first four, on
  # which this tree's minimal (from its cached objects) and its GPU tests run meanwhile.
  last=$(( $(nproc) - 1 ))
  setsid nohup bash -c "bash scripts/host_build_gpu.sh start $matrix .devcarry/host || exit
    while [ ! -f build/host-$matrix.end ]; do sleep 3; done
    (cd $base && taskset -c 4-$last bash scripts/host_build_gpu.sh start $matrix .devcarry/host)
    taskset -c 0-3 bash scripts/host_build_gpu.sh run minimal .devcarry/host > $logs/minimal-build.log 2>&1
    for m in $matrix minimal; do
      taskset -c 0-3 bash scripts/gpu_pair.sh tests \$(ls artifacts/*/*\$m-host-cuda*.tar.gz) \$m
    done
    date > $logs/tests.done" < /dev/null > "$logs/chain.out" 2>&1 &
  echo "started: this tree's $matrix, then $base's (build/host-$matrix.out in each)"
  ;;
tests) tests "$1" "$2" ;;
poll)
  matrix=$(cat "$logs/matrix") end=$(( $(date +%s) + ${1:?usage: gpu_pair.sh poll SECONDS} ))
  until [[ -f $base/build/host-$matrix.end && -f $logs/tests.done ]] || (( $(date +%s) > end )); do sleep 10; done
  for d in . "$base"; do
    echo "$d: $(grep -cE '^  ok ' "$d/build/host-$matrix.out") TUs compiled, ended: $([[ -f $d/build/host-$matrix.end ]] && echo yes || echo no)"
  done
  ls "$logs" ;;
report)
  matrix=$(cat "$logs/matrix")
  bash scripts/host_build_gpu.sh wait "$matrix" 5 > "$logs/this-build.log" 2>&1
  (cd "$base" && bash scripts/host_build_gpu.sh wait "$matrix" 5) > "$logs/base-build.log" 2>&1
  for f in "$logs"/*.log; do echo "== $f"; grep -E "summary:|ERROR SUMMARY|^exit|wall|sum of TU|passed, " "$f" | tail -6; done ;;
bench)
  # Twice, in two processes with the builds' load order swapped: an order effect shows as rows
  # that move together with the order instead of with the build.
  matrix=$(cat "$logs/matrix")
  before=$(artifact_dir "$base" "$matrix") after=$(artifact_dir . "$matrix")
  python3 bench/bench_pair.py --before "$before" --after "$after" "$@" 2>&1 | tee "$logs/bench-pair.log"
  python3 bench/bench_pair.py --before "$after" --after "$before" "$@" 2>&1 | tee "$logs/bench-pair-swapped.log" ;;
aa)
  # This build against a copy of itself under another path: what the bench's process alone moves.
  matrix=$(cat "$logs/matrix")
  after=$(artifact_dir . "$matrix") copy=build/pair/aa-copy
  rm -rf "$copy" && cp -r "$after" "$copy" || exit
  python3 bench/bench_pair.py --before "$after" --after "$copy" "$@" 2>&1 | tee "$logs/bench-pair-aa.log" ;;
*) echo "usage: gpu_pair.sh prepare REV | start [MATRIX] | poll SECONDS | report | bench [ARGS...] | aa [ARGS...]" >&2
  exit 2 ;;
esac
