// Package entry: `import { ... } from "@wasmext/as-sdk"`.
export * from "./assembly/index";
