"""hello: hook "greet" turns the string "Ada" into "Hello, Ada!"."""

from wasmext_guest import Fail, Plugin, config, export, hook


class Hello(Plugin):
    name = "hello"
    version = "0.1.0"

    @hook("greet")
    def greet(self, name: object) -> str:
        if not isinstance(name, str):
            raise Fail("invalid", "greet expects a string")
        return f"{config('greeting', 'Hello')}, {name}!"


WitWorld = export(Hello())
