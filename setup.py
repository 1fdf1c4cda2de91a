"""Builds smelt: the C extension smelt._C plus the Python package in python/smelt.

Every *.c under the component folders is compiled (new files are picked up
without editing this script). Objects are rebuilt only when their source, a
header they include (gcc depfiles) or this script changed; the extension is
always relinked. SMELT_DEBUG=1 builds the ASan/UBSan variant into separate
build folders, so switching variants does not recompile the other one.
SMELT_WHEEL=1 links for a self-contained wheel (scripts/wheel.sh): the same
objects as the release build (so it only relinks), LLVM linked statically
(only the components smelt calls, its symbols kept out of the extension's
dynamic symbol table), the .so in its own folder build/lib-wheel-cpXY;
auditwheel then bundles SLEEF and oneDNN.
No torch headers are used: the extension talks to torch through the C API of
CPython only.
"""
import glob
import os
import shlex
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))
SRC_DIRS = ("pyext", "tracer", "guards", "inductor", "autograd", "kernels")
DEBUG = os.environ.get("SMELT_DEBUG", "") not in ("", "0")
VARIANT = "debug" if DEBUG else "release"
WHEEL = os.environ.get("SMELT_WHEEL", "") not in ("", "0")
LLVM_CONFIG = os.environ.get("LLVM_CONFIG", "llvm-config-19")
# What smelt calls of LLVM's C API: IR building, analysis (the verifier), the
# new pass manager, the host target's code generator, object files, ORC LLJIT.
LLVM_COMPONENTS = ("core", "analysis", "passes", "native", "object", "orcjit", "support")


def project_files(*patterns):
    """Paths relative to ROOT of files matching any pattern under SRC_DIRS."""
    found = set()
    for d in SRC_DIRS:
        for pat in patterns:
            found.update(glob.glob(os.path.join(d, "**", pat), root_dir=ROOT, recursive=True))
    return sorted(found)


def llvm_config(*args):
    """Tokens printed by llvm-config; a missing LLVM is a clear error."""
    try:
        out = subprocess.run([LLVM_CONFIG, *args], check=True, capture_output=True, text=True)
    except (OSError, subprocess.CalledProcessError) as e:
        raise SystemExit(f"smelt: {LLVM_CONFIG} {' '.join(args)} failed ({e}); "
                         "install llvm-19-dev (scripts/setup.sh does)") from None
    return shlex.split(out.stdout)


def compile_args():
    """C flags: strict C11, hidden symbols, LLVM's -I/-D (C++-only flags dropped)."""
    llvm = [f for f in llvm_config("--cflags") if f.startswith(("-I", "-D"))]
    args = ["-std=c11", "-Wall", "-Wextra", "-Werror", "-fvisibility=hidden", *llvm]
    if DEBUG:
        return args + ["-O0", "-g", "-fsanitize=address,undefined",
                       "-fno-omit-frame-pointer", "-UNDEBUG", "-DSMELT_DEBUG"]
    return args + ["-O2"]


def wheel_link_args():
    """Static LLVM for a wheel: its archives and their system libraries, zlib
    and zstd linked in too (libzstd-dev has the archive); z3, libxml2 and the
    rest are named by llvm-config but unreferenced by these components, and
    --as-needed drops them. libstdc++ linked in as well (its GCC 12 symbol
    versions would ask for more than manylinux_2_34 allows; oneDNN uses
    the system's) and arc4random (glibc 2.36) replaced by
    pyext/glibc_compat.c's. --exclude-libs keeps every archive's symbols
    local, so this LLVM cannot clash with another one in the process."""
    static = {"-lz": "-l:libz.a", "-lzstd": "-l:libzstd.a"}
    system = [static.get(f, f) for f in llvm_config("--link-static", "--system-libs")]
    return [*llvm_config("--link-static", "--ldflags", "--libs", *LLVM_COMPONENTS),
            "-Wl,--as-needed", *system, "-Wl,--no-as-needed", "-l:libstdc++.a",
            "-Wl,--wrap=arc4random", "-Wl,--exclude-libs,ALL", "-Wl,--gc-sections", "-Wl,--strip-debug"]


def link_args():
    if WHEEL:
        return wheel_link_args()
    args = llvm_config("--ldflags", "--libs")
    args.append("-Wl,-rpath," + llvm_config("--libdir")[0])
    if DEBUG:
        args.append("-fsanitize=address,undefined")
    return args


def up_to_date(obj, depfile):
    """True if obj exists and is newer than everything its depfile lists
    (source and headers) and than this script (whose flags it was built with)."""
    try:
        t = os.path.getmtime(obj)
        with open(depfile) as f:
            text = f.read().replace("\\\n", " ")
    except OSError:
        return False
    deps = text.partition(":")[2].split() + [os.path.join(ROOT, "setup.py")]
    try:
        return all(os.path.getmtime(os.path.join(ROOT, d)) <= t for d in deps)
    except OSError:
        return False


PY_TAG = f"cp{sys.version_info[0]}{sys.version_info[1]}"


def build_lib():
    """Where the linked extension goes with the rest of the package, unless
    built in place: a wheel (pip install ., pip wheel) is made from there."""
    return os.path.join(ROOT, "build", f"lib-{'wheel' if WHEEL else VARIANT}-{PY_TAG}")


class BuildExt(build_ext):
    """build_ext with per-variant, per-Python build folders and incremental objects."""

    def finalize_options(self):
        super().finalize_options()
        self.build_temp = os.path.join(ROOT, "build", f"temp-{VARIANT}-{PY_TAG}")
        self.build_lib = build_lib()
        self.force = True   # always relink; objects are skipped below

    def build_extension(self, ext):
        compile_one = self.compiler._compile

        def incremental(obj, src, ext_, cc_args, extra_postargs, pp_opts):
            dep = obj + ".d"
            if not up_to_date(obj, dep):
                compile_one(obj, src, ext_, cc_args, [*extra_postargs, "-MMD", "-MF", dep], pp_opts)

        self.compiler._compile = incremental
        if WHEEL:
            # no -L/-rpath of this Python's prefix (pyenv's LDSHARED has them):
            # libraries pip put there (an OpenCL loader) must not be found
            # at link time nor by auditwheel, only the system's
            self.compiler.linker_so = [a for a in self.compiler.linker_so
                                       if not a.startswith(("-L", "-Wl,-rpath"))]
        try:
            super().build_extension(ext)
        finally:
            self.compiler._compile = compile_one

    def copy_file(self, infile, outfile, *args, **kwargs):
        """Puts the built .so in place by rename: a process that has the old
        one loaded keeps its mapping instead of crashing on a rewritten file."""
        tmp = outfile + ".tmp"
        shutil.copyfile(infile, tmp)
        shutil.copymode(infile, tmp)
        os.replace(tmp, outfile)
        return outfile, True


sources = project_files("*.c")
if not sources:
    raise SystemExit("smelt: no C sources found under " + ", ".join(SRC_DIRS))

setup(
    packages=["smelt"],
    package_dir={"": "python"},
    ext_modules=[Extension(
        "smelt._C",
        sources=sources,
        depends=project_files("*.h", "*.def") + ["setup.py"],
        include_dirs=[ROOT, "/usr/include/x86_64-linux-gnu"],
        libraries=["sleef", "dnnl", "pthread", "m", "dl"],
        extra_compile_args=compile_args(),
        extra_link_args=link_args(),
    )],
    cmdclass={"build_ext": BuildExt},
    options={"build": {"build_lib": build_lib()}},   # bdist_wheel (pip install .) takes it from there
)
