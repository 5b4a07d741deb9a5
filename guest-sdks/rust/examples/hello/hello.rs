//! hello: hook "greet" turns the string "Ada" into "Hello, Ada!".

use wasmext::{code, Call, Handler, Hook, Level, Plugin, Reply, Result};

#[derive(Default)]
struct Hello;

impl Plugin for Hello {
    const NAME: &'static str = "hello";
    const VERSION: &'static str = "0.1.0";
    const HOOKS: &'static [Hook<Self>] = &[Hook::new("greet", Handler(Self::greet))];
}

impl Hello {
    fn greet(&mut self, call: &mut Call) -> Result<Reply> {
        let name = call.data_str()?;

        // The host answers with the manifest default; "Hello" covers a host
        // that has no value at all (not_found).
        let setting = wasmext::config_get("greeting");
        let greeting = if setting.is_ok() {
            setting.value_str()?
        } else if setting.is(code::NOT_FOUND) {
            "Hello"
        } else {
            return Err(setting.error());
        };

        let text = format!("{}, {}!", greeting, name);
        wasmext::log(Level::Info, &text);
        call.reply_str(&text)
    }
}

wasmext::export_plugin!(Hello);
