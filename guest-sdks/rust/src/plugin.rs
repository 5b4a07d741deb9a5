//! Layer 3, the plugin interface: a [`Plugin`] names its hooks and their
//! handlers, and [`export_plugin!`](crate::export_plugin) turns it into the
//! ABI exports (SPEC 1.1, 3 and 4.1).

use std::cell::Cell;

use crate::abi::{code, ABI_MINOR, ANSWER_REGION_SINCE};
use crate::host::{self, skip_nested};
use crate::msgpack::{self, Reader, MAX_DEPTH};
use crate::writer::{Encode, Writer};
use crate::{raw, Error, Result};

/// What a handler answers (failures are `Err(Error)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reply {
    /// `{"ok": true, "value": v}` with `v` the one value written to [`Call::out`].
    Value,
    /// `{"ok": true}`: the host passes the input on as it was.
    Unchanged,
    /// Like `Value` plus `"stop": true` (short-circuit the chain). With
    /// nothing written: `{"ok": true, "stop": true}`, unchanged and stop.
    Stop,
}

/// A hook handler: a method of the plugin, wrapped so that hook tables can
/// be `const` (`Hook::new("greet", Handler(Self::greet))`).
pub struct Handler<P: 'static>(pub fn(&mut P, &mut Call<'_>) -> Result<Reply>);

impl<P> Clone for Handler<P> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<P> Copy for Handler<P> {}

/// One entry of the plugin's hook table, and of the registration map's
/// `hooks` array.
pub struct Hook<P: 'static> {
    pub name: &'static str,
    /// 0..=100, higher runs earlier; `None` leaves it to the manifest.
    pub priority: Option<u8>,
    /// A tag pattern (`on_tag`, `output_extension`): an exact name or a
    /// prefix ending in `*`.
    pub pattern: Option<&'static str>,
    /// `None`: registered, always answers unchanged.
    pub handler: Option<Handler<P>>,
}

impl<P> Hook<P> {
    /// Hook `name`, handled by `handler`:
    /// `Hook::new("greet", Handler(Self::greet))`.
    pub const fn new(name: &'static str, handler: Handler<P>) -> Self {
        Hook {
            name,
            priority: None,
            pattern: None,
            handler: Some(handler),
        }
    }

    /// Hook `name`, registered without a handler: every call is unchanged.
    pub const fn passive(name: &'static str) -> Self {
        Hook {
            name,
            priority: None,
            pattern: None,
            handler: None,
        }
    }

    /// An explicit priority, 0..=100 (a compile error above 100 when the
    /// table is a `const`).
    pub const fn priority(mut self, priority: u8) -> Self {
        if priority > 100 {
            panic!("hook priority must be 0..=100");
        }
        self.priority = Some(priority);
        self
    }

    /// A tag pattern: this entry serves calls whose data's `tag` (or
    /// `name`) matches. Several entries may share a hook name.
    pub const fn pattern(mut self, pattern: &'static str) -> Self {
        self.pattern = Some(pattern);
        self
    }
}

impl<P> Clone for Hook<P> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<P> Copy for Hook<P> {}

impl<P> core::fmt::Debug for Hook<P> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Hook")
            .field("name", &self.name)
            .field("priority", &self.priority)
            .field("pattern", &self.pattern)
            .field("handled", &self.handler.is_some())
            .finish()
    }
}

/// What the host told the plugin at registration.
#[derive(Debug, Clone, Copy)]
pub struct Registration<'a> {
    host_minor: u32,
    host_version: &'a str,
    plugin_id: &'a str,
    settings: Option<&'a [u8]>,
}

impl<'a> Registration<'a> {
    /// The host's ABI minor (`abi.minor`).
    pub fn host_abi_minor(&self) -> u32 {
        self.host_minor
    }

