#!/usr/bin/env bash
# Issue 24's swap-AB for blockwise scales on the GPU, in two calls of the device tool:
#   bash scripts/device_blockwise_swap.sh [all|tests|mutants|variants|wide112|deepgemm]
# tests     the blockwise and fp8 GPU tests: the four swap-AB cases (pp64x32t, pp128x16t, pp128x32t, pp64x64tk2 on
#           C-order outs, so GemmConfig.block_scale_swapped) beside every unswapped tile's cases;
# mutants   the blockwise-swapped preset (pp64x32t, the problem swapped): every synchronization instruction of the
#           pingpong two-set loop with the tables' axes traded, deleted or weakened (about 3 minutes);
# variants  the swap-AB tiles beside the selection's pick and the unswapped small tiles at decode-sized M (16, 32)
#           and M = 64, on N and K of DeepGEMM's shapes, by every method the bench has (its JSON: which tile the
#           selection should offer there, if any);
# wide112   block N 112 (select.cost_model.BLOCK_SCALE_TUNE_TILES: 64 tiles over N = 7168, 128 units with 2 splits)
#           beside the selection on DeepGEMM's six N = 7168 shapes, by kernel durations among the other methods;
# deepgemm  DeepGEMM's 18 dense shapes, blockwise, as the closing figures use (one run; the swap-AB tiles are picked
#           only at M <= 32, select.cost_model.BLOCK_SCALE_SWAP_MAX_M, so this checks that nothing moved there).
# Issue 24's closing runs used these steps (docs/perf-notes.md, issue 24 steps 6-8).
# Logs and JSON land in $OUT. `all` runs tests, mutants and variants (about 8 minutes); deepgemm goes in a call of
# its own, or with the GPU suite.
export PYTHONUNBUFFERED=1 PYTHONPATH=.
OUT=${OUT:-out}
STEP=${1:-all}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader | tee "$OUT/gpu.txt"

tests() {
  timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider -rs tests/test_blockwise_gpu.py tests/test_fp8_gpu.py \
    > "$OUT/gpu_blockwise_swap.log" 2>&1
  echo "blockwise GPU tests rc $?"; tail -n 3 "$OUT/gpu_blockwise_swap.log"
}

variants() {
  # M = 16 and 32: decode; M = 64: the smallest of DeepGEMM's shapes, where the unswapped pp64 tiles pass its bar
  local shapes=16x7168x2048,32x7168x2048,16x2112x7168,32x4096x7168,16x24576x1536,32x7168x16384,64x7168x2048,64x4096x7168
  local tiles=pp64x64,pp64x64k2,pp64x128k2,pp64x32t,pp64x32tk2,pp64x64t,pp64x64tk2,pp128x16t,pp128x32t,pp128x32tk2,pp64x16t
  timeout 240 python3 -m ptxgemm bench --in-dtype float8_e4m3fn --scaling block --shapes "$shapes" --rounds 9 \
    --variants "$tiles" --out "$OUT" --name issue24_swap_variants > "$OUT/swap_variants.log" 2>&1
  echo "swap-AB variants rc $?"; tail -n 40 "$OUT/swap_variants.log"
}

mutants() {
  timeout 280 python3 -m ptxgemm mutants --preset blockwise-swapped \
    --json "$OUT/mutants_blockwise_swapped_h100.json" > "$OUT/mutants_blockwise_swapped_h100.txt" 2>&1
  echo "mutants rc $?"; tail -n 2 "$OUT/mutants_blockwise_swapped_h100.txt"
  grep "unexplained" "$OUT/mutants_blockwise_swapped_h100.txt" | grep -v "score:" | cut -c1-200 | head
}

wide112() {
  local shapes=64x7168x16384,128x7168x16384,64x7168x2048,128x7168x2048,4096x7168x16384,4096x7168x2048
  local tiles=pp64x112,pp64x112k2,pp64x112k3,coop128x112,coop128x112k2,coop128x112k3,coop128x112cn2,pp64x128k2,coop128x128k2
  timeout 300 python3 -m ptxgemm bench --in-dtype float8_e4m3fn --scaling block --shapes "$shapes" --rounds 9 \
    --variants "$tiles" --out "$OUT" --name issue24_wide112_variants > "$OUT/wide112_variants.log" 2>&1
  echo "block N 112 variants rc $?"; tail -n 30 "$OUT/wide112_variants.log"
}

deepgemm() {
  timeout 175 python3 -m ptxgemm bench --set deepgemm --in-dtype float8_e4m3fn --scaling block --out "$OUT" \
    --name issue24_swap_deepgemm > "$OUT/deepgemm.log" 2>&1
  echo "deepgemm rc $?"; grep -A 8 "^geomean ratio" "$OUT/deepgemm.log"
}

case "$STEP" in
  all) tests; mutants; variants ;;
  tests|mutants|variants|wide112|deepgemm) "$STEP" ;;
  *) echo "usage: $0 [all|tests|mutants|variants|wide112|deepgemm]" >&2; exit 2 ;;
esac
