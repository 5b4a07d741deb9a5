"""The `llm.complete` op: the host application's model, under budgets and a price table.

The model is a `Completer` (any callable taking a `ChatRequest` and returning a
`ChatAnswer`): a Python function given to the Host, or an OpenAI-compatible
endpoint from the `[llm]` config (`services.llm.client`). Per plugin
(`LlmPolicy`): the models it may name (default: the host's model only), token
budgets per call, per session and per day, how many completions it may have
in flight, and `timeout_ms`. Budgets are reserved before the request is sent
(`estimate_tokens`: an upper bound of the prompt, every byte a token but lowercase
ASCII words, plus `max_tokens`; a request without `max_tokens`
reserves the whole per-call budget and asks the model for no more than what
is left of it after the prompt), so concurrent calls cannot overrun them
together. The model's reported usage replaces the reservation only when it is
plausible (`charged`): usage that is missing, negative or not an int, or
fewer tokens than the prompt and the answer need at `MAX_BYTES_PER_TOKEN`,
is charged the whole reservation, so a model server cannot refund a budget
by under-reporting. The per-day count is kept by a `DayLedger` (the Host's
state store), so it outlives the process.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from wasmext.sandbox.hostcalls import CallContext, HostServices, OpError
from wasmext.services.llm.client import ChatAnswer, ChatRequest, ModelError

if TYPE_CHECKING:  # the ledger brings the state stores; a host without [llm] never needs it
    from wasmext.observe.metrics import Metrics
    from wasmext.services.llm.ledger import DayLedger

__all__ = ["Completer", "LlmPolicy", "LlmService", "LlmSettings", "Price"]

Completer = Callable[[ChatRequest], ChatAnswer]
ROLES = frozenset({"system", "user", "assistant", "tool"})
MAX_SESSIONS_TRACKED = 10_000
# No tokenizer in use spends fewer tokens than one per 8 bytes of text over a whole
# prompt or answer (English averages about 4); usage below that was not counted honestly.
MAX_BYTES_PER_TOKEN = 8
# The other side, for the reservation (`estimate_tokens`): no tokenizer spends more than
# a token per byte; a lowercase ASCII word is taken at this many letters a token
# (English averages about 4 characters a token), each at least one.
LETTERS_PER_TOKEN = 4
TOKENS_PER_MESSAGE = 4  # the role and the chat template's framing of one message
_WORD = re.compile(r" ?[A-Z]?[a-z]+")


@dataclass(frozen=True)
class LlmPolicy:
    """A plugin's LLM budget: allowed models, token caps, concurrency and timeout."""

    models: tuple[str, ...] = ()          # allowed models; empty: the host's model only
    max_tokens_per_call: int = 2048
    max_tokens_per_session: int = 20_000
    max_tokens_per_day: int = 200_000
    max_in_flight: int = 4
    timeout_ms: int = 30_000              # llm_timeout_ms; the call's deadline still applies


@dataclass(frozen=True)
class Price:
    """Currency units per million tokens."""

    input: float = 0.0
    output: float = 0.0


@dataclass(frozen=True)
class LlmSettings:
    """The `[llm]` config: the endpoint, the default model, prices, per-plugin policies."""

    url: str | None = None
    model: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    prices: Mapping[str, Price] = field(default_factory=dict)
    default: LlmPolicy = field(default_factory=LlmPolicy)
    plugins: Mapping[str, LlmPolicy] = field(default_factory=dict)

    def policy(self, plugin_id: str) -> LlmPolicy:
        """The plugin's policy, or the default."""
        return self.plugins.get(plugin_id, self.default)


