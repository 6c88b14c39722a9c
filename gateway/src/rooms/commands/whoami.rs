//! `/whoami`: which persona this is and which model it uses.

use super::{Answer, Ctx};

pub(super) fn run(ctx: &Ctx<'_>) -> Answer {
    Answer::text(format!(
        "I'm {} (persona `{}`), answering with {}.",
        ctx.persona_name, ctx.agent, ctx.model
    ))
}
