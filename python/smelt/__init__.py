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

# SMELT_LOGS channels; each logs to the `smelt.<channel>` logger.
LOG_CHANNELS = ("graph", "guards", "recompiles", "graph_breaks",
                "output_code", "asm", "cache", "perf", "aot", "dynamic", "backend")


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
