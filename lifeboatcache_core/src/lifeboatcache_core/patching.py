"""Run a hook before an engine method, once per process (the auto-enable plugins' one trick).

Engines load our ``general_plugins`` entry points in every process, sometimes more than once;
wrapping a method a second time would run the hook twice. The wrapper carries a mark so a
repeated call is a no-op. Core imports no engine: callers hand over the class.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any


def run_before(cls: type, method: str, hook: Callable[[Any], object], mark: str) -> bool:
    """Make ``cls.method(self, …)`` call ``hook(self)`` first; False if ``mark`` already wrapped it."""
    original = getattr(cls, method)
    if getattr(original, mark, False):
        return False

    @functools.wraps(original)
    def wrapped(self: Any, *args: Any, **kwargs: Any) -> Any:
        hook(self)
        return original(self, *args, **kwargs)

    setattr(wrapped, mark, True)
    setattr(cls, method, wrapped)
    return True
