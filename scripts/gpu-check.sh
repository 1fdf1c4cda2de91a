#!/usr/bin/env bash
# Runs smelt's GPU checks on the lent GPU machine (Ubuntu, an NVIDIA H100 or
# H200, python3 = 3.12 with torch, pytest and transformers; no package
# registry): the suite tests_gpu/, then benchmarks/cuda_bench.py --quick.
# Here first (the dev machine): scripts/gpu-pack.sh. Then the device tool:
#
#   run(command="bash scripts/gpu-check.sh", carry=["build/gpu-carry"], timeout_s=590)
#
#   bash scripts/gpu-check.sh          tests, then the benchmark in the time left
#   bash scripts/gpu-check.sh tests    the tests only
#   bash scripts/gpu-check.sh bench    the benchmark only
#
# What it does: unpacks build/gpu-carry/libs.tar.xz into a temporary folder
# and drops from it every library the machine has itself (ldconfig; its own
# are newer; if the extension's libraries do not then resolve, it keeps
# them all), puts that folder on LD_LIBRARY_PATH, installs the carried
# CPython 3.12 extension into python/smelt/ (PYTHONPATH=python), prints the
# GPU, torch and smelt's CUDA back end, then runs the parts under `timeout`
# (SIGINT first, so pytest still prints its summary). Logs and results go to
# $OUT (the device tool's output folder; build/gpu-out elsewhere): env.txt,
# tests.log, bench.log, bench.json, bench.txt, summary.txt. The summary
# (tests' result line, the benchmark's table) is printed last. Exit status:
# 0 when every part that ran passed.
#
# Environment: GPU_CHECK_BUDGET (seconds for the whole script, default 570:
# the tool's 590 less a margin), GPU_CHECK_TEST_S (the tests' share in the
# default mode, 300), GPU_CHECK_PYTEST (pytest arguments after tests_gpu,
# default "-x"), GPU_CHECK_BENCH (cuda_bench.py's arguments, default
# "--quick"; e.g. "--quick --only sdpa,models").
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
MODE=${1:-all}
case $MODE in
    all | tests | bench) ;;
    *) echo "usage: bash scripts/gpu-check.sh [tests|bench]" >&2; exit 2 ;;
esac
BUDGET=${GPU_CHECK_BUDGET:-570}
CARRY=build/gpu-carry
OUTDIR=${OUT:-build/gpu-out}
PY=python3
mkdir -p "$OUTDIR"
rm -f "$OUTDIR"/{env.txt,tests.log,bench.log,bench.json,bench.txt,summary.txt}   # (a local run's last ones)

say() { echo "gpu-check: $*"; }
left() { echo $((BUDGET - SECONDS)); }

# The carried libraries in a fresh folder on LD_LIBRARY_PATH: those the
# machine lacks ($1 = lacking), or all of them ($1 = all).
install_libs() {
    local libs have f
    libs=$(mktemp -d /tmp/smelt-libs.XXXXXX)
    if command -v xz >/dev/null; then
        tar -xJf "$CARRY/libs.tar.xz" -C "$libs" || return 1
    else
        "$PY" -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
            "$CARRY/libs.tar.xz" "$libs" || return 1
    fi
    have=
    [ "$1" = lacking ] && have=$(ldconfig -p | awk '/x86-64/ { print $1 }' | sort -u)
    local own=() used=()
    for f in "$libs"/*; do
        if grep -qxF "${f##*/}" <<<"$have"; then
            own+=("${f##*/}")
            rm -f "$f"
        else
            used+=("${f##*/}")
        fi
    done
    say "carried libraries used: ${used[*]:-none}; the machine's own: ${own[*]:-none}"
    export LD_LIBRARY_PATH=$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
}

