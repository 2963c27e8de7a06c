"""PSI/J's test harness interface (``executor_test_params`` of PSI/J's repository,
which its sdist does not ship), written for jobtap: one ``--executors`` entry,
``EXECUTOR[:LAUNCHER[:URL]]``."""

from __future__ import annotations


class ExecutorTestParams:
    def __init__(self, spec: str) -> None:
        parts = spec.split(":", 2)
        self.executor = parts[0]
        self.launcher: str | None = parts[1] if len(parts) > 1 and parts[1] else None
        self.url: str | None = parts[2] if len(parts) > 2 and parts[2] else None
        # attributes PSI/J's harness sets from its site configuration (none here)
        self.custom_attributes: dict[str, object] = {}
        self.account: str | None = None
        self.queue_name: str | None = None
        self.multi_node_queue_name: str | None = None

    def __str__(self) -> str:
        out = self.executor
        if self.launcher is not None or self.url is not None:
            out += ":" + (self.launcher or "")
        if self.url is not None:
            out += ":" + self.url
        return out

    __repr__ = __str__
