"""Output-extension activations per user, and each turn's saved extension results.

Reference 003 lets each user activate the extensions they want under names of
their own (`json`, `json2`), each with a default param that `#name:param`
overrides. Here an activation belongs to a user id (the session's `user_id`,
set by the application or `wasmext run --user`) and lives in the host's state
store under a scope no plugin can name (`@ext-activations/<user>`: '@' is not
allowed in a plugin id), so hosts that share a Redis store share the users'
activations. A turn's results are kept under `@ext-turns/<session id>` (keyed
by the time and the turn id), so a reloaded session can show them again. Both
live as long as the store's longest TTL after their last read
(`StateLimits.max_ttl_seconds`, 30 days by default).
"""

from __future__ import annotations

import builtins
import functools
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgpack

from wasmext.errors import ActivationError
from wasmext.state import InvalidArgument, Scope, StateStore

__all__ = ["ACTIVATION_SCOPE", "HISTORY_SCOPE", "NAME", "Activation", "Activations"]

ACTIVATION_SCOPE = "@ext-activations/"  # + user id
HISTORY_SCOPE = "@ext-turns/"  # + session id
NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
MAX_PARAM = 64
MAX_CONFIG_BYTES = 16 * 1024


@functools.cache
def _param() -> re.Pattern[str]:
    # Unicode \w is a large character set: compiled by the first activation that names a
    # parameter, not by every process that imports the host (2 ms).
    return re.compile(rf"[\w.\-]{{1,{MAX_PARAM}}}")


@dataclass(frozen=True)
class Activation:
    """One user's `#name` for an extension, with the param used when none is given."""

    name: str
    extension: str
    default_param: str | None = None
    config: dict[str, Any] = field(default_factory=dict)
    active: bool = True
    activated_at: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        """The activation as plain data (what the store keeps and the CLI prints)."""
        return {"name": self.name, "extension": self.extension,
                "default_param": self.default_param, "config": dict(self.config),
                "active": self.active, "activated_at": self.activated_at}


def _from_record(raw: bytes) -> Activation | None:
    try:
        doc = msgpack.unpackb(raw)
        return Activation(str(doc["name"]), str(doc["extension"]), doc.get("default_param"),
                          dict(doc.get("config") or {}), bool(doc.get("active", True)),
                          float(doc.get("activated_at", 0.0)))
    except (ValueError, KeyError, TypeError, msgpack.ExtraData):
        return None  # a damaged record is not an activation


def check_name(what: str, value: object) -> str:
    """An extension or activation name: what `#name` can spell."""
    if not isinstance(value, str) or not NAME.fullmatch(value):
        raise ActivationError(f"{what} must match [a-z0-9][a-z0-9_-]{{0,63}}, got "
                              f"{str(value)[:80]!r}")
    return value


