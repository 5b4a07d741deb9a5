// Fold the SDK and one plugin module into the single ES module componentize-js takes.
//
// The SDK (src/*.js, in layer order) goes into a scope of its own ahead of the
// plugin's code, and the plugin's `import { ... } from "wasmext"` becomes a
// destructuring of that scope: the SDK's internal names never meet the plugin's.
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

export const SDK = dirname(fileURLToPath(import.meta.url));
const LAYERS = ["msgpack.js", "json.js", "raw.js", "host.js", "world.js", "helpers.js", "plugin.js"];
const WORLD_IMPORT = /^import \{ hostCall as rawHostCall, log as rawLog \} from "wasmext:plugin\/host@1\.0\.0";$/m;

export function bundle(pluginSource) {
  const names = [];
  const bodies = LAYERS.map((file) => {
    let text = readFileSync(join(SDK, "src", file), "utf8");
    text = text.replace(WORLD_IMPORT, "const rawHostCall = __wasmextHostCall, rawLog = __wasmextLog;");
    text = text.replace(/^import [^;]* from "\.\/[a-z]+\.js";$/gm, "");
    text = text.replace(/^export \{[^}]*\};$/gm, "");
    text = text.replace(/^export (class|function|const) ([A-Za-z_$][\w$]*)/gm, (_, kind, name) => {
      names.push(name);
      return `${kind} ${name}`;
    });
    return `// ---- ${file}\n${text}`;
  });
  const imports = /import\s*\{([^}]*)\}\s*from\s*["']wasmext["'];?/g;
  const plugin = pluginSource.replace(imports, (_, list) =>
    `const {${list.replace(/\s+as\s+/g, ": ")}} = __wasmext;`);
  return [
    'import { hostCall as __wasmextHostCall, log as __wasmextLog } from "wasmext:plugin/host@1.0.0";',
    `const __wasmext = (() => {\n${bodies.join("\n")}\nreturn { ${names.join(", ")} };\n})();`,
    plugin,
  ].join("\n");
}
