"""Two programs that only the driver's own test runs (category
`selfcheck`, never part of the corpus): one aborts the process, one hangs."""
import os
import time

from .base import T, prog


@prog("selfcheck", inputs=(T(2),))
def _crash_now(x):
    os.abort()


@prog("selfcheck", inputs=(T(2),))
def _hang(x):
    time.sleep(600)
