//! wasmext guest SDK for Rust: write wasmext plugins (ABI v1, see
//! `abi/SPEC.md`) with nothing but `std`.
//!
//! Three layers:
//!
//! 1. [`raw`]: the imports `wasmext.host_call` and `wasmext.log` exactly as
//!    the ABI declares them, and the `(ptr << 32) | len` packing.
//! 2. Safe: [`msgpack::Reader`], [`Writer`] and [`Value`] (bounds-checked,
//!    depth limit 64, smallest encodings), [`log()`](fn@log),
//!    [`host_call`], [`Request`], [`config_get`], [`secret_get`], returning
//!    a decoded [`Answer`].
//! 3. The plugin interface: implement [`Plugin`] (a hook table of
//!    methods) and write `wasmext::export_plugin!(MyPlugin);` once.
//!
//! ```ignore
//! use wasmext::{Call, Handler, Hook, Plugin, Reply, Result};
//!
//! #[derive(Default)]
//! struct Hello;
//!
//! impl Plugin for Hello {
//!     const NAME: &'static str = "hello";
//!     const HOOKS: &'static [Hook<Self>] = &[Hook::new("greet", Handler(Self::greet))];
//! }
//!
//! impl Hello {
//!     fn greet(&mut self, call: &mut Call) -> Result<Reply> {
//!         let name = call.data_str()?;
//!         call.reply_str(&format!("Hello, {}!", name))
//!     }
//! }
//!
//! wasmext::export_plugin!(Hello);
//! ```

use std::borrow::Cow;
use std::fmt;

pub mod abi;
mod host;
pub mod msgpack;
mod plugin;
pub mod raw;
mod value;
mod world;
mod writer;

pub use abi::code;
pub use host::{
    abi_info, config_all, config_get, host_abi_minor, host_call, log, plugin_id, secret_get,
};
pub use host::{Answer, Level, Request};
pub use msgpack::{Reader, Token};
pub use plugin::{Call, Handler, Hook, Plugin, Registration, Reply};
pub use value::Value;
pub use world::{
    agents_request, agents_send, emit, http_fetch, llm_complete, state_delete, state_get,
    state_keys, state_set, Completion, Scope,
};
pub use writer::{to_vec, Bin, Encode, Raw, Writer};

#[doc(hidden)]
pub use plugin::rt as __rt;

/// An error as the ABI carries it: an `error.code` (one of [`code`]) and a
/// message. A handler returns it as `Err(..)`; the host raises it as a
/// `PluginError` with the same code and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    code: Cow<'static, str>,
    message: Cow<'static, str>,
}

impl Error {
    pub fn new(code: impl Into<Cow<'static, str>>, message: impl Into<Cow<'static, str>>) -> Self {
        Error {
            code: code.into(),
            message: message.into(),
        }
    }

    /// Code `failed`: the handler ran and reported a failure.
    pub fn failed(message: impl Into<Cow<'static, str>>) -> Self {
        Error::new(code::FAILED, message)
    }

    /// Code `invalid`: the input is malformed.
    pub fn invalid(message: impl Into<Cow<'static, str>>) -> Self {
        Error::new(code::INVALID, message)
    }

    pub fn code(&self) -> &str {
        &self.code
    }

    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.message.is_empty() {
            f.write_str(&self.code)
        } else {
            write!(f, "{}: {}", self.code, self.message)
        }
    }
}

impl std::error::Error for Error {}

/// MessagePack errors: malformed input is `invalid`, exhausted memory `limit`.
impl From<msgpack::Error> for Error {
    fn from(e: msgpack::Error) -> Self {
        Error::new(e.code(), e.as_str())
    }
}

/// `Result<T, wasmext::Error>`.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Define the ABI exports (`wasmext_abi_version`, `wasmext_alloc`,
/// `wasmext_free`, `wasmext_register`, `wasmext_call`) for a [`Plugin`].
/// Use it once per plugin, at the top level:
///
/// ```ignore
/// wasmext::export_plugin!(MyPlugin);                    // MyPlugin: Default
/// wasmext::export_plugin!(MyPlugin, MyPlugin::new(42));  // any constructor
/// ```
///
/// The instance is created at registration and lives as long as the wasm
/// instance; handlers get it as `&mut self`.
#[macro_export]
macro_rules! export_plugin {
    ($plugin:ty) => {
        $crate::export_plugin!($plugin, <$plugin as ::core::default::Default>::default());
    };
    ($plugin:ty, $init:expr) => {
        const _: () = {
            // One instance per wasm instance. wasm plugins are single-threaded
            // and the host never enters an instance twice at once.
            static mut WASMEXT_INSTANCE: ::core::option::Option<$plugin> =
                ::core::option::Option::None;

            fn wasmext_new() -> $plugin {
                $init
            }

            #[no_mangle]
            pub extern "C" fn wasmext_abi_version() -> i32 {
                $crate::__rt::ABI_MAJOR as i32
            }

            #[no_mangle]
            pub extern "C" fn wasmext_alloc(size: u32) -> u32 {
                $crate::__rt::alloc(size)
            }

            #[no_mangle]
            pub extern "C" fn wasmext_free(ptr: u32, size: u32) {
                $crate::__rt::free(ptr, size)
            }

            #[no_mangle]
            pub extern "C" fn wasmext_register(ptr: u32, len: u32) -> u64 {
                // SAFETY: the host passes a region it obtained from
                // wasmext_alloc and keeps it alive during the call; the
                // instance static is only touched from these exports.
                unsafe {
                    let input = $crate::__rt::input(ptr, len);
                    $crate::__rt::register::<$plugin>(input, &mut WASMEXT_INSTANCE, wasmext_new)
                }
            }

            #[no_mangle]
            pub extern "C" fn wasmext_call(ptr: u32, len: u32) -> u64 {
                // SAFETY: as for wasmext_register.
                unsafe {
                    let input = $crate::__rt::input(ptr, len);
                    $crate::__rt::call::<$plugin>(input, &mut WASMEXT_INSTANCE, wasmext_new)
                }
            }
        };
    };
}
