#!/usr/bin/env bash
# Issue 26, deliverable 4 on the GPU (about 4 minutes on an H100 for all three steps, within one call of the device
# tool; a step name runs that step alone):
#   bash scripts/device_trace.sh [all|tests|square|splitk]
# tests   the trace GPU tests (tests/test_trace_gpu.py): pingpong as before; the cooperative schedule and split-K in
#         both schedules traced, each result checked against float64 and each role's events against the schedule;
# square  pingpong and cooperative side by side on 8192^3 bf16, each the selection's pick of its schedule
#         (`trace --compare`; on an H100 pp128x128 beside coop128x256c2), with a zoom of ZOOM_US around the middle;
# splitk  the same on 128x4096x8192, where both schedules split K (pp64x128k2 beside coop128x256k8).
# Per shape: summary.json (both summaries and each one's tracing overhead), compare.png, compare_zoom.png (square),
# sm<N>.png, overview.png, the log, and the split-K shape's Chrome traces (the square's are tens of MB: left out).
# Everything lands in one tarball, $OUT/trace_<step>.tgz (the device tool returns few files).
export PYTHONUNBUFFERED=1 PYTHONPATH=.
OUT=${OUT:-out}
STEP=${1:-all}
ZOOM_US=${ZOOM_US:-300}   # 8192^3: a few tiles of each schedule (a pingpong tile's mainloop ~36 us, cooperative's ~72)
W=$(mktemp -d); L=$W/device.log
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader | tee "$L"
trap 'rm -f "$W"/square/*.json.gz; tar czf "$OUT/trace_$STEP.tgz" -C "$W" .' EXIT

tests() {
  timeout 250 python3 -m pytest -q -m gpu tests/test_trace_gpu.py -p no:cacheprovider -rs > "$W/gpu_tests.log" 2>&1
  echo "trace GPU tests rc $?" | tee -a "$L"
  grep -a -E "passed|failed|skipped|error|^trace |FAILED" "$W/gpu_tests.log" | tail -n 30 | tee -a "$L"
}

compare() {   # name seconds m n k [extra options]
  local name=$1 seconds=$2 m=$3 n=$4 k=$5; shift 5
  mkdir -p "$W/$name"
  timeout "$seconds" python3 -m ptxgemm trace --m "$m" --n "$n" --k "$k" --compare pingpong,cooperative \
    --sm-count 2 "$@" --out "$W/$name" > "$W/$name/trace.log" 2>&1
  echo "$name ${m}x${n}x${k} rc $?" | tee -a "$L"
  grep -a -E "^NVIDIA|^--compare|result check|: check|^kernel|^tensor|^tile|^epilogue|^next|^split|^  |overhead|^traced" \
    "$W/$name/trace.log" | tee -a "$L"
}

case "$STEP" in
  all)    tests; compare square 200 8192 8192 8192 --window-us "$ZOOM_US"; compare splitk 100 128 4096 8192 ;;
  tests)  tests ;;
  square) compare square 200 8192 8192 8192 --window-us "$ZOOM_US" ;;
  splitk) compare splitk 100 128 4096 8192 ;;
  *)      echo "usage: $0 [all|tests|square|splitk]" >&2; exit 2 ;;
esac
