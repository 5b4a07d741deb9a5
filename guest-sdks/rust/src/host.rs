//! Layer 2, host services: logging, host calls whose answers come back
//! checked and decoded, and the memory the guest and host hand each other
//! (SPEC 1.4).

use std::alloc::{self, Layout};
use std::cell::{Cell, RefCell};

use crate::abi::{code, op};
use crate::msgpack::{self, Reader, MAX_DEPTH};
use crate::writer::{Encode, Writer};
use crate::{raw, Error};

/// Log levels of the `log` import.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[repr(i32)]
pub enum Level {
    Trace = 0,
    Debug = 1,
    Info = 2,
    Warn = 3,
    Error = 4,
}

/// Log one line of text through the direct `log` import. The host cuts it
/// to `max_log_line_bytes` and replaces control characters.
pub fn log(level: Level, text: &str) {
    let len = text.len().min(u32::MAX as usize) as u32;
    // SAFETY: the text is readable for `len` bytes; the host copies it.
    unsafe { raw::log(level as i32, text.as_ptr(), len) }
}

/// `log!(Level::Info, "x = {}", x)`: format, then [`log()`](fn@log).
#[macro_export]
macro_rules! log {
    ($level:expr, $($arg:tt)+) => {
        $crate::log($level, &::std::format!($($arg)+))
    };
}

thread_local! {
    /// The last region `wasmext_alloc` handed out: during a host call, the
    /// region of the answer, whose allocated size the guest needs to free it.
    static LAST_ALLOC: Cell<(usize, usize)> = const { Cell::new((0, 0)) };
    /// The minor version the host announced at registration.
    static HOST_MINOR: Cell<u32> = const { Cell::new(0) };
    static PLUGIN_ID: RefCell<String> = const { RefCell::new(String::new()) };
    /// Requests stay guest-owned and the host copies them before it
    /// returns, so one buffer serves every request.
    static REQUEST: Cell<Vec<u8>> = const { Cell::new(Vec::new()) };
}

/// All regions are 8-aligned (SPEC 1.1); a size of 0 still gets a region.
fn region_layout(size: usize) -> Option<Layout> {
    Layout::from_size_align(size.max(1), 8).ok()
}

/// Backs the `wasmext_alloc` export.
pub(crate) fn alloc_for_host(size: u32) -> u32 {
    let layout = match region_layout(size as usize) {
        Some(l) => l,
        None => return 0,
    };
    // SAFETY: the layout has a non-zero size.
    let ptr = unsafe { alloc::alloc(layout) };
    if ptr.is_null() {
        return 0;
    }
    LAST_ALLOC.with(|c| c.set((ptr as usize, layout.size())));
    ptr as usize as u32
}

/// How many bytes of answer the SDK's answer region holds (SPEC 1.4.1).
pub(crate) const ANSWER_AREA_SIZE: usize = 1024;

#[repr(C, align(8))]
struct AnswerArea([u8; ANSWER_AREA_SIZE]);

/// The area this SDK declares as its `answer_region` to a host of minor 3
/// (SPEC 1.4.1): the host writes an answer that fits here instead of entering
/// `wasmext_alloc` a second time. It is no region of `wasmext_alloc`, so
/// `host_call` copies an answer found here into an `Answer` of its own at
/// once: an `Answer` never points into it and outlives later host calls.
static mut ANSWER_AREA: AnswerArea = AnswerArea([0; ANSWER_AREA_SIZE]);

/// (ptr, size) of the answer region, for the registration map.
#[allow(unused_unsafe)] // needed by older compilers, redundant for newer ones
pub(crate) fn answer_area() -> (u32, u32) {
    // SAFETY: only the address is taken; nothing here reads or writes the area.
    let ptr = unsafe { core::ptr::addr_of!(ANSWER_AREA) };
    (ptr as usize as u32, ANSWER_AREA_SIZE as u32)
}

/// Backs the `wasmext_free` export: gives back a region of `wasmext_alloc`.
pub(crate) fn free_for_host(ptr: u32, size: u32) {
    if ptr == 0 {
        return;
    }
    if let Some(layout) = region_layout(size as usize) {
        // SAFETY: the host frees only regions it got from wasmext_alloc,
        // with the size it asked for (SPEC 1.4).
        unsafe { alloc::dealloc(ptr as usize as *mut u8, layout) }
    }
}

