#!/usr/bin/env bash
# The host-toolchain backend on the GPU machine (its own nvcc; no Docker, no network), timed.
#
#   here:        bash scripts/host_build_gpu.sh pack [CARRY]
#                  CARRY (default .devcarry/host, git-ignored) gets third_party.tar.xz (only the
#                  include folders sources.lock.yaml names for the sources a build compiles against,
#                  with their fetch stamps: `fetch` then finds them fetched) and wheels/ (the Python
#                  packages the GPU image lacks: invoke, jsonschema and its own). Nothing else.
#   GPU machine: bash scripts/host_build_gpu.sh run MATRIX [--fresh] [CARRY]
#                  installs the wheels (no index), unpacks third_party/ once, runs
#                  `invoke build --matrix MATRIX --backend host --offline` under the call's time
#                  limit (FLASHBUILD_CALL_LIMIT_S, default 540 s; then SIGINT: the build stops,
#                  compiled objects stay in build/objects), and reports this call's compile phase,
#                  every TU's time and the lower bound max(sum of TU times / slots, longest TU).
#                  Run it again (without --fresh) to continue: cached objects are not recompiled.
#                  --fresh first clears what a cold timing must not find (clear_host_build).
#                bash scripts/host_build_gpu.sh start MATRIX [CARRY]
#                bash scripts/host_build_gpu.sh wait MATRIX [SECONDS]
#                  one cold build with one continuous wall time across several calls: `start`
#                  clears as --fresh does and launches the build detached (setsid; output in
#                  build/host-MATRIX.out); `wait` polls up to SECONDS (default 570) and, once the
#                  build has ended, reports its wall time and the compile report. The machine must
#                  stay held between calls (call `wait` again at once).
#                bash scripts/host_build_gpu.sh prepare [CARRY]
#                  only the wheels and the unpacked upstream headers (scripts/gpu_variants.sh).
# Each `run` call appends a line to build/host-timing-MATRIX.log; the report sums them.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
cd "$repo"
# Where `prepare` installs the carried wheels on the GPU machine (absent here: harmless).
export PYTHONPATH="/tmp/flashbuild-site${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
mode=${1:-}
shift || true

pack() {
  local carry=${1:-.devcarry/host}
  mkdir -p "$carry/wheels"
  python3 - "$carry/third_party.tar.xz" <<'EOF' || return
import sys, tarfile
from pathlib import Path
from flashbuild.sources.upstream import STAMP, load_lock
pins = load_lock(Path("sources.lock.yaml"))
wanted = ("flash-attn", "flashinfer-python")  # the upstreams TUs compile against (no ptxas, no sccache)
with tarfile.open(sys.argv[1], "w:xz", preset=6) as tar:
    for name in wanted:
        root = Path("third_party") / pins[name].extract_dir_name
        if not (root / STAMP).is_file():
            sys.exit(f"{root} is not fetched: run `python3 -m invoke fetch` first")
        tar.add(root / STAMP)
        for role, folder in sorted(pins[name].paths.items()):
            tar.add(root / folder)
print(f"{sys.argv[1]}: {Path(sys.argv[1]).stat().st_size / 2**20:.1f} MiB")
EOF
  # The versions this machine runs (requirements.txt pins invoke and jsonschema; the rest are theirs).
  local specs
  specs=$(python3 -c "import importlib.metadata as m; print(' '.join(f'{p}=={m.version(p)}' for p in
    ('invoke', 'jsonschema', 'jsonschema-specifications', 'referencing', 'rpds-py')))") || return
  # shellcheck disable=SC2086
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d "$carry/wheels" $specs || return
  du -sh "$carry"/third_party.tar.xz "$carry"/wheels
  echo "carry: $carry (the GPU machine needs it at the same path in the clone)"
}

# Python packages from the carried wheels (no index) and the packed upstream headers, once.
prepare() {
  local carry=$1 site=/tmp/flashbuild-site
  if ! python3 -c "import invoke, jsonschema, yaml, rich" 2> /dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" "$carry"/wheels/*.whl || return
  fi
  for stamp in third_party/flash-attn-*/.flashbuild-source.json third_party/flashinfer-python-*/.flashbuild-source.json; do
    [[ -f $stamp ]] || { tar -xJf "$carry/third_party.tar.xz" || return; break; }
  done
}

# A cold start: no cached objects, no earlier host logs or timing, no earlier host artifact of MATRIX.
clear_host_build() {
  rm -rf build/objects build/logs/*-host-cuda* "build/host-timing-$1.log" build/host-"$1".* \
    artifacts/*/*"$1"-host-cuda*
}

