"""Stands in for a package that is absent from a sandbox (tools/grading.py mounts it over the
package's folder): ``lib`` while a question's hidden tests must be answered without the book's
library, and ``torch`` (and the other packages that differentiate) while they must be answered
without automatic differentiation or symbolic and numerical differentiation packages. A module
that is a single file (``scipy.optimize._numdiff``) has this file mounted over its ``.py`` file
and its compiled ``.pyc`` files.

The real package's files are not in the sandbox at all, so nothing a notebook does can reach its
code. Importing works (``import torch``, ``from lib.ssm.diagonal import impulse_response``), so
that a notebook's import cell still runs and defines what follows it; every name is a placeholder
that raises when it is called, and attributes of placeholders are placeholders (``torch.float64``).
"""

import importlib.abc
import importlib.machinery
import sys

_TOP = __name__  # the absent package: "torch", or a subpackage such as "scipy.differentiate"
_MESSAGE = (
    "{name} is absent while this question's hidden tests run: the question asks for an answer "
    "computed without {top}"
)


class _Absent:
    """A name of the absent package: calling it raises."""

    def __init__(self, name):
        object.__setattr__(self, "_absent_name", name)

    def __getattr__(self, attribute):
        if attribute.startswith("__") and attribute.endswith("__"):
            raise AttributeError(attribute)
        return _Absent(f"{self._absent_name}.{attribute}")

    def __call__(self, *args, **kwargs):
        raise RuntimeError(_MESSAGE.format(name=self._absent_name, top=_TOP))

    def __mro_entries__(self, bases):  # class Net(torch.nn.Module): ... still defines Net
        return (object,)

    def __repr__(self):
        return f"<absent {self._absent_name}>"


def _module_getattr(module_name):
    def __getattr__(attribute):
        if attribute.startswith("__") and attribute.endswith("__"):
            raise AttributeError(attribute)
        return _Absent(f"{module_name}.{attribute}")

    return __getattr__


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Every submodule of the absent package is absent too (and importable)."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname.startswith(_TOP + "."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        module.__path__ = []
        module.__getattr__ = _module_getattr(module.__name__)


__path__ = []
__getattr__ = _module_getattr(_TOP)
sys.meta_path.insert(0, _Finder())
