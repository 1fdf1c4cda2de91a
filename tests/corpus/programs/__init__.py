"""Every category module of the corpus; importing this package registers
all programs in base.PROGRAMS (module order, then declaration order)."""
import importlib
import pkgutil

for _m in sorted(m.name for m in pkgutil.iter_modules(__path__)):
    importlib.import_module(f"{__name__}.{_m}")