pub(crate) fn set_registration(minor: u32, plugin_id: &str) {
    HOST_MINOR.with(|c| c.set(minor));
    PLUGIN_ID.with(|c| {
        let mut id = c.borrow_mut();
        id.clear();
        id.push_str(plugin_id);
    });
}

/// The ABI minor the host announced at registration (0 before it).
pub fn host_abi_minor() -> u32 {
    HOST_MINOR.with(|c| c.get())
}

/// The plugin id the host announced at registration ("" before it).
pub fn plugin_id() -> String {
    PLUGIN_ID.with(|c| c.borrow().clone())
}

/// A host_call answer region: it belongs to the guest (SPEC 1.4), which
/// frees it with the size `wasmext_alloc` gave it.
struct HostRegion {
    ptr: *mut u8,
    len: usize,
    size: usize,
}

impl Drop for HostRegion {
    fn drop(&mut self) {
        if let Some(layout) = region_layout(self.size) {
            // SAFETY: ptr came from alloc_for_host with exactly this layout.
            unsafe { alloc::dealloc(self.ptr, layout) }
        }
    }
}

enum Bytes {
    Host(HostRegion),
    Owned(Vec<u8>),
}

impl Bytes {
    fn get(&self) -> &[u8] {
        match self {
            // SAFETY: the region is ours, at least `len` bytes, and written
            // by the host before host_call returned.
            Bytes::Host(r) => unsafe { core::slice::from_raw_parts(r.ptr, r.len) },
            Bytes::Owned(v) => v,
        }
    }
}

type Span = (usize, usize);

/// The host's answer to one host call: `{"ok": true, "value": v}` or
/// `{"ok": false, "error": {"code", "message"}}`. It owns the answer's
/// memory and frees it when dropped.
///
/// A missing or malformed answer is made into an `internal` error on the
/// guest side, so an `Answer` always has one of the two shapes.
pub struct Answer {
    bytes: Bytes,
    ok: bool,
    value: Span,
    code: Span,
    message: Span,
}

/// The encoded nil that stands in for an absent "value".
const NIL: &[u8] = &[0xc0];

impl Answer {
    /// An error answer made on the guest side.
    pub fn local(code: &str, message: &str) -> Answer {
        let mut w = Writer::new();
        w.write_map(2)
            .write_str("ok")
            .write_bool(false)
            .write_str("error")
            .write_map(2);
        w.write_str("code")
            .write_str(code)
            .write_str("message")
            .write_str(message);
        match w.into_bytes() {
            Ok(v) => Answer::parse(Bytes::Owned(v)).unwrap_or_else(Answer::empty),
            Err(_) => Answer::empty(()),
        }
    }

    /// Decode an answer map from bytes (as `host_call` does with what the
    /// host wrote); a malformed map becomes an `internal` answer.
    pub fn decode(bytes: Vec<u8>) -> Answer {
        Answer::parse(Bytes::Owned(bytes))
            .unwrap_or_else(|()| Answer::local(code::INTERNAL, "malformed host_call answer"))
    }

    /// The last resort when even a local answer cannot be built.
    fn empty(_: ()) -> Answer {
        Answer {
            bytes: Bytes::Owned(Vec::new()),
            ok: false,
            value: (0, 0),
            code: (0, 0),
            message: (0, 0),
        }
    }

