"""``flux.job`` of the bindings stand-in: only the journal consumer."""

from flux.job.journal import JournalConsumer, JournalEvent

__all__ = ["JournalConsumer", "JournalEvent"]
