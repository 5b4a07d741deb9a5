// Build a JavaScript plugin into a component of the world wasmext:plugin@1.0.0.
//
//   node componentize.mjs PLUGIN.js OUT.wasm
//
// bundle.mjs folds the SDK and the plugin into one module; features the
// sandbox does not grant (random, clocks, stdio, http) are left out of the engine.
import { componentize } from "@bytecodealliance/componentize-js";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { SDK, bundle } from "./bundle.mjs";

async function main() {
  const [source, out] = process.argv.slice(2);
  if (!source || !out) {
    console.error("usage: node componentize.mjs PLUGIN.js OUT.wasm");
    process.exit(2);
  }
  const { component } = await componentize(bundle(readFileSync(source, "utf8")), {
    witPath: join(SDK, "wit"),
    worldName: "plugin",
    disableFeatures: ["random", "stdio", "clocks", "http", "fetch-event"],
  });
  writeFileSync(out, component);
}

await main();
