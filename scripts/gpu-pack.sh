#!/usr/bin/env bash
# Prepares, on this (Debian 12) machine, what the lent GPU machine lacks to
# run smelt, into build/gpu-carry/ (ignored: build/), for
# scripts/gpu-check.sh to use there:
#
#   _C.cpython-312-x86_64-linux-gnu.so   the extension built for CPython 3.12
#                                        (the GPU machine's python3 is 3.12)
#   libs.tar.xz                          every shared library it needs that
#                                        is not glibc (libLLVM, SLEEF, oneDNN
#                                        and theirs), from this machine
#   STAMP                                the hash of the sources it was built
#                                        from (gpu-check.sh warns when stale)
#
# Nothing else: the GPU machine's image has what the tests and the
# benchmark use at run time (torch with CUDA, NVRTC and cuBLAS from its
# nvidia-* wheels, the driver's libcuda, pytest, numpy, transformers,
# Triton); tests_gpu/ and benchmarks/ travel with the working tree.
#
# Then the device tool's call (see scripts/gpu-check.sh):
#   run(command="bash scripts/gpu-check.sh", carry=["build/gpu-carry"], timeout_s=590)
#
#   scripts/gpu-pack.sh          build what changed, pack, print the size
#   scripts/gpu-pack.sh --hash   print the sources' hash only (gpu-check.sh)
#
# The build is setup.py's (`python3.12 setup.py build_ext`, not in place):
# its objects and .so go to build/temp-release-cp312/ and
# build/lib-release-cp312/, so the 3.11 extension in python/smelt/ is not
# touched. setup.py needs setuptools but no torch (smelt uses no torch
# headers); when the 3.12 interpreter has no setuptools, pip installs it
# into build/py312-setuptools/ (once). Only a changed source, header or
# setup.py rebuilds; libs.tar.xz is remade only when the set of libraries
# changed. Fails when the folder is over 60 MiB (the device tool carries
# 64 MiB with the working tree). Environment: PY312 (default: python3.12 on
# the PATH, else pyenv's 3.12.1).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
SRC_DIRS=(pyext tracer guards inductor autograd kernels)
CARRY=build/gpu-carry
TOOLS=build/py312-setuptools
LIMIT_MIB=60

say() { echo "gpu-pack: $*" >&2; }

# The hash of everything the extension is built from.
source_hash() {
    {
        find "${SRC_DIRS[@]}" -type f \( -name '*.c' -o -name '*.h' -o -name '*.def' \) -print0 \
            | LC_ALL=C sort -z | xargs -0 -r sha1sum
        sha1sum setup.py
    } | sha1sum | cut -d' ' -f1
}

if [ "${1:-}" = --hash ]; then
    source_hash
    exit 0
fi

find_python() {
    local p
    for p in "${PY312:-}" "$(command -v python3.12 || true)" /root/.pyenv/versions/3.12.1/bin/python3.12; do
        if [ -n "$p" ] && [ -x "$p" ] && "$p" -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null; then
            echo "$p"
            return 0
        fi
    done
    say "no CPython 3.12 found (set PY312=/path/to/python3.12)"
    exit 1
}

# Runs a command with its output in build/gpu-pack.log; on failure shows it.
quietly() {
    if ! "$@" >build/gpu-pack.log 2>&1 </dev/null; then
        cat build/gpu-pack.log >&2
        say "failed: $*"
        exit 1
    fi
}

# setuptools for the 3.12 interpreter (PYTHONPATH when it has none).
setuptools_path() {
    if "$PY" -c 'import setuptools' 2>/dev/null; then
        return 0
    fi
    if ! PYTHONPATH=$TOOLS "$PY" -c 'import setuptools' 2>/dev/null; then
        say "installing setuptools for $PY into $TOOLS"
        quietly "$PY" -m pip install -q --disable-pip-version-check --target "$TOOLS" "setuptools>=70.1"
    fi
    export PYTHONPATH=$ROOT/$TOOLS
}

# Builds the 3.12 extension when the sources changed since the last pack.
build_ext() {
    local hash=$1 so
    so=build/lib-release-cp312/smelt/_C.cpython-312-x86_64-linux-gnu.so
    if [ "$(cat "$CARRY/STAMP" 2>/dev/null)" = "$hash" ] && [ -f "$CARRY/${so##*/}" ]; then
        return 0
    fi
    setuptools_path
    say "building smelt._C for CPython 3.12"
    quietly env -u SMELT_DEBUG "$PY" setup.py -q build_ext
    [ -f "$so" ] || { say "setup.py built no $so"; exit 1; }
    cp "$so" "$CARRY/${so##*/}.tmp"
    mv "$CARRY/${so##*/}.tmp" "$CARRY/${so##*/}"
    echo "$hash" >"$CARRY/STAMP"
}

# Prints "soname path" for every library the extension loads that is not
# part of glibc (the GPU machine's glibc is newer and must stay its own).
needed_libs() {
    ldd "$1" | awk '$2 == "=>" && $3 ~ /^\/(usr\/)?lib/ { print $1, $3 }' \
        | grep -Ev '^(libc|libm|libdl|libpthread|librt|libresolv|libutil|ld-linux[^ ]*)\.so' || true
}

# libs.tar.xz of those libraries, remade when the list or a file changed.
pack_libs() {
    local so=$1 list stage n manifest
    list=$(needed_libs "$so")
    [ -n "$list" ] || { say "ldd found no libraries in $so"; exit 1; }
    n=$(wc -l <<<"$list")
    manifest=$(while read -r name path; do echo "$name $(stat -L -c '%s %Y' "$path")"; done <<<"$list")
    if [ "$(cat "$CARRY/libs.manifest" 2>/dev/null)" = "$manifest" ] && [ -f "$CARRY/libs.tar.xz" ]; then
        return 0
    fi
    say "packing $n libraries (xz -9, a minute or two)"
    stage=build/gpu-pack-stage
    rm -rf "$stage"
    mkdir -p "$stage"
    while read -r name path; do cp -L "$path" "$stage/$name"; done <<<"$list"
    tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$stage" -cf - . \
        | xz -9 -T2 >"$CARRY/libs.tar.xz.tmp"
    rm -rf "$stage"
    mv "$CARRY/libs.tar.xz.tmp" "$CARRY/libs.tar.xz"
    echo "$manifest" >"$CARRY/libs.manifest"
}

ROOT=$(pwd -P)
mkdir -p "$CARRY"
exec 9>build/gpu-pack.lock
flock 9
PY=$(find_python)
build_ext "$(source_hash)"
pack_libs "$CARRY/_C.cpython-312-x86_64-linux-gnu.so"
bytes=$(du -cb "$CARRY"/* | tail -1 | cut -f1)
mib=$(awk -v b="$bytes" 'BEGIN { printf "%.1f", b / 1048576 }')
echo "gpu-pack: $CARRY: $mib MiB ($(wc -l <"$CARRY/libs.manifest") libraries, built from $(cut -c1-12 "$CARRY/STAMP"))"
if [ "$bytes" -gt $((LIMIT_MIB * 1048576)) ]; then
    say "over $LIMIT_MIB MiB: the device tool carries 64 MiB in all, the working tree included"
    exit 1
fi
