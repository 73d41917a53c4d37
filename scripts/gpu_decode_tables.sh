#!/usr/bin/env bash
# Issue 30's tables for one card in one call: every decode table of a release tarball, and the
# rows that must not move, against a baseline tarball in the same run, as copied (no build tools).
#   1. bench_decode.py (its default rows: 16/2, 8/1, 64/8, 32/32 at 64 x 4k, 8 x 32k, 256 x 1k,
#      1 x 128k, and 4-query rows; contiguous and pages of 16; cuDNN, the copy and the read limit
#      measured in the same run);
#   2. bench_fp8_kv.py at head dims 64, 128 and 256, e4m3 caches with bf16 q and with e4m3 q;
#   3. prefill, vision, chunked-prefill and mixed rows of TARBALL and BASELINE, one after the
#      other, twice (ABAB: the card's clock moves between passes).
# Usage: gpu_decode_tables.sh OUT_DIR TARBALL BASELINE_TARBALL; a log per table in OUT_DIR, the
# card named in each. Needs PyTorch (the bench scripts); run from the repository root.
set -uo pipefail
out=$1 tarball=$2 baseline=$3
mkdir -p "$out"
here=$(cd "$(dirname "$0")" && pwd)
bench=$(cd "$here/../bench" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
unpack() {  # TARBALL DEST -> prints the artifact folder
  mkdir -p "$2" && tar -xzf "$1" -C "$2" && find "$2" -mindepth 1 -maxdepth 1 -type d
}
new=$(unpack "$tarball" "$work/new") || exit 1
old=$(unpack "$baseline" "$work/old") || exit 1
# shellcheck source=gpu_table_run.sh
source "$(dirname "$0")/gpu_table_run.sh"  # run NAME COMMAND...
run decode python3 "$bench/bench_decode.py" --artifact "$new" --repeats 7
run fp8-kv python3 "$bench/bench_fp8_kv.py" --artifact "$new" --repeats 7 --head-dims 64 128 256 --fp8-q
for pass in 1 2; do
  for side in new old; do
    artifact=$([[ $side == new ]] && echo "$new" || echo "$old")
    run "prefill-$side-$pass" python3 "$bench/bench_attention.py" --artifact "$artifact" --only dense vision --repeats 9
    run "chunked-$side-$pass" python3 "$bench/bench_chunked_prefill.py" --artifact "$artifact" --repeats 7
    run "mixed-$side-$pass" python3 "$bench/bench_mixed.py" --artifact "$artifact" --repeats 9
  done
done
exit $status