    /// The host's version string.
    pub fn host_version(&self) -> &'a str {
        self.host_version
    }

    /// The plugin id the host gave this instance.
    pub fn plugin_id(&self) -> &'a str {
        self.plugin_id
    }

    /// A reader on the map of non-sensitive settings (an empty map when
    /// the request had none).
    pub fn settings(&self) -> Reader<'a> {
        Reader::new(self.settings.unwrap_or(&[0x80]))
    }

    /// A reader on one setting's value.
    pub fn setting(&self, name: &str) -> Option<Reader<'a>> {
        self.settings().find(name).ok().flatten()
    }
}

/// A plugin: its registration data and its hook table. Everything but
/// `HOOKS` has a do-nothing default.
///
/// ```ignore
/// #[derive(Default)]
/// struct Hello;
/// impl wasmext::Plugin for Hello {
///     const NAME: &'static str = "hello";
///     const HOOKS: &'static [wasmext::Hook<Self>] =
///         &[wasmext::Hook::new("greet", wasmext::Handler(Self::greet))];
/// }
/// ```
pub trait Plugin: Sized + 'static {
    /// Display name for the registration map ("" leaves it out).
    const NAME: &'static str = "";
    /// Version for the registration map ("" leaves it out).
    const VERSION: &'static str = "";
    /// The hooks to register and their handlers. A call to any other hook
    /// answers `{"ok": false, "error": {"code": "unhandled"}}`.
    const HOOKS: &'static [Hook<Self>];

    /// Called once per instance at registration, before any hook call.
    fn init(&mut self, _registration: &Registration<'_>) {}

    /// Write extra registration entries (key/value pairs such as `"prompt"`
    /// or `"tool_guidance"`) and return how many pairs were written.
    fn register_extra(&self, _w: &mut Writer) -> usize {
        0
    }
}

/// One hook call as a handler sees it. Everything it hands out stays valid
/// until the handler returns.
pub struct Call<'a> {
    hook: &'a str,
    data: &'a [u8],
    meta: Option<&'a [u8]>,
    out: &'a mut Writer,
}

impl<'a> Call<'a> {
    /// The hook name.
    pub fn hook(&self) -> &'a str {
        self.hook
    }

    /// A reader on the call's `data` (a nil when the request had none).
    pub fn data(&self) -> Reader<'a> {
        Reader::new(self.data)
    }

    /// The encoded `data`.
    pub fn data_bytes(&self) -> &'a [u8] {
        self.data
    }

    /// The data as a string; `invalid` if it is something else.
    pub fn data_str(&self) -> Result<&'a str> {
        self.data().read_str().map_err(|e| match e {
            msgpack::Error::Type => Error::invalid("data must be a string"),
            e => e.into(),
        })
    }

    /// The data decoded into a [`crate::Value`].
    pub fn data_value(&self) -> Result<crate::Value> {
        Ok(self.data().read_value()?)
    }

    /// A reader on the call's `meta`, if the request had one.
    pub fn meta(&self) -> Option<Reader<'a>> {
        self.meta.map(Reader::new)
    }

    /// The writer for the reply value: write exactly one value, then
    /// return `Reply::Value` or `Reply::Stop`.
    pub fn out(&mut self) -> &mut Writer {
        self.out
    }

    /// Write `value` and reply with it.
    pub fn reply<T: Encode + ?Sized>(&mut self, value: &T) -> Result<Reply> {
        value.encode(self.out);
        Ok(Reply::Value)
    }

    /// Write a string and reply with it.
    pub fn reply_str(&mut self, s: &str) -> Result<Reply> {
        self.out.write_str(s);
        Ok(Reply::Value)
    }

    /// Reply with an already encoded value (checked before it is sent).
    pub fn reply_raw(&mut self, encoded: &[u8]) -> Result<Reply> {
        self.out.write_raw(encoded);
        Ok(Reply::Value)
    }
}

/// The SDK side of the exports. Not API: `export_plugin!` calls these.
#[doc(hidden)]
pub mod rt {
    use super::*;

    pub use crate::abi::ABI_MAJOR;

