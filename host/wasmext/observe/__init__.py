"""Observability building blocks: Prometheus metrics (`metrics`), JSON log lines
(`logs`), the in-process event bus (`events`) and OpenTelemetry tracing (`tracing`).

May import: the leaves (`wasmext.errors`, `text`, `validation`, ...) and the standard
library only; the wiring of the bus to plugins is a service (`wasmext.services.events`).
"""
