//! `/tools`: the tools the persona may use in this room (issue 33, docs/tools.md), for the
//! room's admins: which tools a room has is the operator's and the author's business, so a
//! stranger in a group does not get the list.

use super::{Answer, Ctx};
use crate::rooms::{Steering, not_allowed};

pub(super) fn run(ctx: &Ctx<'_>) -> Answer {
    if ctx.steering == Steering::Refused {
        return Answer::text(not_allowed(ctx.platform));
    }
    let Some(tools) = &ctx.tools else {
        return Answer::text("I have no tools.");
    };
    if tools.is_empty() {
        return Answer::text(
            "I may not use tools in this room (settings.troupe.tools opts a group in).",
        );
    }
    let mut text = String::from("Tools I may use here:\n");
    for tool in tools {
        text.push_str(&format!("- {tool}\n"));
    }
    Answer::text(text.trim_end())
}
