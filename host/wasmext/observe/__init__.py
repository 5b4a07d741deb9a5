"""Observability building blocks: Prometheus metrics (`metrics`), JSON log lines
(`logs`) and the in-process event bus (`events`).

May import: `wasmext.errors` and the standard library only; the wiring of the
bus to plugins is a service (`wasmext.services.events`).
"""
