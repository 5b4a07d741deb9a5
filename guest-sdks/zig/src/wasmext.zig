//! The wasmext guest SDK for Zig (ABI v1, see abi/SPEC.md).
//!
//! Three layers, all reachable from here:
//!   * raw     - the two host imports, unchecked (`raw.host_call`, `raw.log`);
//!   * safe    - MessagePack (`Reader`, `Writer`), `log`, `hostCall`,
//!               `configGet`, and the memory rules of SPEC 1.4;
//!   * plugin  - write a struct, then `comptime { wasmext.exportPlugin(P); }`.
//!
//!     const wasmext = @import("wasmext");
//!
//!     const Hello = struct {
//!         pub const name = "hello";
//!         pub const hooks = [_]wasmext.Hook{.{ .hook = "greet" }};
//!
//!         pub fn greet(call: *wasmext.Call) !wasmext.Reply {
//!             return call.returnString(try call.dataString());
//!         }
//!     };
//!
//!     comptime {
//!         wasmext.exportPlugin(Hello);
//!     }

/// Generated ABI constants: versions, log levels, error codes, ops, limits.
pub const abi = @import("abi.zig");
/// Raw layer: the host imports as the ABI declares them.
pub const raw = @import("raw.zig");
pub const msgpack = @import("msgpack.zig");

const host = @import("host.zig");
const plugin = @import("plugin.zig");

pub const Reader = msgpack.Reader;
pub const Writer = msgpack.Writer;
pub const Token = msgpack.Token;
pub const LogLevel = abi.LogLevel;

/// Long-lived guest memory (std.heap.wasm_allocator). Per-call scratch
/// memory is `Call.arena`.
pub const allocator = host.allocator;
pub const Failure = host.Failure;
pub const Answer = host.Answer;
pub const log = host.log;
pub const logf = host.logf;
pub const hostCall = host.hostCall;
pub const configGet = host.configGet;
pub const configAll = host.configAll;
pub const hostAbiMinor = host.hostAbiMinor;

const world = @import("world.zig");
/// State and events (minor 0): `scope` null is the session's, as in every SDK.
pub const Scope = world.Scope;
pub const StateOptions = world.StateOptions;
pub const stateGet = world.stateGet;
pub const stateSet = world.stateSet;
pub const stateDelete = world.stateDelete;
pub const stateKeys = world.stateKeys;
pub const emit = world.emit;
/// The ops of ABI minor 1 (SPEC 4.5).
pub const httpFetch = world.httpFetch;
pub const Completion = world.Completion;
pub const llmComplete = world.llmComplete;
pub const agentsRequest = world.agentsRequest;
pub const agentsSend = world.agentsSend;

pub const Hook = plugin.Hook;
pub const Call = plugin.Call;
pub const Reply = plugin.Reply;
pub const exportPlugin = plugin.exportPlugin;