    thread_local! {
        /// The one output buffer (SPEC 1.4): the host copies a response
        /// before it enters the guest again, so every entry reuses it.
        static OUTPUT: Cell<Vec<u8>> = const { Cell::new(Vec::new()) };
    }

    pub fn alloc(size: u32) -> u32 {
        host::alloc_for_host(size)
    }

    pub fn free(ptr: u32, size: u32) {
        host::free_for_host(ptr, size)
    }

    /// The input region the host passed (never written, never freed).
    ///
    /// # Safety
    /// `ptr..ptr+len` must be readable for as long as the slice is used.
    pub unsafe fn input<'a>(ptr: u32, len: u32) -> &'a [u8] {
        if ptr == 0 || len == 0 {
            &[]
        } else {
            core::slice::from_raw_parts(ptr as usize as *const u8, len as usize)
        }
    }

    fn with_output(f: impl FnOnce(&mut Writer)) -> u64 {
        let mut w = Writer::reuse(OUTPUT.with(|c| c.take()));
        w.reset_all();
        f(&mut w);
        let packed = if w.check().is_ok() {
            let bytes = w.all();
            raw::pack(bytes.as_ptr() as usize as u32, bytes.len() as u32)
        } else {
            0
        };
        // Moving the Vec back keeps its heap buffer, which the host reads.
        OUTPUT.with(|c| c.set(w.take_buf()));
        if packed != 0 {
            return packed;
        }
        raw::pack(
            OUT_OF_MEMORY.as_ptr() as usize as u32,
            OUT_OF_MEMORY.len() as u32,
        )
    }

    /// Answered when even the error response cannot be allocated.
    const OUT_OF_MEMORY: &[u8] =
        b"\x82\xa2ok\xc2\xa5error\x82\xa4code\xa5limit\xa7message\xbcthe plugin ran out of memory";

    #[cfg(target_arch = "wasm32")]
    fn install_panic_hook() {
        thread_local!(static DONE: Cell<bool> = const { Cell::new(false) });
        if !DONE.with(|d| d.replace(true)) {
            // A panic traps (panic=abort); log its message first so the
            // plugin log says why.
            std::panic::set_hook(Box::new(|info| {
                host::log(host::Level::Error, &format!("panic: {}", info));
            }));
        }
    }

    #[cfg(not(target_arch = "wasm32"))]
    fn install_panic_hook() {}

