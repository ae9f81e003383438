"""The switch: ``import flashinfer`` (and ``flashinfer.decode``, ``flashinfer.utils``, ...) loads
ignis' FlashInfer namespace (``ignis/_flashinfer``) when FlashInfer itself is not installed, so
vLLM's and SGLang's FlashInfer attention backends and samplers run on ignis without an edit.

Opt-in and reversible:
- ``IGNIS_AS_FLASHINFER=1`` in the environment: the wheel's ``ignis_as_flashinfer.pth`` (run by
  Python's ``site`` at start-up) calls :func:`install` in every interpreter, engine workers
  included. Without the variable (or with any other value) the .pth does nothing, not even
  import ignis.
- In a running interpreter: :func:`install` and :func:`uninstall`.

It never shadows a real FlashInfer: :func:`install` does nothing when one is findable, and the
finder it adds answers ``flashinfer`` only after every other finder on ``sys.meta_path`` (the path
finder, editable installs, ...) found none, asked afresh at each lookup. Only the top-level name is
answered: the package's ``__path__`` is the ``_flashinfer`` directory, so its submodules are found
there by Python's own path finder, and a FlashInfer module ignis lacks is not found at all
(``importlib.util.find_spec("flashinfer.fused_moe")`` is None). Nothing forges distribution
metadata, so ``importlib.metadata.version("flashinfer-python")`` still raises.
"""

import importlib.abc
import importlib.util
import os
import sys
import warnings

ENV_VAR = "IGNIS_AS_FLASHINFER"
_PACKAGE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_flashinfer")

__all__ = ["ENV_VAR", "install", "uninstall", "installed"]


class _FlashInferFinder(importlib.abc.MetaPathFinder):
    """Answers the top-level name ``flashinfer`` with ignis' namespace when no other finder can."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "flashinfer" or _real_flashinfer_findable(self):
            return None
        return importlib.util.spec_from_file_location(
            "flashinfer", os.path.join(_PACKAGE_DIR, "__init__.py"), submodule_search_locations=[_PACKAGE_DIR])


_FINDER = _FlashInferFinder()


def _real_flashinfer_findable(skip=None):
    """Whether a finder other than `skip` finds a package ``flashinfer`` (a directory named so
    without ``__init__.py``, which would only make a namespace package, does not count)."""
    for finder in sys.meta_path:
        find_spec = getattr(finder, "find_spec", None)
        if finder is skip or find_spec is None:
            continue
        spec = find_spec("flashinfer", None)
        if spec is not None and spec.origin is not None:
            return True
    return False


def _is_ours(module):
    return os.path.abspath(getattr(module, "__file__", None) or os.sep).startswith(_PACKAGE_DIR + os.sep)


def installed():
    """Whether the switch's finder is on ``sys.meta_path``."""
    return _FINDER in sys.meta_path


def install():
    """Make ``import flashinfer`` load ignis' FlashInfer namespace. Returns True when the switch is
    on, False when a real FlashInfer is imported or findable (then nothing changes)."""
    if installed():
        return True
    module = sys.modules.get("flashinfer")
    if (module is not None and not _is_ours(module)) or _real_flashinfer_findable():
        return False
    sys.meta_path.insert(0, _FINDER)
    return True


def uninstall():
    """Turn the switch off: remove the finder and forget the ``flashinfer`` modules it loaded, so a
    later ``import flashinfer`` finds a real FlashInfer or fails. Objects already taken from them
    keep working. Returns whether the switch was on."""
    was_on = installed()
    while _FINDER in sys.meta_path:
        sys.meta_path.remove(_FINDER)
    for name in [name for name in sys.modules if name == "flashinfer" or name.startswith("flashinfer.")]:
        if _is_ours(sys.modules[name]):
            del sys.modules[name]
    return was_on


def _startup():
    """The .pth's call (it runs only with IGNIS_AS_FLASHINFER=1): install, or say why not."""
    if not install():
        warnings.warn("%s=1 is ignored: a FlashInfer installation was found, and ignis never shadows it" % ENV_VAR,
                      RuntimeWarning, stacklevel=2)
