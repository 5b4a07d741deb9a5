//! Typed wrappers for the ops beyond config/secret: `state.*` and
//! `event.emit` (minor 0); `http.fetch`, `llm.complete`, `agents.request` and
//! `agents.send` (minor 1). Each goes through [`Request`], which answers
//! `unsupported` locally when the host announced a minor below the op's
//! (SPEC 3.1).

use crate::abi::op;
use crate::host::{Answer, Request};
use crate::writer::{Bin, Encode, Raw, Writer};

/// `http.fetch`: `method` ("GET", "POST", ...) `url`, extra headers and an
/// optional body. Needs the `http` and `http:<host pattern>` grants. The
/// answer's value is `{status, headers, body, url}`.
pub fn http_fetch(
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: Option<&[u8]>,
) -> Answer {
    let mut map = Writer::new();
    map.write_map(headers.len());
    for (name, value) in headers {
        map.write_str(name).write_str(value);
    }
    let mut req = Request::new(op::HTTP_FETCH)
        .arg("url", url)
        .arg("method", method);
    if !headers.is_empty() {
        req = req.arg("headers", &Raw(map.as_bytes()));
    }
    if let Some(body) = body {
        req = req.arg("body", &Bin(body));
    }
    req.send()
}

/// One `llm.complete` request: a prompt, optionally a system message, a model
/// (default: the host's), `max_tokens` and `temperature` (default: the host's),
/// and `json_mode` to ask the model for a JSON object (reference 003's
/// `call_llm(json_mode=True)`). Build it with `..Default::default()`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Completion<'a> {
    pub system: Option<&'a str>,
    pub prompt: &'a str,
    pub model: Option<&'a str>,
    pub max_tokens: Option<u32>,
    pub temperature: Option<f64>,
    pub json_mode: bool,
}

/// `llm.complete` (grant `llm`): the answer's value is `{text, finish_reason,
/// model, usage: {input, output}, cost}`.
pub fn llm_complete(c: &Completion<'_>) -> Answer {
    let mut messages = Writer::new();
    messages.write_array(if c.system.is_some() { 2 } else { 1 });
    if let Some(system) = c.system {
        messages.write_map(2).write_str("role").write_str("system");
        messages.write_str("content").write_str(system);
    }
    messages.write_map(2).write_str("role").write_str("user");
    messages.write_str("content").write_str(c.prompt);
    let mut req = Request::new(op::LLM_COMPLETE).arg("messages", &Raw(messages.as_bytes()));
    if let Some(model) = c.model {
        req = req.arg("model", model);
    }
    if let Some(max_tokens) = c.max_tokens {
        req = req.arg("max_tokens", &max_tokens);
    }
    if let Some(temperature) = c.temperature {
        req = req.arg("temperature", &temperature);
    }
    if c.json_mode {
        req = req.arg("json_mode", &true);
    }
    req.send()
}

/// `agents.request` (grants `agents`, `agents:<pattern>`; turn and step
/// middleware only): `input` is one encoded MessagePack value; the answer's
/// value is the agent's answer. `timeout_ms` None = the host's 15 s.
pub fn agents_request(agent: &str, input: &[u8], timeout_ms: Option<u32>) -> Answer {
    let mut req = Request::new(op::AGENTS_REQUEST)
        .arg("agent", agent)
        .arg("input", &Raw(input));
    if let Some(ms) = timeout_ms {
        req = req.arg("timeout_ms", &ms);
    }
    req.send()
}

/// `agents.send`: like [`agents_request`] without waiting for the answer.
pub fn agents_send(agent: &str, input: &[u8]) -> Answer {
    Request::new(op::AGENTS_SEND)
        .arg("agent", agent)
        .arg("input", &Raw(input))
        .send()
}

/// Where a state op reads and writes. `None` in the wrappers below is the
/// session's scope, the default in every SDK and the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// This session's value.
    Session,
    /// Shared by the plugin's sessions; the only scope a call outside a
    /// session may use.
    Plugin,
}

fn state_request(op: &'static str, scope: Option<Scope>) -> Request<'static> {
    let req = Request::new(op);
    match scope {
        Some(Scope::Session) => req.arg("scope", "session"),
        Some(Scope::Plugin) => req.arg("scope", "plugin"),
        None => req,
    }
}

/// `state.get` (grant `state`): the answer's value is the stored value; a
/// missing key answers `not_found`.
pub fn state_get(key: &str, scope: Option<Scope>) -> Answer {
    state_request(op::STATE_GET, scope).arg("key", key).send()
}

/// `state.set` (grant `state`) of any encodable value; `ttl` in seconds,
/// `None` for the host's.
pub fn state_set<T: Encode + ?Sized>(
    key: &str,
    value: &T,
    scope: Option<Scope>,
    ttl: Option<u32>,
) -> Answer {
    let req = state_request(op::STATE_SET, scope)
        .arg("key", key)
        .arg("value", value);
    match ttl {
        Some(seconds) => req.arg("ttl", &seconds).send(),
        None => req.send(),
    }
}

/// `state.delete` (grant `state`): the answer's value is whether the key existed.
pub fn state_delete(key: &str, scope: Option<Scope>) -> Answer {
    state_request(op::STATE_DELETE, scope).arg("key", key).send()
}

/// `state.keys` (grant `state`): the answer's value is an array of key strings.
pub fn state_keys(prefix: Option<&str>, scope: Option<Scope>) -> Answer {
    let req = state_request(op::STATE_KEYS, scope);
    match prefix {
        Some(prefix) => req.arg("prefix", prefix).send(),
        None => req.send(),
    }
}

/// `event.emit` (grants `events`, `emit:<pattern>`) of any encodable payload;
/// the answer's value is how many subscribers it reached.
pub fn emit<T: Encode + ?Sized>(topic: &str, payload: &T) -> Answer {
    Request::new(op::EVENT_EMIT)
        .arg("topic", topic)
        .arg("payload", payload)
        .send()
}