def estimate_tokens(messages: list[dict[str, str]]) -> int:
    """The prompt's tokens at most: what the reservation holds before the model is asked.

    A tokenizer spends at most one token per UTF-8 byte (byte-level BPE, or byte
    fallback), so every byte counts one token, but a lowercase ASCII word (capitalised
    or not, with the space before it) counts one token per `LETTERS_PER_TOKEN` letters:
    prose stays near its real count, and text in any other script, digits, punctuation,
    capitals or symbols (CJK is one token a character or more, three bytes) cannot make
    the estimate fall below what the prompt costs. Plus `TOKENS_PER_MESSAGE` for each
    message's framing. The discount's price: a made-up lowercase word a tokenizer
    splits a letter a token costs up to LETTERS_PER_TOKEN times its estimate.
    """
    total = 0
    for m in messages:
        text = m["content"]
        tokens = len(text.encode())
        for word in _WORD.findall(text):  # its bytes were counted: count its letters instead
            letters = len(word) - (word[0] == " ")
            tokens += -(-letters // LETTERS_PER_TOKEN) - len(word)
        total += tokens + TOKENS_PER_MESSAGE
    return total


def charged(answer: ChatAnswer, messages: list[dict[str, str]], max_tokens: int,
            reserved: int) -> int:
    """The tokens a call is charged: the reported usage when plausible, else `reserved`.

    Usage above the reservation is charged as reported (over, never under); usage the
    answer's own bytes contradict, or none at all, is charged the reservation.
    """
    if not answer.usage_reported or answer.input_tokens < 0 or answer.output_tokens < 0:
        return reserved
    prompt_bytes = sum(len(m["content"].encode()) for m in messages)
    answer_bytes = len(answer.text.encode()) + sum(
        len(repr(c).encode()) for c in answer.tool_calls)
    if answer.input_tokens < -(-prompt_bytes // MAX_BYTES_PER_TOKEN) or \
            answer.output_tokens < -(-answer_bytes // MAX_BYTES_PER_TOKEN):
        return reserved
    if answer.output_tokens > max_tokens:  # more than was asked for: not to be trusted
        return max(reserved, answer.input_tokens + answer.output_tokens)
    return answer.input_tokens + answer.output_tokens


def _response_format(req: dict[str, Any]) -> dict[str, Any] | None:
    """The model's `response_format` from the op's `json_mode` flag or `response_format`."""
    json_mode, wanted = req.get("json_mode", False), req.get("response_format")
    if type(json_mode) is not bool:
        raise OpError("invalid", "'json_mode' must be true or false")
    if wanted is None:
        return {"type": "json_object"} if json_mode else None
    # Only the two kinds with no guest-sized schema: a schema would be host work on
    # plugin data that no budget here bounds.
    if not isinstance(wanted, dict) or set(wanted) != {"type"} \
            or wanted["type"] not in ("json_object", "text"):
        raise OpError("invalid", "'response_format' must be {\"type\": \"json_object\"} "
                      "or {\"type\": \"text\"}")
    if json_mode and wanted["type"] != "json_object":
        raise OpError("invalid", "'json_mode' contradicts 'response_format'")
    return {"type": wanted["type"]}


def _messages(raw: Any) -> list[dict[str, str]]:
    if not isinstance(raw, list) or not raw or len(raw) > 256:
        raise OpError("invalid", "'messages' must be a non-empty array of at most 256 maps")
    out = []
    for m in raw:
        if not isinstance(m, dict) or m.get("role") not in ROLES or \
                not isinstance(m.get("content"), str):
            raise OpError("invalid", "each message needs a role (system, user, assistant, "
                          "tool) and a string content")
        out.append({"role": m["role"], "content": m["content"]})
    return out


class _Usage:
    """Tokens reserved and spent, per plugin per session and per plugin per day."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.session: OrderedDict[tuple[str, str], int] = OrderedDict()
        self.in_flight: dict[str, int] = {}
        self.cost: dict[str, float] = {}
        self.tokens: dict[str, dict[str, int]] = {}


_day: tuple[int, str] = (-1, "")  # the last UTC day asked for: its number and its name


def _utc_day() -> str:
    """Today's UTC date, YYYY-MM-DD (formatted once a day, not on every call)."""
    global _day
    number = int(time.time() // 86400)
    known = _day
    if known[0] != number:
        known = _day = (number, time.strftime("%Y-%m-%d", time.gmtime(number * 86400)))
    return known[1]


class LlmService:
    """llm.complete for one Host."""

    def __init__(self, metrics: Metrics, settings: LlmSettings | None = None,
                 completer: Completer | None = None,
                 ledger: DayLedger | None = None) -> None:
        self.settings = settings or LlmSettings()
        self.completer = completer
        self.metrics = metrics
        self._usage = _Usage()
        # Per-day counts outlive the process (the Host keeps them in its state store).
        if ledger is None:
            from wasmext.services.llm.ledger import DayLedger

            ledger = DayLedger()
        self.ledger = ledger

    @property
    def model(self) -> str | None:
        """The host's model, or None."""
        return self.settings.model

    def use(self, completer: Completer | None, model: str | None = None) -> None:
        """Set the host's model (a callable) and, optionally, its name."""
        self.completer = completer
        if model is not None:
            self.settings = dataclasses.replace(self.settings, model=model)

    def install(self, services: HostServices) -> None:
        """Register the llm.complete host call."""
        services.register("llm.complete", self.complete)

    def usage(self, plugin_id: str) -> dict[str, Any]:
        """Tokens and cost so far (for `wasmext stats` and output-extension results)."""
        with self._usage.lock:
            tokens = dict(self._usage.tokens.get(plugin_id, {}))
            return {"tokens": tokens, "cost": self._usage.cost.get(plugin_id, 0.0)}

    def cost_of(self, model: str, input_tokens: int, output_tokens: int) -> float:
        """The price in the configured currency of the tokens on the model (0 if unpriced)."""
        price = self.settings.prices.get(model)
        if price is None:
            return 0.0
        return (input_tokens * price.input + output_tokens * price.output) / 1_000_000

    # -- the op ----------------------------------------------------------------------

    def complete(self, ctx: CallContext, req: dict[str, Any]) -> dict[str, Any]:
        """Host call llm.complete: a chat completion within the plugin's policy and budgets."""
        policy = self.settings.policy(ctx.plugin_id)
        messages = _messages(req.get("messages"))
        model = req.get("model", self.settings.model)
        allowed = policy.models or ((self.settings.model,) if self.settings.model else ())
        if not isinstance(model, str) or model not in allowed:
            raise OpError("denied", f"model {str(model)[:64]!r} is not allowed for plugin "
                          f"{ctx.plugin_id} (allowed: {', '.join(allowed) or 'none'})")
        estimate = estimate_tokens(messages)
        # Without max_tokens the call reserves the whole per-call budget, and the model
        # is asked for no more than the prompt leaves of it.
        max_tokens = req.get("max_tokens", max(1, policy.max_tokens_per_call - estimate))
        temperature = req.get("temperature")
        if type(max_tokens) is not int or max_tokens < 1:
            raise OpError("invalid", "'max_tokens' must be a positive int")
        if temperature is not None and (not isinstance(temperature, (int, float)) or
                                        isinstance(temperature, bool) or
                                        not 0 <= temperature <= 2):
            raise OpError("invalid", "'temperature' must be a number from 0 to 2")
        response_format = _response_format(req)
        started = time.perf_counter()
        try:
            answer, cost = self.charged_completion(
                ctx, ChatRequest(messages, model, max_tokens,
                                 None if temperature is None else float(temperature),
                                 response_format=response_format), estimate)
        finally:
            ctx.waited_seconds += time.perf_counter() - started  # the model's time, not ours
        return {"text": answer.text, "finish_reason": answer.finish_reason,
                "model": answer.model or model,
                "usage": {"input": answer.input_tokens, "output": answer.output_tokens},
                "cost": cost}

    def charged_completion(self, ctx: CallContext, request: ChatRequest,
                           estimate: int | None = None, *,
                           timeout_s: float | None = None) -> tuple[ChatAnswer, float]:
        """Ask the model for `request` on `ctx.plugin_id`'s account: its per-call,
        session, day and in-flight budgets reserved first and settled with what the
        model reported; the answer and its cost. The wait is bounded by the plugin's
        `timeout_ms` and `ctx`'s deadline, or (an agent run's) by `timeout_s`. Used by
        llm.complete and by model agents, whose tokens are the asking plugin's."""
        if self.completer is None:
            raise OpError("unavailable", "the host has no model configured")
        policy = self.settings.policy(ctx.plugin_id)
        messages = cast("list[dict[str, str]]", request.messages)
        max_tokens = request.max_tokens
        if max_tokens is None:  # the reservation needs the answer's bound
            raise OpError("invalid", "a charged completion names its max_tokens")
        reserved = (estimate_tokens(messages) if estimate is None else estimate) + max_tokens
        keys = self._reserve(ctx, policy, reserved)
        spent = reserved
        try:
            limit = self._time_left(ctx, policy) if timeout_s is None else \
                min(timeout_s, policy.timeout_ms / 1000)
            if limit <= 0:
                raise ModelError("the time was up before the model was asked",
                                 timed_out=True)
            answer = self.completer(dataclasses.replace(request, timeout_s=limit))
            # An absurd count spends the day and no more (the ledger keeps a bounded int).
            spent = min(charged(answer, messages, max_tokens, reserved),
                        max(reserved, policy.max_tokens_per_day))
        except ModelError as exc:
            code = "timeout" if exc.timed_out else "unavailable"
            raise OpError(code, f"llm.complete: {exc.message}") from None
        finally:
            self._settle(ctx.plugin_id, keys, reserved, spent)
        cost = self.cost_of(request.model, answer.input_tokens, answer.output_tokens)
        self._record(ctx.plugin_id, answer, cost)
        return answer, cost

    def _time_left(self, ctx: CallContext, policy: LlmPolicy) -> float:
        limit = policy.timeout_ms / 1000
        if ctx.deadline:
            limit = min(limit, ctx.deadline - time.monotonic() - 0.02)
        if limit <= 0:
            raise ModelError("the call's deadline passed before the model was asked",
                             timed_out=True)
        return limit

    def _reserve(self, ctx: CallContext, policy: LlmPolicy,
                 tokens: int) -> tuple[tuple[str, str], tuple[str, str]]:
        pid = ctx.plugin_id
        if tokens > policy.max_tokens_per_call:
            raise OpError("limit", f"plugin {pid}: {tokens} tokens (prompt estimate + "
                          f"max_tokens) is over the per-call budget {policy.max_tokens_per_call}")
        session = (pid, ctx.session or "")
        day = (pid, _utc_day())
        u = self._usage
        with u.lock:
            if u.in_flight.get(pid, 0) >= policy.max_in_flight:
                raise OpError("limit", f"plugin {pid}: {policy.max_in_flight} completions "
                              "already in flight")
            used_session = u.session.get(session, 0)
            if used_session + tokens > policy.max_tokens_per_session:
                raise OpError("limit", f"plugin {pid}: the session's token budget "
                              f"{policy.max_tokens_per_session} is spent ({used_session} used)")
            self.ledger.reserve(pid, day[1], tokens, policy.max_tokens_per_day)
            u.session[session] = used_session + tokens
            u.session.move_to_end(session)
            while len(u.session) > MAX_SESSIONS_TRACKED:
                u.session.popitem(last=False)
            u.in_flight[pid] = u.in_flight.get(pid, 0) + 1
        return session, day

    def _settle(self, pid: str, keys: tuple[tuple[str, str], tuple[str, str]],
                reserved: int, spent: int) -> None:
        """Replace the reservation by what the model reported (a failed call keeps it)."""
        u = self._usage
        with u.lock:
            u.in_flight[pid] = max(0, u.in_flight.get(pid, 0) - 1)
            if keys[0] in u.session:
                u.session[keys[0]] = max(0, u.session[keys[0]] - reserved + spent)
        # If the ledger cannot be reached, the reservation stays counted: over, never under.
        with contextlib.suppress(OpError):
            self.ledger.adjust(pid, keys[1][1], spent - reserved)

    def _record(self, pid: str, answer: ChatAnswer, cost: float) -> None:
        u = self._usage
        with u.lock:
            tokens = u.tokens.setdefault(pid, {"input": 0, "output": 0})
            tokens["input"] += answer.input_tokens
            tokens["output"] += answer.output_tokens
            u.cost[pid] = u.cost.get(pid, 0.0) + cost
        self.metrics.record_llm(pid, answer.input_tokens, answer.output_tokens, cost)
