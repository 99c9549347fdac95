#!/usr/bin/env bash
# The grouped GEMM's device checks, one step per call so each fits the device tool's 600 s limit:
#   bash scripts/device_grouped.sh tests     # the grouped GPU tests, then the fuzzer (100 dense + 300 grouped cases)
#   bash scripts/device_grouped.sh mutants   # the grouped presets (contiguous, its pairs along M, masked, k form, the
#                                          # stream-K tail's fix-up): 0 unexplained
#   bash scripts/device_grouped.sh ncu       # the k form's DRAM and L2 bytes with C's store hint off and on, and the
#                                          # pair; the GPU's DRAM write ceiling (scripts/write_bandwidth.py)
#   bash scripts/device_grouped.sh bench     # bench --set grouped: bf16, fp8 rowwise, fp8 blockwise (RUN names them;
#                                          # SETS picks some of "bf16 row block"; VARIANTS is passed as --variants,
#                                          # e.g. VARIANTS=hint times the L2 hint toggled beside the default,
#                                          # VARIANTS=stream-k the stream-K tail)
# Everything lands in one tarball under $OUT (the device tool returns few files).
export PYTHONUNBUFFERED=1 PYTHONPATH=.
OUT=${OUT:-out}
W=$(mktemp -d); L=$W/device.log
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$L"
trap 'rm -f "$W"/*.png; tar czf "$OUT/grouped_$1${RUN:+_$RUN}${SETS:+_${SETS// /-}}.tgz" -C "$W" .' EXIT
case "$1" in
  tests)
    timeout 240 python3 -m pytest -q -m gpu tests/test_grouped_gpu.py -p no:cacheprovider -rs > "$W/gpu_tests.log" 2>&1
    tail -3 "$W/gpu_tests.log" | tee -a "$L"
    timeout 240 python3 -m ptxgemm fuzz --cases 100 --grouped 300 --out "$W" > "$W/fuzz.log" 2>&1
    grep -a "correct\|illegal" "$W/fuzz.log" | tee -a "$L" ;;
  mutants)   # the k form's max-scan mutants hang until the tester's 20 s timeout: give it the time
    # preset:seconds (H100: about 100, 115, 90 and 215)
    # grouped-sk: the stream-K tail's fix-up instructions only (--template streamk.ptx.j2; its other instructions
    # are the grouped preset's)
    for p in grouped:150 grouped-pair:170 grouped-masked:130 grouped-k:280 grouped-sk:120; do
      t=${p#*:}; p=${p%:*}
      only=""; [ $p = grouped-sk ] && only="--template streamk.ptx.j2"
      timeout $t python3 -m ptxgemm mutants --preset $p $only --json "$W/mutants_${p}.json" > "$W/mutants_$p.log" 2>&1
      echo "$p rc $?" | tee -a "$L"; grep -a "^score" "$W/mutants_$p.log" | tee -a "$L"
    done ;;
  bench)
    for s in ${SETS:-bf16 row block}; do
      args="--in-dtype float8_e4m3fn --scaling $s"; [ $s = bf16 ] && args="--in-dtype bfloat16"
      timeout 200 python3 -m ptxgemm bench --set grouped --rounds 5 $args ${VARIANTS:+--variants $VARIANTS} \
        --out "$W" --name "${RUN:-r1}" > "$W/bench_$s.log" 2>&1
      grep -a "geomean\|vs_published\|default vs\|Error" "$W/bench_$s.log" | tee -a "$L"
    done ;;
  ncu)   # ncu's default clock control (base clock) and cache flush before each kernel
    M=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum,\
dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__throughput.avg.pct_of_peak_sustained_elapsed,\
lts__t_sector_hit_rate.pct,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active
    timeout 200 /usr/local/cuda/bin/ncu --kernel-name regex:gemm_grouped --launch-count 6 --metrics "$M" --csv \
      --page raw python3 scripts/profile_grouped.py --case deepseek-v3-wgrad-gate-up --impl coop128x256:nostore \
      --impl coop128x256 --impl coop128x256c2 > "$W/ncu_wgrad_gate_up.csv" 2> "$W/ncu.err"
    echo "ncu rc $?" | tee -a "$L"
    timeout 60 python3 scripts/write_bandwidth.py "$W/write_bw.json" >> "$L" 2>&1 ;;
  *)
    echo "usage: $0 tests|mutants|bench|ncu" >&2; exit 2 ;;
esac
