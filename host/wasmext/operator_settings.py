"""Plugin settings the operator set with `wasmext config set`, and how settings are shown.

The values live in `<data_dir>/settings.json`, not in wasmext.toml: the config file
is the operator's own text (comments, layout), and no TOML writer keeps that intact.
A value set here is layered over the config's `[plugin.ID] settings` (the command
was the operator's last word; `wasmext config unset` goes back to the config's).
Every value is checked against the setting's declared type before it is written;
the file is written atomically under a lock (another process may be writing too),
mode 0600 because a sensitive setting's value may be in it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from wasmext.errors import ConfigError, UnsafeFile
from wasmext.files import atomic_write, locked, read_regular
from wasmext.manifest import Manifest
from wasmext.text import clean

__all__ = ["MASK", "SettingsFile", "declared_settings", "settings_view"]

MASK = "********"  # a sensitive value, wherever settings are shown
MAX_SETTINGS_BYTES = 1 << 20


class SettingsFile:
    """The operator's setting values by plugin id, in `<data_dir>/settings.json`."""

    def __init__(self, data_dir: Path) -> None:
        self.path = Path(data_dir) / "settings.json"

    def read(self) -> dict[str, dict[str, Any]]:
        """Every plugin's values; an absent file is none, an unusable one a ConfigError."""
        try:
            raw = json.loads(read_regular(self.path, MAX_SETTINGS_BYTES))
        except FileNotFoundError:
            return {}
        except UnsafeFile as exc:
            raise ConfigError(f"{self.path}: cannot read: {exc.strerror}") from exc
        except (OSError, ValueError, RecursionError) as exc:
            # Silently dropping the operator's values would load plugins with others.
            raise ConfigError(f"{self.path}: not a settings file: "
                              f"{clean(str(exc), 200)}") from None
        plugins = raw.get("plugins") if isinstance(raw, dict) else None
        if not isinstance(plugins, dict) or not all(isinstance(v, dict)
                                                    for v in plugins.values()):
            raise ConfigError(f"{self.path}: not a settings file (no 'plugins' table)")
        return plugins

    def of(self, plugin_id: str) -> dict[str, Any]:
        """The values the operator set for one plugin."""
        if not self.path.exists():
            return {}
        return dict(self.read().get(plugin_id, {}))

    def set(self, manifest: Manifest, key: str, value: Any) -> None:
        """Check `value` against `manifest`'s setting `key` and record it (ConfigError
        naming the plugin and the field when it is not a declared setting or not of
        its type)."""
        check_value(manifest, key, value)
        self._change(manifest.id, lambda values: values.__setitem__(key, value))

    def unset(self, plugin_id: str, key: str) -> bool:
        """Forget one value; True if there was one."""
        found: list[bool] = []
        self._change(plugin_id, lambda values: found.append(values.pop(key, None)
                                                            is not None))
        return bool(found and found[0])

    def _change(self, plugin_id: str, edit: Any) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with locked(self.path.with_name(self.path.name + ".lock")):
            plugins = self.read()  # again, under the lock: another writer's change stays
            values = dict(plugins.get(plugin_id, {}))
            edit(values)
            if values:
                plugins[plugin_id] = values
            else:
                plugins.pop(plugin_id, None)
            atomic_write(self.path, json.dumps({"plugins": plugins}, indent=1,
                                               sort_keys=True), mode=0o600)


def check_value(manifest: Manifest, key: str, value: Any) -> None:
    """ConfigError unless `value` may be `manifest`'s setting `key`."""
    setting = next((s for s in manifest.settings if s.name == key), None)
    field = f"plugin.{manifest.id}.settings.{clean(key, 64)}"
    if setting is None:
        names = ", ".join(s.name for s in manifest.settings) or "none"
        raise ConfigError(f"plugin {manifest.id}: unknown setting {clean(key, 64)!r}; "
                          f"declared: {names}", plugin_id=manifest.id,
                          problems=((field, "is not a declared setting"),))
    problem = setting.problem(value)
    if problem is not None:
        shown = "a value of another type" if setting.sensitive else clean(repr(value), 64)
        raise ConfigError(f"plugin {manifest.id}: setting {key!r} {problem}, not {shown}",
                          plugin_id=manifest.id, problems=((field, problem),))


def declared_settings(manifest: Manifest) -> list[dict[str, Any]]:
    """What a manifest declares, each sensitive default masked (`wasmext inspect`)."""
    return [{"name": s.name, "type": s.type, "sensitive": s.sensitive,
             "required": s.required, "env": s.env, "description": s.description,
             "default": MASK if s.sensitive and s.default is not None else s.default}
            for s in manifest.settings]


def settings_view(manifest: Manifest | None, values: Mapping[str, Any],
                  sensitive: frozenset[str], config: Mapping[str, Any],
                  operator: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A loaded plugin's settings as the operator sees them (`wasmext list --settings`):
    each value (sensitive ones masked) and where it came from: `set` (wasmext config
    set), `config` ([plugin.ID] settings), `env`, `default`, or `unset`."""
    rows = []
    declared = {s.name: s for s in manifest.settings} if manifest is not None else {}
    for name in [*declared, *(k for k in values if k not in declared)]:
        s = declared.get(name)
        if name in operator:
            source = "set"
        elif name in config:
            source = "config"
        elif name not in values:
            source = "unset"
        elif s is not None and s.env and values[name] != s.default:
            source = "env"
        else:
            source = "default"
        value = values.get(name)
        if name in sensitive and value is not None:
            value = MASK
        rows.append({"name": name, "type": s.type if s else None, "value": value,
                     "source": source, "sensitive": name in sensitive})
    return rows
