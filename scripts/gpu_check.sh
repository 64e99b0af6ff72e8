#!/usr/bin/env bash
# bnfl on one NVIDIA GPU, with the machine's own CUDA PyTorch (torch >= 2.4) and nothing installed:
#
#   PYTHONPATH=. bash scripts/gpu_check.sh          # or: make gpu-check
#
# from the repository root, no network, no virtual environment: it needs python3 with torch, numpy
# and pytest; what else a part needs (tqdm, matplotlib, scipy, scikit-learn for the quick entry and
# the entry plans) is checked first, and a part that lacks it is skipped with a line naming it.
# About 5-7 minutes on one H100/H200 (each part has a time limit; all of them together stay under 8).
#
#   1. environment: python, torch, CUDA, the GPU, NCCL, the optional packages   -> environment.txt
#   2. pytest -m gpu tests/test_gpu.py: batched == sequential on CUDA (float32 to rounding,
#      float64 1e-12), FedTAN round == centralized step (float64), a 1-rank NCCL run == the
#      simulator, `bnfl run fixbn-tab2 --profile quick --device cuda` against its committed CPU
#      numbers (within 2.5 seed sds), also stacked as the paper profile stacks (CUDA graphs) and with
#      channels-last/TF32/bf16; stacked runs and graph replay equal the eager unstacked runs
#                                                                             -> gpu-tests.log, quick-entry*.md
#   3. benchmarks/bench_gpu.py: ResNet-20 FedTAN / FedAvg+BN rounds vs a plain PyTorch loop
#      (images/s), stacked at S = 1, 5, 25 with and without CUDA graphs (and the GPU's share of its
#      peak), the options, and the estimated wall time of every paper-profile entry, one run after
#      another and stacked                                                   -> bench_gpu.md, bench_gpu.json
#
# Everything is written to $OUT (default ./gpu-check-out); summary.md lists each part's outcome.
# Without a CUDA device the tests skip and the benchmark runs its tiny CPU form (a code-path check).
# Exit status: 0 when no part failed (skips are not failures), 1 otherwise, 2 when python3 lacks
# torch, numpy or pytest.
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2
OUT="${OUT:-$PWD/gpu-check-out}"
mkdir -p "$OUT" || exit 2
OUT="$(cd "$OUT" && pwd)"
export PYTHONPATH="${PYTHONPATH:-.}" OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}" MKL_NUM_THREADS="${MKL_NUM_THREADS:-1}"
export MPLBACKEND=Agg PYTHONHASHSEED=0 PYTHONDONTWRITEBYTECODE=1 BNFL_GPU_CHECK_OUT="$OUT"
PY="${PYTHON:-python3}"
SUMMARY="$OUT/summary.md"
START=$SECONDS
FAILED=0
: > "$SUMMARY"

say() { echo "$*" | tee -a "$SUMMARY"; }

# part NAME LIMIT_S COMMAND...: run with a time limit, log to $OUT/NAME.log, record the outcome
part() {
    local name=$1 limit=$2 t0=$SECONDS rc
    shift 2
    echo "== $name (limit ${limit} s): $*"
    timeout --kill-after=10 "$limit" "$@" 2>&1 | tee "$OUT/$name.log"
    rc=${PIPESTATUS[0]}
    if [ "$rc" -eq 0 ]; then
        say "- $name: PASS ($((SECONDS - t0)) s)"
    elif [ "$rc" -eq 3 ]; then
        say "- $name: SKIPPED: $(grep -m1 'SKIPPED' "$OUT/$name.log")"
    elif [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
        say "- $name: FAIL, stopped at its ${limit} s limit (see $name.log)"
        FAILED=1
    else
        say "- $name: FAIL, exit status $rc (see $name.log)"
        FAILED=1
    fi
}

say "# scripts/gpu_check.sh, $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
say ""

# -- 1. environment ------------------------------------------------------------------------------
if ! "$PY" - > "$OUT/environment.txt" 2>&1 <<'EOF'
import importlib.util, platform, sys
missing = [m for m in ("torch", "numpy", "pytest") if importlib.util.find_spec(m) is None]
if missing:
    print(f"required package(s) missing: {', '.join(missing)}")
    sys.exit(1)
import torch
print(f"python {platform.python_version()} ({sys.executable})")
print(f"torch {torch.__version__}, CUDA build {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}")
print(f"cuda available: {torch.cuda.is_available()}")
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    print(f"device 0: {p.name}, {p.total_memory / 2**30:.1f} GiB, capability {p.major}.{p.minor}, "
          f"{torch.cuda.device_count()} device(s)")
import torch.distributed as dist
print(f"torch.distributed: {dist.is_available()}, NCCL: {dist.is_available() and dist.is_nccl_available()}")
for m in ("tqdm", "matplotlib", "scipy", "sklearn", "hypothesis"):
    spec = importlib.util.find_spec(m)
    print(f"{m}: {'present' if spec else 'MISSING (the parts that need it are skipped)'}")
EOF
then
    cat "$OUT/environment.txt"
    say "- environment: FAIL: $(tail -n 1 "$OUT/environment.txt"); install torch, numpy and pytest for $PY"
    exit 2
fi
cat "$OUT/environment.txt"
say "- environment: $(grep -m1 '^torch ' "$OUT/environment.txt"); $(grep -m1 '^cuda available' "$OUT/environment.txt")"
grep -E 'MISSING' "$OUT/environment.txt" | sed 's/^/  - /' | tee -a "$SUMMARY"
if "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    BENCH=(--device cuda --rounds 3)
else
    say "- no CUDA device: the gpu tests skip (named in gpu-tests.log) and the benchmark runs --tiny on the CPU"
    BENCH=(--device cpu --tiny --entries fixbn-tab2)
fi

# -- 2. the gpu tests -------------------------------------------------------------------------------
# --noconftest: tests/conftest.py sets up hypothesis, which these tests do not use (and a GPU
# image may lack); test_gpu.py sets one CPU thread itself.
part gpu-tests 160 "$PY" -m pytest tests/test_gpu.py -m gpu -q -rs -p no:cacheprovider --noconftest \
    --junitxml="$OUT/gpu-tests.xml"
grep -E '^SKIPPED' "$OUT/gpu-tests.log" | sed 's/^/  - /' | tee -a "$SUMMARY"

# -- 3. the throughput benchmark and the paper-profile budget ---------------------------------------
part bench-gpu 220 "$PY" benchmarks/bench_gpu.py "${BENCH[@]}" --out "$OUT"

say ""
say "total: $((SECONDS - START)) s; results in $OUT (summary.md, environment.txt, gpu-tests.log, quick-entry.md, bench_gpu.md)"
exit "$FAILED"
