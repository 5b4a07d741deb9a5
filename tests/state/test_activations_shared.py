"""Two hosts sharing a real Redis store share the users' output-extension activations
and the turns' saved results (text-tags, the C example plugin)."""

from __future__ import annotations

from support import Built
from wasmext import Host, Runtime
from wasmext.config import HostConfig


def redis_host(built: Built, url: str) -> Host:
    host = Host(HostConfig(state_backend="redis", state_url=url),
                runtime=Runtime(cache=False), plugin_dirs=[])
    host.add(built["text-tags"], plugin_id="text-tags")
    return host


def test_hosts_sharing_redis_share_activations_and_history(built: Built,
                                                           redis_url: str) -> None:
    with redis_host(built, redis_url) as one, redis_host(built, redis_url) as two:
        one.extensions.activate("shared-alice", "wordcount", default_param="brief")
        with two.session("shared-chat", user_id="shared-alice") as s:
            s.context["turn_id"] = "turn-0"
            _, results = s.output_extensions("#wordcount #shout", "a b c d")
        assert [(r.name, r.success, r.content) for r in results] == [
            ("wordcount", True, 4), ("shout", False, None)]
        (saved,) = one.extensions.history("shared-chat")
        assert saved["user_id"] == "shared-alice" and saved["results"][0]["content"] == 4
        two.extensions.deactivate("shared-alice", "wordcount")
        assert one.extensions.list("shared-alice") == []
