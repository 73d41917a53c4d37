#!/usr/bin/env bash
# Issue 35's tables for one card in one call, from built artifact folders (a request goes to the
# folder whose kernel head dim is nearest its own, as bench_attention.py's --artifact does), as
# copied (no build tools):
#   1. dense rows, 16 heads, 16k tokens per shape, bf16 and FP8 e4m3 inputs at head dims 64, 96,
#      128 and 256, causal and not, against SDPA cuDNN and flash in the same run;
#   2. softcap 50 against the same plan without it (16-bit and FP8, hd128 and hd256);
#   3. a causal left window of 4096, 8192 and 16384 keys on 32k tokens, per in-window score,
#      at head dims 128 and 256 (bf16 and FP8);
#   4. the Qwen2.5-VL vision tower (hd80: windows 64 x 256 and 256 x 64, whole images);
#   5. chunked prefill over pages of 16 with softcap 50 and with a 4096-key window, hd128 and 256;
#   6. with a baseline, bench_pair.py of the baseline against the first folder (every section).
# Usage: gpu_sm90_tables.sh OUT_DIR ARTIFACT... [--baseline ARTIFACT]; a log per table in
# OUT_DIR, each headed by the card and the command. Chunked prefill and the pairing take the first
# ARTIFACT alone (`full`, or hopper-check's for hd256). Needs PyTorch; run from the repository root.
set -uo pipefail
out=${1:?usage: gpu_sm90_tables.sh OUT_DIR ARTIFACT... [--baseline ARTIFACT]}
shift
artifacts=()
baseline=""
while (($#)); do
  if [[ $1 == --baseline ]]; then baseline=${2:?--baseline needs an artifact folder}; shift 2
  else artifacts+=("$1"); shift; fi
done
((${#artifacts[@]})) || { echo "gpu_sm90_tables.sh: name at least one artifact folder" >&2; exit 2; }
mkdir -p "$out"
bench=$(cd "$(dirname "$0")/../bench" && pwd)
# shellcheck source=gpu_table_run.sh
source "$(dirname "$0")/gpu_table_run.sh"  # run NAME COMMAND...
attention=(python3 "$bench/bench_attention.py" --artifact "${artifacts[@]}")
run dense "${attention[@]}" --only dense --dtypes bf16 --head-dims 64 96 128 256 --seqlens 16384 --repeats 9
run softcap "${attention[@]}" --only softcap --repeats 15
for head_dim in 128 256; do
  run "window-hd$head_dim" "${attention[@]}" --only window --windows 4096 8192 16384 --window-head-dim "$head_dim" --repeats 9
done
run vision "${attention[@]}" --only vision --repeats 15
for head_dim in 128 256; do
  run "chunked-hd$head_dim" python3 "$bench/bench_chunked_prefill.py" --artifact "${artifacts[0]}" --head-dim "$head_dim" \
    --softcap 50 --window 4096 --repeats 7
done
if [[ -n $baseline ]]; then
  run pair python3 "$bench/bench_pair.py" --before "$baseline" --after "${artifacts[0]}" --repeats 9
fi
exit $status
