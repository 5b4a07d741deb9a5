//! Conformance hooks: every SDK implements the same seven, so one Python
//! suite can check each SDK's MessagePack, memory handling and envelopes.

use wasmext::msgpack::Kind;
use wasmext::{Call, Error, Handler, Hook, Level, Plugin, Reply, Result};

#[derive(Default)]
struct Conformance;

impl Plugin for Conformance {
    const NAME: &'static str = "rust-conformance";
    const VERSION: &'static str = "0.1.0";
    const HOOKS: &'static [Hook<Self>] = &[
        Hook::new("echo", Handler(Self::echo)),
        Hook::new("config", Handler(Self::config)),
        Hook::new("log", Handler(Self::log)),
        Hook::new("host", Handler(Self::host)),
        Hook::new("hosts", Handler(Self::hosts)),
        Hook::new("fail", Handler(Self::fail)),
        Hook::new("unchanged", Handler(Self::unchanged)),
        Hook::new("stop", Handler(Self::stop)),
        Hook::new("fetch", Handler(Self::fetch)),
        Hook::new("llm", Handler(Self::llm)),
        Hook::new("turn", Handler(Self::turn)),
        Hook::new("step", Handler(Self::step)),
        Hook::new("remember", Handler(Self::remember)),
        Hook::new("announce", Handler(Self::announce)),
    ];
}

impl Conformance {
    /// Decodes the data token by token and encodes it again with the SDK
    /// writer, so the reply is the canonical encoding of the same value.
    fn echo(&mut self, call: &mut Call) -> Result<Reply> {
        let mut data = call.data();
        call.out().copy_value(&mut data)?;
        data.finish()?;
        Ok(Reply::Value)
    }

    /// data: a setting name -> its value; a refusal (not_found) is passed on.
    fn config(&mut self, call: &mut Call) -> Result<Reply> {
        let answer = wasmext::config_get(call.data_str()?).check()?;
        call.reply_raw(answer.value_bytes())
    }

    /// data: text -> one info line through the direct log import; value nil.
    fn log(&mut self, call: &mut Call) -> Result<Reply> {
        wasmext::log(Level::Info, call.data_str()?);
        call.reply(&())
    }

    /// data: a request map sent as-is -> the host's whole answer map.
    fn host(&mut self, call: &mut Call) -> Result<Reply> {
        if call.data().peek_kind()? != Kind::Map {
            return Err(Error::invalid("data must be a map"));
        }
        let answer = wasmext::host_call(call.data_bytes());
        call.reply_raw(answer.raw())
    }

    /// data: up to 8 request maps, all sent before any answer is read -> the
    /// array of the host's answers: each must outlive the host calls after it,
    /// wherever the host wrote it (the answer region of minor 3).
    fn hosts(&mut self, call: &mut Call) -> Result<Reply> {
        let mut data = call.data();
        let n = data.read_array()?;
        if n > 8 {
            return Err(Error::invalid("hosts expects up to 8 request maps"));
        }
        let mut answers = Vec::new();
        for _ in 0..n {
            answers.push(wasmext::host_call(data.read_raw()?));
        }
        let out = call.out();
        out.write_array(answers.len());
        for answer in &answers {
            out.write_raw(answer.raw());
        }
        Ok(Reply::Value)
    }

    /// The minor-1 wrappers reply with the host's whole answer map, like
    /// `host`; an answer the SDK made up locally is an error with its code.
    fn whole(call: &mut Call, answer: wasmext::Answer) -> Result<Reply> {
        if answer.raw().is_empty() {
            return Err(answer.error());
        }
        call.reply_raw(answer.raw())
    }

    /// data: url -> http.fetch GET.
    fn fetch(&mut self, call: &mut Call) -> Result<Reply> {
        let answer = wasmext::http_fetch("GET", call.data_str()?, &[], None);
        Self::whole(call, answer)
    }

    /// data: prompt -> llm.complete with max_tokens 50.
    fn llm(&mut self, call: &mut Call) -> Result<Reply> {
        let prompt = call.data_str()?.to_owned();
        let answer = wasmext::llm_complete(&wasmext::Completion {
            prompt: &prompt,
            max_tokens: Some(50),
            ..Default::default()
        });
        Self::whole(call, answer)
    }

    /// data: agent -> agents.request with input "ping".
    fn turn(&mut self, call: &mut Call) -> Result<Reply> {
        let answer = wasmext::agents_request(call.data_str()?, b"\xa4ping", None);
        Self::whole(call, answer)
    }

    /// data: agent -> agents.send with input "ping".
    fn step(&mut self, call: &mut Call) -> Result<Reply> {
        let answer = wasmext::agents_send(call.data_str()?, b"\xa4ping");
        Self::whole(call, answer)
    }

    /// data: key -> state.set of "v:<key>", then state.get of it (session scope).
    fn remember(&mut self, call: &mut Call) -> Result<Reply> {
        let key = call.data_str()?.to_owned();
        let stored = wasmext::state_set(&key, format!("v:{}", key).as_str(), None, None);
        if !stored.is_ok() {
            return Self::whole(call, stored);
        }
        let answer = wasmext::state_get(&key, None);
        Self::whole(call, answer)
    }

    /// data: topic -> event.emit with the payload "hi".
    fn announce(&mut self, call: &mut Call) -> Result<Reply> {
        let answer = wasmext::emit(call.data_str()?, "hi");
        Self::whole(call, answer)
    }

    /// data: text -> an error with code "failed" and that text as message.
    fn fail(&mut self, call: &mut Call) -> Result<Reply> {
        Err(Error::failed(call.data_str()?.to_owned()))
    }

    fn unchanged(&mut self, _call: &mut Call) -> Result<Reply> {
        Ok(Reply::Unchanged)
    }

    /// Replies with the data and asks the host to stop the chain.
    fn stop(&mut self, call: &mut Call) -> Result<Reply> {
        let mut data = call.data();
        call.out().copy_value(&mut data)?;
        Ok(Reply::Stop)
    }
}

wasmext::export_plugin!(Conformance);
