// #mood asks the host's model in JSON mode, #plain without it; each answers the
// model's text, so a test sees what the AssemblyScript SDK sent.
import { Call, Completion, ErrorCode, NO_PRIORITY, Reply, definePlugin, llmComplete } from "@wasmext/as-sdk";
export * from "@wasmext/as-sdk/exports";

function ask(call: Call, jsonMode: bool): Reply {
  const at = call.data.find("answer");
  if (at === null) return call.fail(ErrorCode.INVALID, "output_extension data needs an answer");
  const answer = at.readString();
  if (!at.ok) return call.fail(ErrorCode.INVALID, "the answer is not a string");
  const c = new Completion();
  c.prompt = answer;
  c.maxTokens = 64;
  if (jsonMode) {
    c.system = "Rate the mood as JSON.";
    c.temperature = 0;
    c.jsonMode = true;
  }
  const reply = llmComplete(c);
  if (!reply.ok) return call.failWith(reply);
  const textAt = reply.value.find("text");
  if (textAt === null) return call.fail(ErrorCode.INVALID, "the answer has no text");
  const text = textAt.readString();
  return call.returnString(text);
}

function mood(call: Call): Reply {
  return ask(call, true);
}

function plain(call: Call): Reply {
  return ask(call, false);
}

definePlugin("as-mood", "0.1.0")
  .hook("output_extension", mood, NO_PRIORITY, "mood")
  .hook("output_extension", plain, NO_PRIORITY, "plain");
