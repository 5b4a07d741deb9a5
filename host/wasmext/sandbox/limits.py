"""Per-plugin sandbox limits, with the ABI defaults and host-policy caps."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from wasmext._abi import DEFAULT_LIMITS

WASM_PAGE = 65536


@dataclass(frozen=True)
class Limits:
    """What one plugin instance may use. Every field is a positive int.

    `max_wasm_stack_bytes` is engine-wide in wasmtime: a plugin may ask for
    less, but every plugin of one engine runs with the engine's setting.
    """

    fuel_per_call: int = DEFAULT_LIMITS["fuel_per_call"]
    memory_bytes: int = DEFAULT_LIMITS["memory_bytes"]
    table_elements: int = DEFAULT_LIMITS["table_elements"]
    timeout_ms: int = DEFAULT_LIMITS["timeout_ms"]
    max_input_bytes: int = DEFAULT_LIMITS["max_input_bytes"]
    max_output_bytes: int = DEFAULT_LIMITS["max_output_bytes"]
    max_host_calls: int = DEFAULT_LIMITS["max_host_calls"]
    host_call_timeout_ms: int = DEFAULT_LIMITS["host_call_timeout_ms"]
    max_host_request_bytes: int = DEFAULT_LIMITS["max_host_request_bytes"]
    max_msgpack_depth: int = DEFAULT_LIMITS["max_msgpack_depth"]
    max_wasm_stack_bytes: int = DEFAULT_LIMITS["max_wasm_stack_bytes"]
    max_log_line_bytes: int = DEFAULT_LIMITS["max_log_line_bytes"]
    max_log_lines: int = DEFAULT_LIMITS["max_log_lines"]

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if type(value) is not int or value <= 0:
                raise ValueError(f"limit {f.name} must be a positive int, got {value!r}")
        if self.memory_bytes < WASM_PAGE:
            raise ValueError(f"limit memory_bytes must be at least one page ({WASM_PAGE})")
        if self.max_output_bytes >= 2**32 or self.max_input_bytes >= 2**32:
            raise ValueError("size caps must fit a wasm32 length")

    def replace(self, **changes: Any) -> Limits:
        """A copy with `changes`; an unknown name is a TypeError naming it."""
        known = {f.name for f in dataclasses.fields(self)}
        unknown = sorted(set(changes) - known)
        if unknown:
            raise TypeError(f"unknown limit {unknown[0]!r}; known: {', '.join(sorted(known))}")
        return dataclasses.replace(self, **changes)

    def capped_by(self, policy: Limits) -> Limits:
        """Each field no larger than the host policy's."""
        capped = {name: min(getattr(self, name), getattr(policy, name)) for name in _NAMES}
        # Limits is frozen: when nothing is over the policy, this one is the answer.
        return self if capped == self.as_dict() else Limits(**capped)

    def as_dict(self) -> dict[str, int]:
        """The limits as a dict of field name to value."""
        # Every field is an int: a flat copy is what dataclasses.asdict would build.
        return {name: getattr(self, name) for name in _NAMES}


_NAMES = tuple(f.name for f in dataclasses.fields(Limits))


def effective_limits(defaults: Limits, requested: Mapping[str, int] | None = None,
                     granted: Mapping[str, int] | Limits | None = None,
                     policy: Limits | None = None) -> Limits:
    """The one rule for a plugin's limits; every loading path goes through it.

    The host's base is `defaults` with `granted` (what the host decided for this
    plugin: its per-plugin config, the embedder's `limits=`, command-line flags)
    replacing fields; a `Limits` replaces all of them. What the plugin requests
    for itself (its manifest's `[limits]`) may only lower that base, field by
    field. Everything is then capped by the host's `policy`.
    """
    if isinstance(granted, Limits):
        base = granted
    else:
        base = defaults.replace(**granted) if granted else defaults
    if requested:
        own = base.replace(**requested)  # validates names and values
        base = Limits(**{f.name: min(getattr(own, f.name), getattr(base, f.name))
                         for f in dataclasses.fields(base)})
    return base.capped_by(policy) if policy is not None else base