# The 3.12 extension into python/smelt/, its libraries resolved.
install_ext() {
    local so missing
    so=$(ls "$CARRY"/_C.cpython-312-*.so 2>/dev/null | head -n1)
    [ -n "$so" ] || { say "no extension in $CARRY: run scripts/gpu-pack.sh, carry build/gpu-carry"; return 1; }
    cp "$so" python/smelt/ || return 1
    missing=$(ldd "python/smelt/${so##*/}" | grep 'not found')
    [ -z "$missing" ] || { say "unresolved libraries:"; echo "$missing"; return 1; }
    if [ "$(bash scripts/gpu-pack.sh --hash)" != "$(cat "$CARRY/STAMP" 2>/dev/null)" ]; then
        say "WARNING: the carried extension was built from other sources than these: rerun scripts/gpu-pack.sh"
    fi
    export PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH}
}

report_env() {
    nvidia-smi -L
    "$PY" - <<'EOF'
import os, sys, torch
print(f"python {sys.version.split()[0]}, torch {torch.__version__} (CUDA {torch.version.cuda}), "
      f"cuda available: {torch.cuda.is_available()}"
      + (f", {torch.cuda.get_device_name(0)}" if torch.cuda.is_available() else ""))
import smelt, smelt._C as C
print("smelt._C:", C.__file__)
print("smelt backend_available('cuda'):", C.backend_available("cuda"))
print("NVRTC:", C.nvrtc_version(), os.environ.get("SMELT_NVRTC", "(system)"))
EOF
}

run_tests() {
    local t=$1 args=(-q -rfE --durations=25 -p no:cacheprovider -o faulthandler_timeout=180)
    "$PY" -c 'import pytest_timeout' 2>/dev/null && args+=(--timeout=240)
    # shellcheck disable=SC2206
    args+=(${GPU_CHECK_PYTEST:--x})
    say "pytest tests_gpu (${t} s at most)"
    timeout -s INT -k 20 "$t" "$PY" -m pytest tests_gpu "${args[@]}" 2>&1 | tee "$OUTDIR/tests.log"
}

run_bench() {
    local t=$1
    # shellcheck disable=SC2206
    local extra=(${GPU_CHECK_BENCH:---quick})
    say "benchmarks/cuda_bench.py ${extra[*]} (${t} s at most)"
    SMELT_CACHE_DIR=$(mktemp -d /tmp/smelt-bench-cache.XXXXXX) \
        timeout -s INT -k 20 "$t" "$PY" benchmarks/cuda_bench.py "${extra[@]}" --time-limit $((t - 30)) \
        --json "$OUTDIR/bench.json" --table "$OUTDIR/bench.txt" 2>&1 | tee "$OUTDIR/bench.log"
}

export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_VERBOSITY=error TOKENIZERS_PARALLELISM=false
if ! { install_libs lacking && install_ext; }; then
    say "trying again with every carried library"
    install_libs all && install_ext || exit 1
fi
report_env 2>&1 | tee "$OUTDIR/env.txt"
[ "${PIPESTATUS[0]}" = 0 ] || { say "the environment is not usable (above)"; exit 1; }
status=0
if [ "$MODE" != bench ]; then
    share=$(left)
    [ "$MODE" = all ] && share=${GPU_CHECK_TEST_S:-300}
    run_tests "$share" || status=1
fi
if [ "$MODE" != tests ]; then
    if [ "$(left)" -lt 90 ]; then
        say "no time left for the benchmark"
        status=1
    else
        run_bench "$(left)" || status=1
    fi
fi
{
    echo "== gpu-check $MODE: $(head -n1 "$OUTDIR/env.txt" 2>/dev/null), ${SECONDS} s"
    [ -f "$OUTDIR/tests.log" ] &&
        echo "tests: $(grep -E '(passed|failed|error|no tests ran)' "$OUTDIR/tests.log" | tail -n1)"
    [ -f "$OUTDIR/bench.txt" ] && cat "$OUTDIR/bench.txt"
    [ "$MODE" != tests ] && [ ! -f "$OUTDIR/bench.txt" ] && echo "bench: no table (see bench.log)"
    echo "exit status $status"
} >"$OUTDIR/summary.txt"
echo
cat "$OUTDIR/summary.txt"
exit $status