# Seconds from epoch time $2 to epoch time $1 (both with fractions).
seconds_between() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.1f", a - b}'; }

run() {
  local matrix=${1:?usage: host_build_gpu.sh run MATRIX [--fresh] [CARRY]}
  shift
  local fresh=""
  if [[ ${1:-} == --fresh ]]; then fresh=1; shift; fi
  local carry=${1:-.devcarry/host}
  prepare "$carry" || return
  if [[ -n $fresh ]]; then clear_host_build "$matrix"; fi
  local limit=${FLASHBUILD_CALL_LIMIT_S:-540}
  local since started rc wall
  since=$(date +%s.%N)
  started=$(date +%s)
  # SIGINT to the build's process group: nvcc stops, the build reports "interrupted", objects stay.
  timeout -s INT -k 30 "$limit" python3 -m invoke build --matrix "$matrix" --backend host --offline
  rc=$?
  wall=$(( $(date +%s) - started ))
  local phase
  phase=$(python3 -m flashbuild.compile.compile_times --matrix "$matrix" --since "$since" | sed -n 's/.*this call: .*compile phase \([0-9]*\) s.*/\1/p' | head -1)
  echo "call at $(date -u +%FT%TZ): build exit $rc, wall ${wall} s, compile phase ${phase:-0} s" >> "build/host-timing-$matrix.log"
  echo "== $matrix with --backend host on $(nproc) CPUs, $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo)"
  [[ $rc -eq 124 || $rc -eq 130 ]] && echo "stopped at the ${limit} s limit: run again (without --fresh) to continue"
  python3 -m flashbuild.compile.compile_times --matrix "$matrix" --since "$since" --slots "$(nproc)"
  echo "calls so far (build/host-timing-$matrix.log):"
  cat "build/host-timing-$matrix.log"
  awk '{for (i = 1; i <= NF; i++) { if ($i == "wall") w += $(i + 1); if ($i == "phase") p += $(i + 1) }}
       END {printf "total: build wall %d s, compile phases %d s\n", w, p}' "build/host-timing-$matrix.log"
  ls -l artifacts/*/*-host-cuda*.tar.gz 2> /dev/null
  return $rc
}

start() {
  local matrix=${1:?usage: host_build_gpu.sh start MATRIX [CARRY]}
  prepare "${2:-.devcarry/host}" || return
  clear_host_build "$matrix"
  mkdir -p build
  date +%s.%N > "build/host-$matrix.start"
  # Detached from this call: the build outlives it; .rc and .end appear when it ends.
  setsid nohup bash -c "python3 -m invoke build --matrix $matrix --backend host --offline \
      > build/host-$matrix.out 2>&1; echo \$? > build/host-$matrix.rc; date +%s.%N > build/host-$matrix.end" \
    < /dev/null > /dev/null 2>&1 &
  echo "started: build/host-$matrix.out"
}

wait_build() {
  local matrix=${1:?usage: host_build_gpu.sh wait MATRIX [SECONDS]} seconds=${2:-570}
  local out=build/host-$matrix.out start t0
  start=$(cat "build/host-$matrix.start") || return
  t0=$(date +%s)
  while [[ ! -f build/host-$matrix.rc ]] && (( $(date +%s) - t0 < seconds )); do
    sleep 30
    printf '%5.0f s: %s TUs compiled; last: %s\n' "$(seconds_between "$(date +%s.%N)" "$start")" \
      "$(grep -cE '^  ok ' "$out")" "$(grep -E '^  (ok|FAIL)' "$out" | tail -1)"
  done
  if [[ ! -f build/host-$matrix.rc ]]; then
    echo "still running: call \`wait $matrix\` again"
    return 0
  fi
  echo "== $matrix with --backend host on $(nproc) CPUs: build exit $(cat "build/host-$matrix.rc"), wall" \
    "$(seconds_between "$(cat "build/host-$matrix.end")" "$start") s"
  python3 -m flashbuild.compile.compile_times --matrix "$matrix" --since "$start" --slots "$(nproc)"
  tail -5 "$out"
  ls -l artifacts/*/*"$matrix"-host-cuda*.tar.gz* 2> /dev/null
  return "$(cat "build/host-$matrix.rc")"
}

case $mode in
  pack) pack "$@" ;;
  run) run "$@" ;;
  start) start "$@" ;;
  wait) wait_build "$@" ;;
  prepare) prepare "${1:-.devcarry/host}" ;;
  *) echo "usage: host_build_gpu.sh pack [CARRY] | run MATRIX [--fresh] [CARRY] | start MATRIX [CARRY] |" \
       "wait MATRIX [SECONDS] | prepare [CARRY]" >&2; exit 2 ;;
esac
