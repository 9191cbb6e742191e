"""Import SGLang's HiCache modules on a CPU-only box without triton or torchvision.

SGLang 0.5.23 imports ``triton`` unconditionally and, through its model configs,
``torchvision``; neither is usable (nor installable without a CUDA torch) here. The modules
we test (``hicache_storage``, ``storage.backend_factory``, ``pool_host``) never *call* them on
CPU, so permissive stand-ins are served for those two names only, by a meta-path finder that
lives in this test process and nowhere else. torch's own triton probe runs first, so torch
keeps seeing "no triton".
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types
from typing import Any

STUBBED = ("triton", "torchvision")


class _StubMeta(type):
    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _stub_class(name)

    def __getitem__(cls, item: Any) -> Any:
        return cls


class _Stub(metaclass=_StubMeta):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and callable(args[0]) and not kwargs:
            return args[0]  # used as a decorator
        return self


def _stub_class(name: str) -> type:
    return _StubMeta(name, (_Stub,), {})


class _StubModule(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _stub_class(name)


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname.split(".")[0] in STUBBED:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec: Any) -> types.ModuleType:
        module = _StubModule(spec.name)
        module.__path__ = []
        module.__version__ = "0.0.0+lifeboatcache-test-stub"
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        if module.__name__ == "triton":
            module.jit = lambda fn=None, **kw: fn if fn is not None else (lambda f: f)  # type: ignore[attr-defined]


def install() -> None:
    """Make SGLang's HiCache modules importable (idempotent)."""
    if any(isinstance(f, _StubFinder) for f in sys.meta_path):
        return
    import torch._dynamo  # noqa: F401  (torch probes for triton here, before the stand-in exists)
    import torch.utils._triton as torch_triton

    torch_triton.has_triton_package()
    sys.meta_path.insert(0, _StubFinder())
