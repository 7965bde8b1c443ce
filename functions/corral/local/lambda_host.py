"""Call a handler the way Lambda would: one "container" per function, so one event at a time
per function (Powertools' resolvers keep the current event on a module-level app, which is
not safe across threads), with a context object carrying the fields handlers read.
"""

from __future__ import annotations

import importlib
import io
import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from corral.local.resources import FunctionSpec

log = logging.getLogger(__name__)

Handler = Callable[[Any, Any], Any]
_local = threading.local()


class FunctionOutput(io.TextIOBase):
    """``sys.stdout`` for the stack: what a handler prints (Powertools' JSON logs and EMF
    metrics) goes to a log file, as Lambda sends it to CloudWatch; everything else still
    reaches the terminal."""

    def __init__(self, terminal: Any, log_file: Any) -> None:
        self.terminal = terminal
        self._log = log_file

    def write(self, text: str) -> int:
        target = self._log if getattr(_local, "in_function", False) else self.terminal
        return int(target.write(text))

    def flush(self) -> None:
        self._log.flush()
        self.terminal.flush()

    def isatty(self) -> bool:
        return bool(self.terminal.isatty())

    def fileno(self) -> int:
        return int(self.terminal.fileno())

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return str(getattr(self.terminal, "encoding", "utf-8"))


def _own_loggers_back() -> None:
    """Handlers copy Powertools' JSON config onto every ``corral.*`` logger at import; the
    stack's own loggers go back to plain lines on the root handler."""
    for name in list(logging.root.manager.loggerDict):
        if name.startswith(("corral.local", "corral.cli", "corral.demo")):
            own = logging.getLogger(name)
            # Not propagate: the "corral" parent now carries the Powertools handler.
            own.handlers[:] = list(logging.root.handlers)
            own.propagate = False


@dataclass
class LambdaContext:
    function_name: str
    timeout_s: float
    region: str
    account: str = "123456789012"
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    memory_limit_in_mb: int = 512
    function_version: str = "$LATEST"
    log_group_name: str = ""
    log_stream_name: str = "local"
    _deadline: float = field(default=0.0, repr=False)

    def __post_init__(self) -> None:
        self._deadline = time.monotonic() + self.timeout_s
        self.log_group_name = f"/aws/lambda/{self.function_name}"

    @property
    def invoked_function_arn(self) -> str:
        return f"arn:aws:lambda:{self.region}:{self.account}:function:{self.function_name}"

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.monotonic()) * 1000))


def load_handler(dotted: str) -> Handler:
    module_name, _, attr = dotted.rpartition(".")
    handler = getattr(importlib.import_module(module_name), attr)
    if not callable(handler):
        raise TypeError(f"{dotted} is not callable")
    return handler  # type: ignore[no-any-return]


class FunctionHost:
    """Handlers are imported on first use, like a cold start, after the stack has set the
    environment the template gives them."""

    def __init__(self, region: str, loader: Callable[[str], Handler] = load_handler) -> None:
        self._region = region
        self._loader = loader
        self._handlers: dict[str, Handler] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    def _get(self, spec: FunctionSpec) -> tuple[Handler, threading.Lock]:
        with self._guard:
            lock = self._locks.setdefault(spec.logical_id, threading.Lock())
            handler = self._handlers.get(spec.logical_id)
        if handler is None:
            handler = self._loader(spec.handler)
            _own_loggers_back()
            with self._guard:
                self._handlers[spec.logical_id] = handler
        return handler, lock

    def invoke(self, spec: FunctionSpec, event: Any) -> Any:
        """The handler's result; its exceptions propagate (callers decide what a failed
        invocation means: a retried batch, a 502 ...)."""
        handler, lock = self._get(spec)
        with lock:
            context = LambdaContext(spec.logical_id, spec.timeout_s, self._region)
            started = time.monotonic()
            _local.in_function = True
            try:
                return handler(event, context)
            finally:
                _local.in_function = False
                took = time.monotonic() - started
                if took > spec.timeout_s:
                    # Lambda would have killed it; locally we only say so.
                    log.warning(
                        "%s ran %.1f s, over its %.0f s timeout",
                        spec.logical_id,
                        took,
                        spec.timeout_s,
                    )
