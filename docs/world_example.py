"""Plugins that reach the world: llm.complete and agents.request from Python.

    wasmext build guest-sdks/c/conformance && python docs/world_example.py

The C SDK's conformance plugin has a hook for each minor-1 wrapper; here the
host's model is a Python function and one agent is registered.
"""

from pathlib import Path

from wasmext import Host, HostConfig
from wasmext.services.llm.client import ChatAnswer, ChatRequest
from wasmext.services.llm.service import LlmPolicy, LlmSettings, Price

CONFORMANCE = Path(__file__).resolve().parent.parent / "guest-sdks" / "c" / "conformance"


def house_model(req: ChatRequest) -> ChatAnswer:  # any callable: the application's model
    return ChatAnswer('{"summary": "a short meeting"}', "stop", input_tokens=20,
                      output_tokens=8, model=req.model)


config = HostConfig(llm=LlmSettings(
    model="house-model",
    prices={"house-model": Price(input=0.15, output=0.60)},  # per million tokens
    default=LlmPolicy(max_tokens_per_call=1000, max_tokens_per_day=100_000)))

with Host(config, llm=house_model, plugin_dirs=[]) as host:
    host.agents.register("reviewer", lambda text: {"verdict": "fine", "input": text})
    plugin = host.add(CONFORMANCE, grants={"llm", "agents", "agents:reviewer"})
    completion = plugin.call("llm", "Summarise the meeting").value["value"]
    print(completion["text"], completion["usage"], completion["cost"])
    print(plugin.call("turn", "reviewer").value["value"])  # agents.request from `turn`
    print(host.llm.usage(plugin.id))
