// The official TypeScript SDK client, driven by one JSON plan (argv[2]); prints one
// JSON report. Every step's failure is reported, never thrown, so the Python test
// sees what a TypeScript MCP host would see.
//   {"transport": "stdio", "command", "args", "env", "cwd"} | {"transport": "http", "url",
//    "headers"}, "calls": [{"name", "arguments"}], "resources": true, "prompts": true,
//    "readResource": uri, "getPrompt": {"name", "arguments"}, "cancel": {"name", "arguments",
//    "afterMs"}, "watch": {"quietMs", "trigger": [command, ...args], "env", "cwd",
//    "triggerCall": {"name", "arguments"}, "wanted": [method], "waitMs", "settleMs"}}
// "watch" records the list_changed notifications heard while nothing changes (quietMs),
// runs the trigger command (or calls the trigger tool), waits for the wanted ones (default
// resources and prompts; waitMs), listens settleMs more, and lists both again.
import { execFileSync } from "node:child_process";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import {
  PromptListChangedNotificationSchema,
  ResourceListChangedNotificationSchema,
  ToolListChangedNotificationSchema,
} from "@modelcontextprotocol/sdk/types.js";

const plan = JSON.parse(process.argv[2]);
const report = { steps: {} };

async function step(name, fn) {
  try {
    report.steps[name] = { ok: await fn() };
  } catch (err) {
    report.steps[name] = { error: String(err?.message ?? err), code: err?.code ?? null };
  }
}

const transport = plan.transport === "stdio"
  ? new StdioClientTransport({ command: plan.command, args: plan.args ?? [],
                               env: plan.env, cwd: plan.cwd, stderr: "inherit" })
  : new StreamableHTTPClientTransport(new URL(plan.url),
                                      { requestInit: { headers: plan.headers ?? {} } });
const client = new Client({ name: "wasmext-interop", version: "1.0.0" });
const changed = [];
for (const schema of [ToolListChangedNotificationSchema, ResourceListChangedNotificationSchema,
                      PromptListChangedNotificationSchema]) {
  client.setNotificationHandler(schema, (notification) => { changed.push(notification.method); });
}
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
await step("connect", async () => {
  await client.connect(transport);
  return true;
});
if (report.steps.connect.ok) {
  report.capabilities = client.getServerCapabilities() ?? null;
  await step("listTools", async () => (await client.listTools()).tools);
  report.calls = [];
  for (const call of plan.calls ?? []) {
    try {
      report.calls.push({ result: await client.callTool(call) });
    } catch (err) {
      report.calls.push({ error: String(err?.message ?? err), code: err?.code ?? null });
    }
  }
  if (plan.cancel) {
    await step("cancel", async () => {
      const controller = new AbortController();
      setTimeout(() => controller.abort("cancelled by the test"), plan.cancel.afterMs ?? 300);
      return await client.callTool({ name: plan.cancel.name, arguments: plan.cancel.arguments },
                                   undefined, { signal: controller.signal });
    });
  }
  if (plan.resources) {
    await step("listResources", async () => (await client.listResources()).resources);
    await step("listResourceTemplates",
               async () => (await client.listResourceTemplates()).resourceTemplates);
  }
  if (plan.readResource) {
    await step("readResource", async () => (await client.readResource({ uri: plan.readResource })).contents);
  }
  if (plan.prompts) {
    await step("listPrompts", async () => (await client.listPrompts()).prompts);
  }
  if (plan.getPrompt) {
    await step("getPrompt", async () => (await client.getPrompt(plan.getPrompt)).messages);
  }
  if (plan.watch) {
    const watch = plan.watch;
    await sleep(watch.quietMs ?? 1000);
    report.quiet = [...changed];
    await step("trigger", async () => {
      if (watch.triggerCall) {
        return await client.callTool(watch.triggerCall);
      }
      execFileSync(watch.trigger[0], watch.trigger.slice(1),
                   { env: watch.env, cwd: watch.cwd, stdio: ["ignore", "ignore", "inherit"] });
      return true;
    });
    const wanted = watch.wanted ?? ["notifications/resources/list_changed",
                                    "notifications/prompts/list_changed"];
    const deadline = Date.now() + (watch.waitMs ?? 20000);
    while (!wanted.every((m) => changed.includes(m)) && Date.now() < deadline) {
      await sleep(50);
    }
    await sleep(watch.settleMs ?? 1000);
    report.changed = changed.slice(report.quiet.length);
    await step("resourcesAfter", async () => (await client.listResources()).resources);
    await step("promptsAfter", async () => (await client.listPrompts()).prompts);
  }
  await client.close();
}
process.stdout.write(JSON.stringify(report) + "\n");
process.exit(0);
