#!/usr/bin/env bash
# Before/after check of a change that must not move the library's outputs, on a GPU machine:
# for every tarball in AFTER_DIR with a same-named one in BEFORE_DIR:
#   1. checksums; the after build's test_varlen_inference and memcheck --quick;
#   2. the after build's test binary on the before build's library (LD_LIBRARY_PATH beats the
#      binary's RUNPATH): new checks that fail there show what the change fixed;
#   3. with PyTorch, bench/compare_outputs.py BEFORE AFTER (bit-identical outputs).
# Independent runs share the GPU in parallel (correctness only; nothing here is timed).
# Usage: gpu_compare.sh OUT_DIR BEFORE_DIR AFTER_DIR; logs land in OUT_DIR; exit 1 on any failure.
set -uo pipefail
out=$1 before=$2 after=$3
mkdir -p "$out"
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || true
unpack() {  # TARBALL DEST -> prints the artifact folder
  mkdir -p "$2" && tar -xzf "$1" -C "$2" && find "$2" -mindepth 1 -maxdepth 1 -type d
}
pids=()
for tarball in "$after"/*.tar.gz; do
  name=$(basename "$tarball" .tar.gz)
  [[ -f $before/$name.tar.gz ]] || { echo "$name: no baseline in $before, skipped"; continue; }
  a=$(unpack "$tarball" "$work/after/$name") b=$(unpack "$before/$name.tar.gz" "$work/before/$name")
  for dir in "$a" "$b"; do (cd "$dir" && sha256sum -c --quiet SHA256SUMS) || echo "$dir: SHA256SUMS FAILED"; done
  short=${name#flash_attn_standalone-}
  ( "$a/bin/test_varlen_inference" > "$out/$short.test.log" 2>&1; echo "exit $?" >> "$out/$short.test.log" ) &
  pids+=($!)
  if command -v compute-sanitizer > /dev/null; then
    ( compute-sanitizer --tool memcheck "$a/bin/test_varlen_inference" --quick > "$out/$short.memcheck.log" 2>&1
      echo "exit $?" >> "$out/$short.memcheck.log" ) &
    pids+=($!)
  fi
  ( LD_LIBRARY_PATH="$b/lib" "$a/bin/test_varlen_inference" --quick > "$out/$short.newtest-oldlib.log" 2>&1
    echo "exit $?" >> "$out/$short.newtest-oldlib.log" ) &
  pids+=($!)
  if python3 -c "import torch" 2> /dev/null; then
    ( python3 "$here/../bench/compare_outputs.py" "$b" "$a" > "$out/$short.compare.log" 2>&1
      echo "exit $?" >> "$out/$short.compare.log" ) &
    pids+=($!)
  fi
done
wait "${pids[@]}"
status=0
for log in "$out"/*.log; do
  summary=$(grep -E '^summary|ERROR SUMMARY|configuration\(s\) differ' "$log" | tr '\n' ' ')
  echo "$(basename "$log"): $summary $(tail -1 "$log")"
  case $log in
    *.newtest-oldlib.log) ;;  # expected to fail where the change fixed something
    *) [[ $(tail -1 "$log") == "exit 0" ]] || status=1 ;;
  esac
done
exit $status
