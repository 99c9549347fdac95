#!/usr/bin/env bash
# Issue 26, "where the joules go" (docs/design/sustained-issue26.md, next device run 1): ncu's counters for
# ptxgemm's pick (coop128x256c2, the pair sharing B) and the single CTA (coop128x256) beside cuBLAS, on 8192^3 and
# 4096x4096x14336, bf16, B row-major, one GPU. About 3 minutes on an H100, in one call of the device tool:
#   bash scripts/device_energy.sh
# What it tests (the design note's prediction): cuBLAS's kernel moves fewer L2->SM sectors per FLOP than
# coop128x256 and about as many as the pair, and the rest of the gap is the epilogue's shared-memory wavefronts and
# the k-loop's instruction count. scripts/profile_gemm.py launches ptxgemm 3 times, then torch.matmul 3 times; ncu
# skips the first two (ptxgemm's warm-ups) and profiles the next four (ptxgemm's third, then cuBLAS's three).
# Output: $OUT/ncu_<shape>_<config>.csv (ncu's raw page, one row per profiled kernel) and $OUT/energy.log.
export PYTHONUNBUFFERED=1 PYTHONPATH=.
OUT=${OUT:-out}
NCU=${NCU:-/usr/local/cuda/bin/ncu}
mkdir -p "$OUT"
L=$OUT/energy.log
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader | tee "$L"
# DRAM bytes; L2-to-SM sectors (TMA's loads come through the texture path's units); shared-memory wavefronts (the
# epilogue's stmatrix and staging); instructions issued; tensor-pipe activity; duration and clock
METRICS=dram__bytes_read.sum,lts__t_sectors_srcunit_tex.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,\
smsp__inst_executed.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,\
gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second
for shape in 8192x8192x8192 4096x4096x14336; do
  for cfg in coop128x256c2 coop128x256; do
    f=$OUT/ncu_${shape}_${cfg}.csv
    timeout 150 "$NCU" --kernel-name regex:'gemm_cooperative|nvjet|sm90|cutlass' --launch-skip 2 --launch-count 4 \
      --metrics "$METRICS" --csv --page raw python3 scripts/profile_gemm.py --shape "$shape" --config "$cfg" \
      > "$f" 2> "$OUT/ncu_${shape}_${cfg}.err"
    echo "$shape $cfg rc $? ($(grep -c '^"' "$f") csv lines)" | tee -a "$L"
  done
done
