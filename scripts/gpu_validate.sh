#!/usr/bin/env bash
# Everything this project checks on a GPU machine, for one or more exported tarballs:
#   1. per tarball: checksums + test_varlen_inference (scripts/gpu_check.sh);
#   2. compute-sanitizer memcheck on the quick case list of each (if the tool is there);
#   3. with PyTorch: the repeatability probe, the plan API's host cost and the benchmark over
#      all artifacts together.
# Usage: gpu_validate.sh OUT_DIR TARBALL [TARBALL ...]; logs land in OUT_DIR.
set -uo pipefail
out=$1; shift
mkdir -p "$out"
here=$(cd "$(dirname "$0")" && pwd)
unpacked=$(mktemp -d)
trap 'rm -rf "$unpacked"' EXIT
status=0
artifacts=()
for tarball in "$@"; do
  name=$(basename "$tarball" .tar.gz)
  bash "$here/gpu_check.sh" "$tarball" > "$out/$name.test.log" 2>&1
  rc=$?
  echo "$name: test_varlen_inference exit $rc; $(grep '^summary' "$out/$name.test.log")"
  [[ $rc -eq 0 ]] || status=1
  mkdir -p "$unpacked/$name" && tar -xzf "$tarball" -C "$unpacked/$name"
  root=$(find "$unpacked/$name" -mindepth 1 -maxdepth 1 -type d)
  artifacts+=("$root")
  if command -v compute-sanitizer > /dev/null; then
    compute-sanitizer --tool memcheck "$root/bin/test_varlen_inference" --quick > "$out/$name.memcheck.log" 2>&1
    echo "$name: memcheck exit $?; $(grep 'ERROR SUMMARY' "$out/$name.memcheck.log")"
  fi
done
if python3 -c "import torch" 2> /dev/null; then
  python3 "$here/../bench/repeat_probe.py" --artifact "${artifacts[@]}" --runs 20 > "$out/probe.log" 2>&1 || status=1
  grep "^## \|^configs" "$out/probe.log"
  (cd "$here/../bench" && python3 plan_cost.py --artifact "${artifacts[@]}") > "$out/plan_cost.md" 2>&1 || status=1
  cat "$out/plan_cost.md"
  python3 "$here/../bench/bench_attention.py" --artifact "${artifacts[@]}" > "$out/bench.md" 2>&1 || status=1
  cat "$out/bench.md"
fi
exit $status