    fn parse(bytes: Bytes) -> Result<Answer, ()> {
        let buf = bytes.get();
        let mut r = Reader::new(buf);
        let mut ok = None;
        let mut value = None;
        let mut error = None;
        let n = r.read_map().map_err(drop)?;
        for _ in 0..n {
            let key = r.read_str().map_err(drop)?;
            let start = r.position();
            match key {
                "ok" => ok = Some(r.read_bool().map_err(drop)?),
                "value" => {
                    skip_nested(&mut r).map_err(drop)?;
                    value = Some((start, r.position()));
                }
                "error" => {
                    skip_nested(&mut r).map_err(drop)?;
                    error = Some((start, r.position()));
                }
                _ => skip_nested(&mut r).map_err(drop)?,
            }
        }
        r.finish().map_err(drop)?;
        let ok = ok.ok_or(())?;
        let mut a = Answer {
            bytes: Bytes::Owned(Vec::new()),
            ok,
            value: (0, 0),
            code: (0, 0),
            message: (0, 0),
        };
        if ok {
            a.value = value.unwrap_or((0, 0));
        } else {
            let (s, e) = error.ok_or(())?;
            let err = Reader::new(&buf[s..e]);
            let mut c = err.find("code").map_err(drop)?.ok_or(())?;
            let start = s + c.position();
            c.read_str().map_err(drop)?;
            a.code = (start, s + c.position());
            if let Some(mut m) = err.find("message").map_err(drop)? {
                let start = s + m.position();
                if m.read_str().is_ok() {
                    a.message = (start, s + m.position());
                }
            }
        }
        a.bytes = bytes;
        Ok(a)
    }

    fn span(&self, (s, e): Span) -> &[u8] {
        &self.bytes.get()[s..e]
    }

    fn span_str(&self, span: Span) -> &str {
        if span.1 == 0 {
            return "";
        }
        Reader::new(self.span(span)).read_str().unwrap_or("")
    }

    /// True for `{"ok": true, ...}`.
    pub fn is_ok(&self) -> bool {
        self.ok
    }

    /// The whole answer map as the host sent it.
    pub fn raw(&self) -> &[u8] {
        self.bytes.get()
    }

    /// The encoded value (a nil when the answer has none or failed).
    pub fn value_bytes(&self) -> &[u8] {
        if self.value.1 == 0 {
            NIL
        } else {
            self.span(self.value)
        }
    }

    /// A reader on the value.
    pub fn value(&self) -> Reader<'_> {
        Reader::new(self.value_bytes())
    }

    /// The value as a string; `invalid` if it is something else.
    pub fn value_str(&self) -> Result<&str, Error> {
        Ok(self.value().read_str()?)
    }

    /// The value decoded into a [`crate::Value`].
    pub fn decode_value(&self) -> Result<crate::Value, Error> {
        Ok(self.value().read_value()?)
    }

    /// `error.code` of a failed answer ("" when ok).
    pub fn code(&self) -> &str {
        self.span_str(self.code)
    }

    /// `error.message` of a failed answer ("" when ok or absent).
    pub fn message(&self) -> &str {
        self.span_str(self.message)
    }

    /// True when the host refused with this error code.
    pub fn is(&self, code: &str) -> bool {
        !self.ok && self.code() == code
    }

    /// The refusal as an [`Error`], ready to return from a handler (an ok
    /// answer gives `internal`).
    pub fn error(&self) -> Error {
        if self.ok {
            Error::new(code::INTERNAL, "host_call did not fail")
        } else {
            Error::new(self.code().to_owned(), self.message().to_owned())
        }
    }

    /// `Ok(self)` when the host said ok, else its refusal:
    /// `let a = wasmext::config_get("x").check()?;`.
    pub fn check(self) -> Result<Answer, Error> {
        if self.ok {
            Ok(self)
        } else {
            Err(self.error())
        }
    }
}

impl core::fmt::Debug for Answer {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        if self.ok {
            f.debug_struct("Answer")
                .field("ok", &true)
                .field("value", &self.value_bytes())
                .finish()
        } else {
            f.debug_struct("Answer")
                .field("ok", &false)
                .field("code", &self.code())
                .field("message", &self.message())
                .finish()
        }
    }
}

/// Skip a value nested in a top-level map (one level already used).
pub(crate) fn skip_nested(r: &mut Reader<'_>) -> Result<(), msgpack::Error> {
    r.skip_depth(MAX_DEPTH - 1)
}

#[cfg(target_arch = "wasm32")]
fn in_memory(ptr: u32, len: u32) -> bool {
    let size = core::arch::wasm32::memory_size(0) as u64 * 65536;
    ptr != 0 && ptr as u64 + len as u64 <= size
}

#[cfg(not(target_arch = "wasm32"))]
fn in_memory(_ptr: u32, _len: u32) -> bool {
    false
}

