"""A package's public face (its __init__) re-exports its submodules' names.
Assigning one of them on the face (`copyjob.PARALLEL_MIN_FILES = 0`, or monkeypatching
`gc.wal_truncatable`) would change only the face's copy and silently do nothing for the
code that uses it, so a sealed face refuses the assignment, naming the submodule that
defines the name: set it there."""

from __future__ import annotations

import importlib
import sys
import types


class _Face(types.ModuleType):
    def __setattr__(self, name: str, value) -> None:
        if not isinstance(value, types.ModuleType):   # (the import system binds submodules here)
            homes = [m for m, mod in sorted(sys.modules.items())
                     if m.startswith(self.__name__ + ".") and mod is not None and name in vars(mod)]
            if homes:
                raise AttributeError(f"{self.__name__}.{name} is a re-export and not settable: set it on the "
                                     f"module that defines it ({homes[0]}.{name})")
        super().__setattr__(name, value)

    def __reduce__(self):   # pickled by name, like any module (cloudpickle: Spark closures)
        return importlib.import_module, (self.__name__,)


def seal(module_name: str) -> None:
    """Call last in a package __init__: `seal(__name__)`."""
    sys.modules[module_name].__class__ = _Face
