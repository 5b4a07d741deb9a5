//! #mood asks the host's model in JSON mode, #plain without it; each answers the
//! model's text, so a test sees what the Rust SDK sent.

use wasmext::{Call, Completion, Error, Handler, Hook, Plugin, Reply, Result};

#[derive(Default)]
struct Mood;

impl Plugin for Mood {
    const NAME: &'static str = "rust-mood";
    const VERSION: &'static str = "0.1.0";
    const HOOKS: &'static [Hook<Self>] = &[
        Hook::new("output_extension", Handler(Self::mood)).pattern("mood"),
        Hook::new("output_extension", Handler(Self::plain)).pattern("plain"),
    ];
}

impl Mood {
    fn ask(call: &mut Call, json_mode: bool) -> Result<Reply> {
        let mut at = call
            .data()
            .find("answer")?
            .ok_or_else(|| Error::invalid("output_extension data needs an answer"))?;
        let answer = at.read_str()?.to_owned();
        let completion = if json_mode {
            Completion {
                system: Some("Rate the mood as JSON."),
                prompt: &answer,
                max_tokens: Some(64),
                temperature: Some(0.0),
                json_mode: true,
                ..Default::default()
            }
        } else {
            Completion {
                prompt: &answer,
                max_tokens: Some(64),
                ..Default::default()
            }
        };
        let reply = wasmext::llm_complete(&completion).check()?;
        let mut text = reply
            .value()
            .find("text")?
            .ok_or_else(|| Error::invalid("the answer has no text"))?;
        let text = text.read_str()?.to_owned();
        call.reply_str(&text)
    }

    fn mood(&mut self, call: &mut Call) -> Result<Reply> {
        Self::ask(call, true)
    }

    fn plain(&mut self, call: &mut Call) -> Result<Reply> {
        Self::ask(call, false)
    }
}

wasmext::export_plugin!(Mood);
