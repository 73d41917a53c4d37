#!/usr/bin/env bash
# Kernel variants of one tree on one GPU host, in one call: dev libraries (bench/dev_library.py)
# of a few kernel TUs built side by side with the host's nvcc, one per set of -D flags; each
# variant's test binary (attention group, bf16) and every switch under memcheck, all at once, then
# bench_pair.py of the first variant against each other one. Issue 35's compile-time switches
# (FAS_SM90_HOLD_PV_WAIT, FAS_SM90_POLY_EXP2_EVERY) are what it was written for.
#   TESTS=GROUP    the test binary's group for the tests and memcheck (default attention; the
#                  decode kernels: paged)
#   LIMIT=SECONDS  the cap on each test run and memcheck (default 300; they run side by side): a
#                  variant whose pipeline protocol slips hangs, and the cap keeps the other results
#   SANITIZER=TOOL compute-sanitizer's tool for the non-first variants (default memcheck;
#                  racecheck for a switch that changes how warps hand shared memory over)
#   SANITIZER_ARGS more compute-sanitizer options, e.g. '--kernel-name kns=stream_kernel': racecheck
#                  of only the decode kernels took the paged group 183 s instead of over 280
#   BENCH=SCRIPT   instead of bench_pair.py: a bench script that times one library
#                  (bench/bench_fp8_kv.py, bench/bench_decode.py), run on every variant in
#                  turn, two passes, with BENCH_ARGS (the second pass is the one to read)
#
#   here:        bash scripts/host_build_gpu.sh pack            (third_party's headers, once)
#   GPU machine: bash scripts/gpu_variants.sh OUT TUS VARIANT... [-- BENCH_ARGS...]
#                  TUS: kernel TU names joined by commas (kernels/NAME.cu without .cu);
#                  VARIANT: NAME=DEFINES, DEFINES joined by commas, empty for none
#                  (base= hold=FAS_SM90_HOLD_PV_WAIT=1); the first is the baseline.
#                  Libraries in OUT/NAME, logs in OUT/*.log. A variant whose library OUT
#                  already holds (built on the build machine with the same nvcc, OUT carried
#                  without its objects/) is not built again; carry .devcarry/host for the rest.
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
export PATH=/usr/local/cuda/bin:$PATH
out=${1:?usage: gpu_variants.sh OUT TUS VARIANT... [-- BENCH_ARGS...]}
tus=${2:?usage: gpu_variants.sh OUT TUS VARIANT... [-- BENCH_ARGS...]}
shift 2
variants=()
while (($#)) && [[ $1 != -- ]]; do variants+=("$1"); shift; done
[[ ${1:-} == -- ]] && shift
((${#variants[@]} >= 2)) || { echo "gpu_variants.sh: name a baseline and at least one variant" >&2; exit 2; }
mkdir -p "$out"
{ nvidia-smi -L; nvcc --version | tail -1; git log --oneline -1; } | tee "$out/host.txt"
# The variants OUT does not hold yet (one built on the build machine, same nvcc, OUT carried: kept).
todo=()
for v in "${variants[@]}"; do
  if [[ -x $out/${v%%=*}/bin/test_varlen_inference ]]; then echo "${v%%=*}: built already" > "$out/build-${v%%=*}.log"
  else todo+=("$v"); fi
done
if ((${#todo[@]})); then bash scripts/host_build_gpu.sh prepare || exit; fi  # the pinned headers

# Each variant compiles its own objects (the flags key them); the host's cores are shared out.
jobs=$(( $(nproc) / (${#todo[@]} > 0 ? ${#todo[@]} : 1) ))
for v in "${todo[@]}"; do
  name=${v%%=*} defines=${v#*=}
  args=()
  [[ -n $defines ]] && for d in ${defines//,/ }; do args+=(--define "$d"); done
  python3 bench/dev_library.py --out "$out/$name" --jobs "$((jobs > 0 ? jobs : 1))" "${args[@]}" ${tus//,/ } \
    > "$out/build-$name.log" 2>&1 &
done
wait
for v in "${variants[@]}"; do
  name=${v%%=*}
  tail -1 "$out/build-$name.log"
  [[ -f $out/$name/bin/test_varlen_inference ]] || { echo "variant $name did not build: $out/build-$name.log"; exit 1; }
done

first=${variants[0]%%=*}
group=${TESTS:-attention}
tool=${SANITIZER:-memcheck}
# Correctness only, so every variant's tests and every switch's memcheck run at once (one GPU,
# separate processes): the call spends the longest run's time, not the sum.
check() {  # LOG COMMAND...: the command under the cap, its exit status as the log's last line
  local log=$1; shift
  timeout "${LIMIT:-300}" "$@" > "$log" 2>&1
  echo "exit $?" >> "$log"
}
for v in "${variants[@]}"; do
  name=${v%%=*}
  check "$out/test-$name.log" "$out/$name/bin/test_varlen_inference" --dtype bf16 --quick --only "$group" &
  # shellcheck disable=SC2086  # SANITIZER_ARGS holds several options
  [[ $name == "$first" ]] || check "$out/$tool-$name.log" compute-sanitizer --tool "$tool" ${SANITIZER_ARGS:-} \
    "$out/$name/bin/test_varlen_inference" --dtype bf16 --quick --only "$group" &
done
wait
for v in "${variants[@]}"; do
  name=${v%%=*}
  # A dev library holds a few kernels: a case no kernel of it serves fails with "rebuild ..."
  # (paged plans: "no paged kernel ... is built") in every variant alike; the other failures
  # are the ones a switch can cause.
  echo "test $name: $(tail -1 "$out/test-$name.log"), $(grep -E '^summary:' "$out/test-$name.log");" \
    "failures other than kernels not built: $(grep '^\[FAIL\]' "$out/test-$name.log" | grep -vc 'rebuild\|is built')"
  [[ $name == "$first" ]] || echo "$tool $name: $(tail -1 "$out/$tool-$name.log")," \
    "$(grep -E '(ERROR|RACECHECK) SUMMARY' "$out/$tool-$name.log")"
done
if [[ -n ${BENCH:-} ]]; then
  for pass in 1 2; do
    for v in "${variants[@]}"; do
      name=${v%%=*}
      echo "## $name, pass $pass: python3 $BENCH --artifact $out/$name $*"
      python3 "$BENCH" --artifact "$out/$name" "$@" 2>&1 | tee "$out/bench-$name-$pass.log" | grep -E '^\||Ceilings'
    done
  done
  exit 0
fi
for v in "${variants[@]:1}"; do
  name=${v%%=*}
  python3 bench/bench_pair.py --before "$out/$first" --after "$out/$name" "$@" > "$out/pair-$name.log" 2>&1
  echo "pair $first -> $name: $(tail -1 "$out/pair-$name.log")"
  # The rows that moved by more than 1% either way.
  awk -F'|' 'NF > 5 && $6 + 0 > 0 && ($6 + 0 < 0.99 || $6 + 0 > 1.01)' "$out/pair-$name.log"
done
