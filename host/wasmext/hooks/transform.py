"""Transform callbacks: each plugin's output is the next one's input.

A failed plugin is skipped and the previous value kept (its failure policy
decides whether the whole operation aborts instead); any plugin may stop the
chain; the original input is kept for debugging, and each plugin's `meta`
annotations are collected under its id.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from wasmext.hooks.context import HookSession

__all__ = ["TransformResult", "run_transform"]


@dataclass
class TransformResult:
    """A transform chain's value, the original and which plugins changed or stopped it."""

    value: Any
    original: Any
    changed_by: list[str] = field(default_factory=list)
    stopped_by: str | None = None
    failed: list[str] = field(default_factory=list)
    meta: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def changed(self) -> bool:
        """True if any plugin changed the value."""
        return bool(self.changed_by)


def _valid(hook: str, value: Any) -> bool:
    if hook == "on_input_messages":
        return isinstance(value, list) and all(isinstance(m, dict) for m in value)
    return isinstance(value, str)


def run_transform(session: HookSession, hook: str, value: Any) -> TransformResult:
    """Pass the value through the hook's plugins in order."""
    host = session.host
    result = TransformResult(value, value)
    for entry in host.ordered(hook):
        answer = host.call(entry, result.value, session)
        if answer is None:
            if entry.plugin_id in host.plugins:
                result.failed.append(entry.plugin_id)
            continue
        if answer.meta:
            result.meta[entry.plugin_id] = dict(answer.meta)
        if answer.changed:
            if not _valid(hook, answer.value):
                # A wrong type would break every later plugin and the app: skip it.
                session.trace.note(hook, "failed", "value of the wrong type; kept the input",
                                   entry.plugin_id)
                result.failed.append(entry.plugin_id)
                continue
            result.value = answer.value
            result.changed_by.append(entry.plugin_id)
        if answer.stop:
            result.stopped_by = entry.plugin_id
            break
    return result
