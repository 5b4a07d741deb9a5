// Build a JavaScript plugin into a component of the world wasmext:plugin@1.0.0.
//
//   node componentize.mjs PLUGIN.js OUT.wasm
//
// bundle.mjs folds the SDK and the plugin into one module; features the
// sandbox does not grant (random, clocks, stdio, http) are left out of the engine.
//
// An error in the plugin is printed as one line, `hello.js:10:17: SyntaxError: ...`,
// at the plugin's own line: a syntax error is found by parsing the plugin alone
// (componentize-js only says how many errors it found), and an error thrown while
// the module initialises names a line of the bundle, which is shifted back.
import { componentize } from "@bytecodealliance/componentize-js";
import { readFileSync, writeFileSync } from "node:fs";
import { basename, join } from "node:path";
import { SDK, bundle } from "./bundle.mjs";

// The lines the bundle puts ahead of the plugin's first line.
const PLUGIN_OFFSET = bundle("").split("\n").length - 1;

function lineCol(code, offset) {
  const before = Buffer.from(code).subarray(0, offset).toString("utf8").split("\n");
  return [before.length, before[before.length - 1].length + 1];
}

async function syntaxError(file, code) {
  let oxc;
  try {
    oxc = await import("oxc-parser"); // componentize-js's own parser, beside it
  } catch {
    return null; // not resolvable here: componentize-js reports the error, unlocated
  }
  const { errors } = await oxc.parseAsync(basename(file), code, { sourceType: "module" });
  if (!errors.length) return null;
  const first = errors[0];
  const framed = /\[[^\]]*:(\d+):(\d+)\]/.exec(first.codeframe ?? "");
  const [line, col] = framed ? [framed[1], framed[2]]
    : lineCol(code, first.labels?.[0]?.start ?? 0);
  return `${basename(file)}:${line}:${col}: SyntaxError: ${first.message}`;
}

function located(file, error) {
  const text = String(error?.message ?? error);
  const match = /source\.js:(\d+):(\d+):? ?((?:[A-Z]\w*)?Error\b:?[^\n]*)/.exec(text);
  if (match && Number(match[1]) > PLUGIN_OFFSET) {
    return `${basename(file)}:${Number(match[1]) - PLUGIN_OFFSET}:${match[2]}: ${match[3]}`;
  }
  return null;
}

async function main() {
  const [source, out] = process.argv.slice(2);
  if (!source || !out) {
    console.error("usage: node componentize.mjs PLUGIN.js OUT.wasm");
    process.exit(2);
  }
  const code = readFileSync(source, "utf8");
  const bad = await syntaxError(source, code);
  if (bad) {
    console.error(bad);
    process.exit(1);
  }
  let component;
  try {
    ({ component } = await componentize(bundle(code), {
      witPath: join(SDK, "wit"),
      worldName: "plugin",
      disableFeatures: ["random", "stdio", "clocks", "http", "fetch-event"],
    }));
  } catch (error) {
    const line = located(source, error);
    if (!line) throw error;
    console.error(line);
    process.exit(1);
  }
  writeFileSync(out, component);
}

await main();
