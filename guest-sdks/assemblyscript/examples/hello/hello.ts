// hello: hook "greet" turns the string "Ada" into "Hello, Ada!".
import { Call, ErrorCode, LogLevel, Reply, configGet, definePlugin, log } from "@wasmext/as-sdk";
// The ABI entry points (wasmext_alloc, wasmext_call, ...) come from the SDK.
export * from "@wasmext/as-sdk/exports";

function greet(call: Call): Reply {
  const name = call.dataString();
  if (name === null) return call.fail(ErrorCode.INVALID, "greet expects a string");

  // The host answers with the manifest default; "Hello" covers a host that
  // has no value at all (not_found).
  let greeting = "Hello";
  const setting = configGet("greeting");
  if (setting.ok) {
    const text = setting.valueString();
    if (text !== null) greeting = text;
  } else if (!setting.is(ErrorCode.NOT_FOUND)) {
    return call.failWith(setting);
  }

  const text = greeting + ", " + name + "!";
  log(LogLevel.INFO, text);
  return call.returnString(text);
}

definePlugin("hello", "0.1.0").hook("greet", greet);
