#!/usr/bin/env bash
# profile_kernels: Nsight Compute on the kernels whose bars are furthest off, one launch each, in each
# form the library has for it, so that one device call says where their time goes (issue slots,
# stall reasons, tensor pipe, L2 / DRAM throughput). Not part of tools/gpu-check (ncu replays a kernel
# many times); run it after a gpu-check build, from the repository root:
#   bash bench/profile_kernels.sh [build-gpu] [filter]     (filter: a case name must contain it)
# Prints, per case, ncu's speed-of-light, warp-state, scheduler and compute-workload lines.
set -u
BUILD=${1:-build-gpu}
FILTER=${2:-}
IGNIS=$BUILD/ignis
command -v ncu >/dev/null || { echo "profile_kernels: ncu not found"; exit 1; }
[ -x "$IGNIS" ] || { echo "profile_kernels: $IGNIS not built"; exit 1; }

# name | environment | kernel regex | ignis bench arguments
CASES=(
  "prefill 4k causal TMA|IGNIS_PREFILL_WGMMA=3|prefill_wgmma|single_prefill --tokens 4096 --kv-len 4096 --q-heads 32 --k-heads 32 --head-dim 128 --mask causal"
  "prefill 4k causal cp.async|IGNIS_PREFILL_WGMMA=1|prefill_wgmma|single_prefill --tokens 4096 --kv-len 4096 --q-heads 32 --k-heads 32 --head-dim 128 --mask causal"
  "prefill 4k causal TMA + ping-pong|IGNIS_PREFILL_WGMMA=4|prefill_wgmma|single_prefill --tokens 4096 --kv-len 4096 --q-heads 32 --k-heads 32 --head-dim 128 --mask causal"
  "mla B128 T1 L4096 128h|IGNIS_MLA_WGMMA=1|mla_wgmma|mla --batch 128 --tokens 1 --kv-len 4096 --q-heads 128 --page-size 64"
  "mla B128 T1 L4096 128h cluster|IGNIS_MLA_WGMMA=3|mla_wgmma|mla --batch 128 --tokens 1 --kv-len 4096 --q-heads 128 --page-size 64"
)
rc=0
for c in "${CASES[@]}"; do
  IFS='|' read -r name setting kernel args <<< "$c"
  [ -n "$FILTER" ] && [[ "$name" != *"$FILTER"* ]] && continue
  echo "== $name ($setting): $args"
  # shellcheck disable=SC2086
  env "$setting" timeout 120 ncu --kernel-name "regex:$kernel" --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis \
    --section MemoryWorkloadAnalysis "$IGNIS" bench $args --iters 1 --mode direct > /tmp/profile_kernels.$$ 2>&1 || rc=1
  grep -E "  [a-z_]+_kernel|Duration|Throughput|Busy|Stall|Issue|Eligible|Active Warps|No Eligible|Pipe|Hit Rate" \
    /tmp/profile_kernels.$$ | grep -v "^==PROF==" | head -45
done
rm -f /tmp/profile_kernels.$$
exit $rc
