#!/usr/bin/env bash
# Runs the suite on every supported CPython present: 3.11, 3.12, 3.13.
#
#   scripts/test_all_pythons.sh [pytest arguments]   (make test-all-pythons)
#
# For each version, the interpreter is python3.X on PATH, else the newest
# pyenv version 3.X.* ($PYENV_ROOT, default ~/.pyenv); versions with
# neither are reported as absent and skipped. For each interpreter found:
# the Python packages the suite needs are installed for it when missing
# (scripts/setup.sh pips: the same pins, quiet and idempotent), smelt._C
# is built in place for it (python/smelt/_C.cpython-3X-*.so: the builds
# of different versions live side by side, in per-version build folders),
# and the suite runs with PYTHONPATH set to this checkout's python/, so
# the interpreter imports this tree's smelt whatever is installed.
# Pytest arguments default to `-q tests`. Prints one line per version and
# exits 1 if any suite (or its setup or build) failed, or if no
# interpreter was found. Logs: build/test-all-pythons/<version>.*.log.
# SMELT_PYTHONS="3.12 3.13" limits the versions tried.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$(pwd -P)
read -r -a VERSIONS <<<"${SMELT_PYTHONS:-3.11 3.12 3.13}"
LOGDIR=build/test-all-pythons
PYENV_ROOT=${PYENV_ROOT:-$HOME/.pyenv}
export PIP_DISABLE_PIP_VERSION_CHECK=1
export OCL_ICD_VENDORS=${OCL_ICD_VENDORS:-$ROOT/build/opencl-vendors}
ARGS=("$@")
[ ${#ARGS[@]} -eq 0 ] && ARGS=(-q tests)
mkdir -p "$LOGDIR"

say() { echo "test-all-pythons: $*" >&2; }

# The interpreter for version $1 (a path), or nothing.
find_python() {
    local v=$1 p
    if p=$(command -v "python$v" 2>/dev/null) && "$p" -c 'import sys; sys.exit(0)' 2>/dev/null; then
        # a pyenv shim names the version it would run; a missing one fails here
        echo "$p"
        return
    fi
    p=$(ls -d "$PYENV_ROOT"/versions/"$v".*/bin/python 2>/dev/null | sort -V | tail -n1)
    [ -n "$p" ] && [ -x "$p" ] && echo "$p"
}

# Runs the setup, the build and the suite for version $1 with interpreter
# $2; returns 0 when the suite passed.
run_one() {
    local v=$1 py=$2 real
    real=$("$py" -c 'import sys; print(sys.executable)') || return 1
    if ! PYTHON=$real bash scripts/setup.sh pips >"$LOGDIR/$v.setup.log" 2>&1; then
        say "$v: setup failed (see $LOGDIR/$v.setup.log)"
        return 1
    fi
    if ! "$real" setup.py -q build_ext --inplace >"$LOGDIR/$v.build.log" 2>&1; then
        say "$v: build failed (see $LOGDIR/$v.build.log)"
        return 1
    fi
    say "$v: running the suite with $real"
    PYTHONPATH="$ROOT/python${PYTHONPATH:+:$PYTHONPATH}" "$real" -m pytest "${ARGS[@]}" 2>&1 | tee "$LOGDIR/$v.test.log"
}

declare -A result
failed=0 found=0
for v in "${VERSIONS[@]}"; do
    py=$(find_python "$v")
    if [ -z "$py" ]; then
        result[$v]="absent"
        continue
    fi
    found=1
    start=$SECONDS
    if run_one "$v" "$py"; then
        result[$v]="passed ($((SECONDS - start)) s)"
    else
        result[$v]="FAILED ($((SECONDS - start)) s)"
        failed=1
    fi
done
echo "test-all-pythons:"
for v in "${VERSIONS[@]}"; do
    echo "  python$v: ${result[$v]}"
done
[ $found = 1 ] || { say "no supported Python found"; exit 1; }
exit $failed
