"""smelt: a just-in-time compiler for PyTorch programs, written in C.

`smelt.compile(fn_or_module)` traces the Python code that runs, compiles the
graph it builds into fused CPU kernels and reuses them while its guards hold;
`smelt._C` is the internal graph API (see README.md).
"""
import logging
import os

import torch

from . import _C

__version__ = "0.1.0"


def _find_nvrtc():
    """NVRTC from PyPI (nvidia-cuda-nvrtc: CUDA 13; -cu12: CUDA 12) for the
    CUDA back end's compiler: its library's path in SMELT_NVRTC, unless
    set (the C side tries the system's libnvrtc first)."""
    if os.environ.get("SMELT_NVRTC"):
        return
    import importlib.util
    spec = importlib.util.find_spec("nvidia")
    for base in (spec.submodule_search_locations or []) if spec else []:
        for rel in ("cu13/lib/libnvrtc.so.13", "cuda_nvrtc/lib/libnvrtc.so.12"):
            path = os.path.join(base, rel)
            if os.path.exists(path):
                os.environ["SMELT_NVRTC"] = path
                return


_find_nvrtc()

# SMELT_LOGS channels; each logs to the `smelt.<channel>` logger.
LOG_CHANNELS = ("graph", "guards", "recompiles", "graph_breaks",
                "output_code", "asm", "cache", "perf", "aot", "dynamic", "backend", "dynamo")


def _configure_logging(spec):
    """Enables the channels named in spec ("graph,guards", "all") at INFO and,
    unless the application already set up logging, prints them on stderr.
    Returns the set of enabled channels."""
    names = {n.strip() for n in spec.split(",") if n.strip()}
    enabled = set(LOG_CHANNELS) if "all" in names else names & set(LOG_CHANNELS)
    log = logging.getLogger("smelt")   # (smelt._C warns about unknown names)
    if not enabled:
        return enabled
    if not log.handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("[%(name)s] %(message)s"))
        log.addHandler(handler)
        log.propagate = False
    log.setLevel(logging.INFO)
    for channel in LOG_CHANNELS:
        logging.getLogger("smelt." + channel).setLevel(
            logging.INFO if channel in enabled else logging.WARNING)
    return enabled


log_channels = frozenset(_configure_logging(os.environ.get("SMELT_LOGS", "")))

if hasattr(_C, "set_num_threads"):
    _C.set_num_threads(torch.get_num_threads())

from ._api import (  # noqa: E402
    MODES, OPTIONS, CompileArgumentError, CompiledModule, Explanation, cache_info, clear_cache, compile, explain,
    mark_dynamic, mark_static, reset)
from ._flex import create_block_mask, flex_attention  # noqa: E402
from . import _dynamo  # noqa: E402

_dynamo.install()   # torch.compile(backend="smelt")