/// Send one encoded request map (`{"op": ..., args}`) to the host and
/// decode its answer. Never fails: no answer, or a malformed one, becomes
/// an `internal` answer made up by the SDK (SPEC 4.2).
pub fn host_call(request: &[u8]) -> Answer {
    let len = match u32::try_from(request.len()) {
        Ok(l) => l,
        Err(_) => return Answer::local(code::LIMIT, "host_call request too large"),
    };
    LAST_ALLOC.with(|c| c.set((0, 0)));
    // SAFETY: the request is readable for `len` bytes; the host copies it.
    let packed = unsafe { raw::host_call(request.as_ptr(), len) };
    if packed == 0 {
        return Answer::local(code::INTERNAL, "host_call delivered no answer");
    }
    let (ptr, len) = (raw::packed_ptr(packed), raw::packed_len(packed));
    let (last_ptr, last_size) = LAST_ALLOC.with(|c| c.replace((0, 0)));
    // Only the region this SDK just handed out is taken over and freed
    // (with the size it has): a wrong free would corrupt the heap, so any
    // other region, the answer region among them, is copied and left alone.
    let bytes = if ptr != 0 && ptr as usize == last_ptr && len as usize <= last_size {
        Bytes::Host(HostRegion {
            ptr: ptr as usize as *mut u8,
            len: len as usize,
            size: last_size,
        })
    } else if in_memory(ptr, len) {
        // SAFETY: the range lies inside linear memory.
        Bytes::Owned(
            unsafe { core::slice::from_raw_parts(ptr as usize as *const u8, len as usize) }
                .to_vec(),
        )
    } else {
        return Answer::local(code::INTERNAL, "host_call answer lies outside memory");
    };
    match bytes {
        Bytes::Owned(v) => Answer::decode(v),
        host => Answer::parse(host)
            .unwrap_or_else(|()| Answer::local(code::INTERNAL, "malformed host_call answer")),
    }
}

/// A host_call request under construction:
/// `Request::new("config.get").arg("key", "greeting").send()`.
#[derive(Debug)]
pub struct Request<'o> {
    op: &'o str,
    args: Writer,
    count: usize,
}

impl<'o> Request<'o> {
    pub fn new(op: &'o str) -> Self {
        Request {
            op,
            args: Writer::new(),
            count: 0,
        }
    }

    /// Add one argument (anything [`Encode`]).
    pub fn arg<T: Encode + ?Sized>(mut self, key: &str, value: &T) -> Self {
        self.args.write_str(key);
        value.encode(&mut self.args);
        self.count += 1;
        self
    }

    /// Send it. An op newer than the minor the host announced is answered
    /// `unsupported` here, without asking the host (SPEC 3.1).
    pub fn send(self) -> Answer {
        if let Some(info) = crate::abi::op_info(self.op) {
            if info.since > host_abi_minor() {
                return Answer::local(code::UNSUPPORTED, "op is newer than the host's ABI minor");
            }
        }
        if self.args.check().is_err() {
            return Answer::local(code::LIMIT, "out of memory building a host_call request");
        }
        let mut w = Writer::reuse(REQUEST.with(|c| c.take()));
        w.reset_all();
        w.write_map(self.count + 1)
            .write_str("op")
            .write_str(self.op)
            .write_raw(self.args.as_bytes());
        let answer = if w.check().is_ok() {
            host_call(w.as_bytes())
        } else {
            Answer::local(code::LIMIT, "out of memory building a host_call request")
        };
        REQUEST.with(|c| c.set(w.take_buf()));
        answer
    }
}

/// `config.get` of one setting: its value, `not_found` if unset, `denied`
/// if sensitive.
pub fn config_get(key: &str) -> Answer {
    Request::new(op::CONFIG_GET).arg("key", key).send()
}

/// `config.get` without a key: the map of all non-sensitive settings.
pub fn config_all() -> Answer {
    Request::new(op::CONFIG_GET).send()
}

/// `secret.get`: a sensitive setting (needs the `secrets` capability).
pub fn secret_get(key: &str) -> Answer {
    Request::new(op::SECRET_GET).arg("key", key).send()
}

/// `abi.info`: the negotiated ABI, the host and the plugin's limits.
pub fn abi_info() -> Answer {
    Request::new(op::ABI_INFO).send()
}
