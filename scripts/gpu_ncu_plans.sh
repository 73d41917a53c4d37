#!/usr/bin/env bash
# ncu of the SM90 prefill kernel, one launch per (library, workload), the lines issue 35's step-1
# table reads (docs/design/sm90-mainloop-plan.md): duration, tensor and XU pipe use, issue slots,
# the main stalls. ncu locks the SM clock to base (1.35 GHz on the H200), so durations exceed
# bench_attention's; compare libraries within one report.
#
#   GPU machine: bash scripts/gpu_ncu_plans.sh LIBS WORKLOADS > report.log
#     LIBS: library folders joined by commas (dev libraries: bench/dev_library.py's OUT)
#     WORKLOADS: bench/profile_plan.py arguments per workload, joined by ';'
#                (e.g. '--head-dim 128;--head-dim 128 --fp8;--head-dim 256 --causal')
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
libs=${1:?usage: gpu_ncu_plans.sh LIBS WORKLOADS} workloads=${2:?usage: gpu_ncu_plans.sh LIBS WORKLOADS}
nvidia-smi -L
ncu --version | tail -1
keep='Duration|SM Frequency|Pipe Tensor Cycles|Pipe Xu|Pipe Fma Cycles|Pipe Alu Cycles|Issue Slots Busy'
keep="$keep|Warp Cycles Per Issued|Stall [A-Z]"  # every stall reason ncu reports
IFS=';' read -ra runs <<< "$workloads"
for run in "${runs[@]}"; do
  for lib in ${libs//,/ }; do
    echo "######## $(basename "$lib"): profile_plan.py $run"
    # (prefill_body: our kernel body of the 16-bit kernels, sm90/prefill_body.cuh; the FP8 ones keep the pinned)
    # shellcheck disable=SC2086  # run holds several arguments
    ncu --kernel-name 'regex:PrefillWithKVCache|prefill_body' --launch-skip 2 --launch-count 1 \
      --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats \
      --section SchedulerStats --print-details all \
      python3 bench/profile_plan.py --artifact "$lib" $run 2>&1 | grep -E "$keep|family|ERROR" | sed 's/  */ /g'
  done
done
