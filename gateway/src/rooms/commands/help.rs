//! `/help`: the commands, as every platform's menu lists them.

use troupe_connectors::command::COMMANDS;

use super::{Answer, Ctx};

pub(super) fn run(ctx: &Ctx<'_>) -> Answer {
    let mut text = format!("I'm {}. Commands:\n", ctx.persona_name);
    for (name, what) in COMMANDS {
        text.push_str(&format!("/{name}: {what}\n"));
    }
    text.push_str("You can also just ask me to be quiet, or to talk again.");
    Answer::text(text)
}
