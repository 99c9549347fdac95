#!/usr/bin/env bash
# The next device run of issue 25 (docs/design/grouped-gemm-issue25.md, "Next device run"), in one command per
# step so each fits the device's 600 s limit:
#   bash tools/device_issue25_next.sh tests     # the grouped GPU tests, the held-back parts' included
#   bash tools/device_issue25_next.sh mutants   # the contiguous preset again, and the k form's
#   bash tools/device_issue25_next.sh bench     # bench --set grouped, bf16 (with the k form once taken) and fp8
# Logs and JSON go to $OUT (the device tool's output folder).
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=.
OUT=${OUT:-out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$OUT/device.log"
case "$1" in
  tests)
    timeout 300 python3 -m pytest -q -m gpu tests/test_grouped_gpu.py -p no:cacheprovider -rs --durations=10 \
      2>&1 | tail -40 | tee "$OUT/grouped_gpu_tests.log" ;;
  mutants)
    timeout 280 python3 -m ptxgemm mutants --preset grouped --json "$OUT/mutants_grouped_h100.json" \
      > "$OUT/mutants_grouped.log" 2>&1
    grep -a "unexplained\|^score" "$OUT/mutants_grouped.log" | tail -8
    timeout 280 python3 -m ptxgemm mutants --preset grouped-k --json "$OUT/mutants_grouped_k_h100.json" \
      > "$OUT/mutants_grouped_k.log" 2>&1
    grep -a "unexplained\|^score" "$OUT/mutants_grouped_k.log" | tail -8 ;;
  bench)
    for dt in bfloat16 float8_e4m3fn; do
      timeout 200 python3 -m ptxgemm bench --set grouped --rounds 5 --in-dtype $dt --out "$OUT" --name "${RUN:-r1}" \
        2>&1 | grep -a "geomean\|Error\|refused" | tee -a "$OUT/bench_grouped.log"
    done
    # DeepSeek-V3's blockwise recipe per expert against DeepGEMM's published grouped figures (once it is taken)
    timeout 200 python3 -m ptxgemm bench --set grouped --rounds 5 --in-dtype float8_e4m3fn --scaling block \
      --out "$OUT" --name "${RUN:-r1}" 2>&1 | grep -a "geomean\|vs_published\|Error" | tee -a "$OUT/bench_grouped.log"
    rm -f "$OUT"/*.png ;;
  *)
    echo "usage: $0 tests|mutants|bench" >&2; exit 2 ;;
esac