def _check_param(value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not _param().fullmatch(value):
        raise ActivationError(f"default_param must be what `#name:param` can spell "
                              f"(letters, digits, '_', '.', '-', at most {MAX_PARAM}), got "
                              f"{str(value)[:80]!r}")
    return value


class Activations:
    """`host.extensions`: users' activations and the turns' saved results.

    `declared(extension)` answers the registration's declaration of a served
    extension (a dict, `{}` when it declares nothing) or None when no loaded
    plugin serves it.
    """

    def __init__(self, store: Callable[[], StateStore],
                 declared: Callable[[str], dict[str, Any] | None]) -> None:
        self._store = store
        self._declared = declared

    def _scope(self, prefix: str, owner: str) -> Scope:
        try:
            return Scope(prefix + owner)
        except InvalidArgument as err:
            raise ActivationError(f"{prefix.strip('@/')} owner: {err.message}") from None

    def _ttl(self) -> float:
        return self._store().limits.max_ttl_seconds

    def _put(self, user: str, act: Activation) -> Activation:
        packed = msgpack.packb(act.as_dict())
        if len(packed) > MAX_CONFIG_BYTES:
            raise ActivationError(f"activation {act.name!r} is {len(packed)} bytes, over "
                                  f"{MAX_CONFIG_BYTES}")
        self._store().set(self._scope(ACTIVATION_SCOPE, user), act.name, packed,
                          ttl=self._ttl())
        return act

    def get(self, user: str, name: str) -> Activation | None:
        """The user's activation `name` (active or not), or None."""
        raw = self._store().get(self._scope(ACTIVATION_SCOPE, user), name)
        return None if raw is None else _from_record(raw)

    def list(self, user: str, *, include_inactive: bool = False) -> list[Activation]:
        """The user's activations, by name."""
        scope = self._scope(ACTIVATION_SCOPE, user)
        found = [self.get(user, key) for key in self._store().keys(scope)]
        return [a for a in found if a is not None and (a.active or include_inactive)]

    def activate(self, user: str, extension: str, *, name: str | None = None,
                 default_param: str | None = None,
                 config: dict[str, Any] | None = None) -> Activation:
        """Activate `extension` for `user` as `name` (default: `extension`, then
        `extension2`, `extension3`, ...); `#name` then runs it with `default_param`."""
        check_name("extension", extension)
        decl = self._declared(extension)
        if decl is None:
            raise ActivationError(f"no loaded plugin serves the output extension {extension!r}")
        param = _check_param(default_param)
        allowed = decl.get("allowed_params")
        if param is not None and isinstance(allowed, list) and param not in allowed:
            raise ActivationError(f"default_param {param!r} is not allowed for {extension!r} "
                                  f"(allowed: {', '.join(map(str, allowed))})")
        taken = {a.name for a in self.list(user, include_inactive=True)}
        if name is None:
            name = extension
            n = 2
            while name in taken:
                name, n = f"{extension}{n}", n + 1
        elif check_name("activation name", name) in taken:
            existing = self.get(user, name)
            if existing is not None and existing.active:
                raise ActivationError(f"user already has an activation named {name!r}")
        return self._put(user, Activation(check_name("activation name", name), extension,
                                          param, dict(config or {}), True, time.time()))

    def deactivate(self, user: str, name: str) -> Activation:
        """Switch an activation off, keeping its settings (003's soft delete)."""
        act = self._existing(user, name)
        return self._put(user, Activation(act.name, act.extension, act.default_param,
                                          act.config, False, act.activated_at))

    def configure(self, user: str, name: str, *, default_param: str | None) -> Activation:
        """Change an activation's default param."""
        act = self._existing(user, name)
        decl = self._declared(act.extension) or {}
        param = _check_param(default_param)
        allowed = decl.get("allowed_params")
        if param is not None and isinstance(allowed, list) and param not in allowed:
            raise ActivationError(f"default_param {param!r} is not allowed for "
                                  f"{act.extension!r}")
        return self._put(user, Activation(act.name, act.extension, param, act.config,
                                          act.active, act.activated_at))

    def delete(self, user: str, name: str) -> bool:
        """Remove an activation; True if it existed."""
        return self._store().delete(self._scope(ACTIVATION_SCOPE, user), name)

    def _existing(self, user: str, name: str) -> Activation:
        act = self.get(user, check_name("activation name", name))
        if act is None:
            raise ActivationError(f"user has no activation named {name!r}")
        return act

    # -- a turn's results, kept for reloads ----------------------------------------------

    def save_turn(self, session_id: str, turn_id: str, record: dict[str, Any]) -> None:
        """Keep one turn's extension results (raises StateError if the store refuses)."""
        # Keyed by time too: a resumed session may number its turns from 0 again.
        key = f"{time.time_ns():020d}/{turn_id}"[:256]
        self._store().set(self._scope(HISTORY_SCOPE, session_id), key,
                          msgpack.packb(record), ttl=self._ttl())

    def history(self, session_id: str) -> builtins.list[dict[str, Any]]:
        """Every saved turn of the session, oldest first: `{turn_id, query, results,
        events, usage, saved_at}`."""
        scope = self._scope(HISTORY_SCOPE, session_id)
        turns = []
        for key in self._store().keys(scope):
            raw = self._store().get(scope, key)
            if raw is not None:
                try:
                    turns.append(msgpack.unpackb(raw, strict_map_key=False))
                except (ValueError, msgpack.ExtraData):
                    continue
        return sorted(turns, key=lambda t: (t.get("saved_at", 0.0), str(t.get("turn_id"))))