    fn parse_registration(input: &[u8]) -> Registration<'_> {
        let mut reg = Registration {
            host_minor: 0,
            host_version: "",
            plugin_id: "",
            settings: None,
        };
        if msgpack::validate(input).is_err() {
            return reg;
        }
        let doc = Reader::new(input);
        let field = |path: &[&str]| -> Option<Reader<'_>> {
            let mut r = doc;
            for key in path {
                r = r.find(key).ok()??;
            }
            Some(r)
        };
        if let Some(mut r) = field(&["abi", "minor"]) {
            reg.host_minor = r.read_int_as::<u32>().unwrap_or(0);
        }
        if let Some(mut r) = field(&["host", "version"]) {
            reg.host_version = r.read_str().unwrap_or("");
        }
        if let Some(mut r) = field(&["plugin", "id"]) {
            reg.plugin_id = r.read_str().unwrap_or("");
        }
        if let Some(mut r) = field(&["settings"]) {
            if let Ok(raw) = r.read_raw() {
                if matches!(raw.first(), Some(0x80..=0x8f | 0xde | 0xdf)) {
                    reg.settings = Some(raw);
                }
            }
        }
        reg
    }

    /// `wasmext_register`: remember what the host told us, create the
    /// plugin instance if needed, answer the registration map.
    pub fn register<P: Plugin>(input: &[u8], state: &mut Option<P>, new: fn() -> P) -> u64 {
        install_panic_hook();
        let reg = parse_registration(input);
        host::set_registration(reg.host_minor, reg.plugin_id);
        let plugin = state.get_or_insert_with(new);
        plugin.init(&reg);
        let mut extra = Writer::new();
        let mut n_extra = plugin.register_extra(&mut extra);
        if extra.check().is_err() {
            n_extra = 0;
        }
        // An older host would keep the key as an unknown one: it is left out there.
        let area = reg.host_minor >= ANSWER_REGION_SINCE;
        let packed = with_output(|w| {
            let pairs = 2
                + !P::NAME.is_empty() as usize
                + !P::VERSION.is_empty() as usize
                + area as usize
                + n_extra;
            w.write_map(pairs)
                .write_str("abi_minor")
                .write_uint(ABI_MINOR as u64);
            if area {
                let (ptr, size) = host::answer_area();
                w.write_str("answer_region")
                    .write_map(2)
                    .write_str("ptr")
                    .write_uint(ptr as u64)
                    .write_str("size")
                    .write_uint(size as u64);
            }
            if !P::NAME.is_empty() {
                w.write_str("name").write_str(P::NAME);
            }
            if !P::VERSION.is_empty() {
                w.write_str("version").write_str(P::VERSION);
            }
            w.write_str("hooks").write_array(P::HOOKS.len());
            for h in P::HOOKS {
                let n = 1 + h.priority.is_some() as usize + h.pattern.is_some() as usize;
                w.write_map(n).write_str("hook").write_str(h.name);
                if let Some(p) = h.priority {
                    w.write_str("priority").write_uint(p as u64);
                }
                if let Some(p) = h.pattern {
                    w.write_str("pattern").write_str(p);
                }
            }
            if n_extra > 0 {
                w.write_raw(extra.as_bytes());
            }
        });
        packed
    }

    struct Request<'a> {
        hook: &'a str,
        data: &'a [u8],
        meta: Option<&'a [u8]>,
    }

    fn parse_request(input: &[u8]) -> Result<Request<'_>> {
        let bad = |e: msgpack::Error| match e {
            msgpack::Error::Depth => Error::invalid("call request nests too deep"),
            _ => Error::invalid("call request is not valid MessagePack"),
        };
        let mut r = Reader::new(input);
        let n = r.read_map().map_err(|e| match e {
            msgpack::Error::Type => Error::invalid("call request is not a map"),
            e => bad(e),
        })?;
        let mut req = Request {
            hook: "",
            data: &[0xc0],
            meta: None,
        };
        let mut saw_hook = false;
        for _ in 0..n {
            let key = r.read_str().map_err(bad)?;
            let start = r.position();
            match key {
                "hook" => match r.read_str() {
                    Ok(h) => {
                        req.hook = h;
                        saw_hook = true;
                    }
                    Err(_) => skip_nested(&mut r).map_err(bad)?,
                },
                "data" => {
                    skip_nested(&mut r).map_err(bad)?;
                    req.data = &input[start..r.position()];
                }
                "meta" => {
                    skip_nested(&mut r).map_err(bad)?;
                    req.meta = Some(&input[start..r.position()]);
                }
                _ => skip_nested(&mut r).map_err(bad)?,
            }
        }
        r.finish().map_err(bad)?;
        if !saw_hook {
            return Err(Error::invalid("call request has no string \"hook\""));
        }
        Ok(req)
    }

    /// The entry for this call: the first with the hook's name whose
    /// pattern (if any) matches the data's `tag` or `name`.
    fn find_hook<P: Plugin>(name: &str, data: &[u8]) -> Option<&'static Hook<P>> {
        let mut subject: Option<Option<&str>> = None;
        for h in P::HOOKS {
            if h.name != name {
                continue;
            }
            let pattern = match h.pattern {
                None => return Some(h),
                Some(p) => p,
            };
            let s = *subject.get_or_insert_with(|| {
                let d = Reader::new(data);
                let field = match d.find("tag") {
                    Ok(Some(f)) => Some(f),
                    _ => d.find("name").ok().flatten(),
                };
                field.and_then(|mut f| f.read_str().ok())
            });
            if let Some(s) = s {
                if pattern_matches(pattern, s) {
                    return Some(h);
                }
            }
        }
        None
    }

    const VALUE_PREFIX: &[u8] = b"\x82\xa2ok\xc3\xa5value";
    const OK_ONLY: &[u8] = b"\x81\xa2ok\xc3";
    const STOP_ONLY: &[u8] = b"\x82\xa2ok\xc3\xa4stop\xc3";
    const STOP_TAIL: &[u8] = b"\xa4stop\xc3";

    fn write_error(w: &mut Writer, e: &Error) {
        w.reset_all();
        let with_message = !e.message().is_empty();
        w.write_map(2)
            .write_str("ok")
            .write_bool(false)
            .write_str("error");
        w.write_map(1 + with_message as usize)
            .write_str("code")
            .write_str(e.code());
        if with_message {
            w.write_str("message").write_str(e.message());
        }
    }

    fn finish_reply(w: &mut Writer, result: Result<Reply>) {
        let reply = match result {
            Ok(r) => r,
            Err(e) => return write_error(w, &e),
        };
        if let Err(e) = w.check() {
            return write_error(w, &e.into());
        }
        let value = w.as_bytes();
        let has_value = !value.is_empty();
        if has_value {
            // The value sits inside the response map: one level is taken.
            let ok = crate::msgpack::walk(value, 0, MAX_DEPTH - 1, false) == Ok(value.len());
            if !ok {
                return write_error(
                    w,
                    &Error::failed("handler wrote a malformed value (not exactly one value)"),
                );
            }
        }
        match reply {
            Reply::Unchanged => {
                w.reset_all();
                w.write_raw(OK_ONLY);
            }
            Reply::Value if !has_value => {
                write_error(
                    w,
                    &Error::failed("handler replied Reply::Value but wrote no value"),
                );
            }
            Reply::Value => {}
            Reply::Stop if has_value => {
                w.all_mut()[0] = 0x83; // one more pair in the top-level fixmap
                w.write_raw(STOP_TAIL);
            }
            Reply::Stop => {
                w.reset_all();
                w.write_raw(STOP_ONLY);
            }
        }
    }

    /// `wasmext_call`: decode the request, run the hook, encode the response.
    pub fn call<P: Plugin>(input: &[u8], state: &mut Option<P>, new: fn() -> P) -> u64 {
        install_panic_hook();
        let plugin = state.get_or_insert_with(new);
        with_output(|w| {
            let req = match parse_request(input) {
                Ok(r) => r,
                Err(e) => return write_error(w, &e),
            };
            let hook = match find_hook::<P>(req.hook, req.data) {
                Some(h) => h,
                None => {
                    let message = format!("no handler for hook '{}'", req.hook);
                    return write_error(w, &Error::new(code::UNHANDLED, message));
                }
            };
            let handler = match hook.handler {
                Some(Handler(f)) => f,
                None => return finish_reply(w, Ok(Reply::Unchanged)),
            };
            w.write_raw(VALUE_PREFIX);
            w.seal();
            let result = {
                let mut call = Call {
                    hook: req.hook,
                    data: req.data,
                    meta: req.meta,
                    out: w,
                };
                handler(plugin, &mut call)
            };
            finish_reply(w, result);
        })
    }

    /// A pattern is an exact name, or a prefix ending in `*`.
    fn pattern_matches(pattern: &str, s: &str) -> bool {
        match pattern.strip_suffix('*') {
            Some(prefix) => s.starts_with(prefix),
            None => pattern == s,
        }
    }

    /// A copy of the output buffer, i.e. the response of the last export
    /// call (native tests read it this way: off wasm, pointers are wider
    /// than the packed i64's half).
    pub fn last_output() -> Vec<u8> {
        OUTPUT.with(|c| {
            let v = c.take();
            let copy = v.clone();
            c.set(v);
            copy
        })
    }
}
