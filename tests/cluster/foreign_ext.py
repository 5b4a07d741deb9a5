"""A foreign extension: nats-py only, no wasmext, speaking the CP-Ext contract.

    python foreign_ext.py nats://127.0.0.1:4222 PREFIX

Serves (all JSON, queue group "foreign"):
  PREFIX.ext.pre.shout.v1        upper-cases the payload; metadata gets the call's
                                 config, tenant and the Trace-Id header it saw
  PREFIX.ext.validate.sleepy.v1  answers ok after 2 s (callers time out first)
  PREFIX.ext.validate.flaky.v1   ignores the first request of each message_id
  PREFIX.ext.validate.garbage.v1 answers JSON nested 300 000 levels deep
  PREFIX.provider.crm.v1         a CP2 provider; metadata gets the parameters it was sent
Prints "ready" when subscribed.
"""

import asyncio
import json
import sys

import nats


async def subscriptions_live(nc: nats.NATS) -> None:
    """Return once the server has read every subscription made so far. nats-py 2.16's
    `flush` writes its PING ahead of the SUBs its flusher has not written yet, so its
    PONG proves nothing about them; a message to this connection's own inbox is queued
    behind them and comes back only after the server has read them."""
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    await nc.publish(inbox, b"")
    await sub.next_msg(timeout=10)
    await sub.unsubscribe()


async def main(url: str, prefix: str) -> None:
    nc = await nats.connect(url, name="foreign-extension")
    seen: set[str] = set()

    async def shout(msg):  # type: ignore[no-untyped-def]
        req = json.loads(msg.data)
        message = dict(req["message"])
        message["payload"] = message["payload"].upper()
        message["metadata"] = {**message["metadata"], "config": req["extensions"]["config"],
                               "tenant": req["tenant_id"],
                               "trace_header": (msg.headers or {}).get("Trace-Id")}
        await msg.respond(json.dumps({"message": message,
                                      "context": {**req["context"], "shouted": True}}).encode())

    async def sleepy(msg):  # type: ignore[no-untyped-def]
        await asyncio.sleep(2)
        await msg.respond(b'{"status": "ok"}')

    async def flaky(msg):  # type: ignore[no-untyped-def]
        message_id = json.loads(msg.data)["message"]["message_id"]
        if message_id not in seen:
            seen.add(message_id)
            return  # the caller times out and retries
        await msg.respond(b'{"status": "ok"}')

    async def garbage(msg):  # type: ignore[no-untyped-def]
        await msg.respond(b'{"status": "ok", "details": {"d": ' + b"[" * 300_000
                          + b"]" * 300_000 + b"}}")

    async def crm(msg):  # type: ignore[no-untyped-def]
        req = json.loads(msg.data)
        await msg.respond(json.dumps({
            "provider_id": req["provider_id"], "output": f"summary of {req['prompt']}",
            "usage": {"prompt_tokens": len(req["prompt"]), "completion_tokens": 2},
            "metadata": {"source": "crm", "parameters": req["parameters"]}}).encode())

    for subject, cb in ((f"{prefix}.ext.pre.shout.v1", shout),
                        (f"{prefix}.ext.validate.sleepy.v1", sleepy),
                        (f"{prefix}.ext.validate.flaky.v1", flaky),
                        (f"{prefix}.ext.validate.garbage.v1", garbage),
                        (f"{prefix}.provider.crm.v1", crm)):
        await nc.subscribe(subject, queue="foreign", cb=cb)
    await subscriptions_live(nc)
    print("ready", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
