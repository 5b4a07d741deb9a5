"""json-check: the output extension `#json` or `#json:key1,key2`.

It reports whether the answer is JSON (a fenced ```json block counts) and,
when keys are named, which of them the top-level object lacks. It never
changes the answer: extensions only add a result.
"""

import json
import re
from typing import Any

from wasmext_guest import Fail, Plugin, config, export, hook

FENCE = re.compile(r"```(?:json)?\s*\n(.*?)\n\s*```", re.DOTALL)


def parse(answer: str) -> Any:
    fenced = FENCE.search(answer)
    return json.loads(fenced.group(1) if fenced else answer)


class JsonCheck(Plugin):
    name = "json-check"
    version = "0.1.0"

    @hook("output_extension", pattern="json")
    def check(self, req: Any) -> dict[str, Any]:
        if not isinstance(req, dict) or not isinstance(req.get("answer"), str):
            raise Fail("invalid", "output_extension expects a map with a string answer")
        wanted = [k.strip() for k in (req.get("param") or "").split(",") if k.strip()]
        try:
            doc = parse(req["answer"])
        except ValueError as exc:
            return {"json": False, "error": str(exc)[:200]}
        keys = sorted(doc) if isinstance(doc, dict) else []
        limit = config("max_keys", 20)
        return {"json": True, "object": isinstance(doc, dict), "keys": keys[:limit],
                "missing": [k for k in wanted if k not in keys]}


WitWorld = export(JsonCheck())
