// Layer 1: the world's imports as componentize-js binds them, unchanged:
// hostCall(Uint8Array) -> Uint8Array carries ABI v1's MessagePack documents,
// log(level, string) is the direct log line (0 trace .. 4 error).
import { hostCall as rawHostCall, log as rawLog } from "wasmext:plugin/host@1.0.0";

export { rawHostCall, rawLog };
export const LOG_LEVELS = { trace: 0, debug: 1, info: 2, warn: 3, error: 4 };
