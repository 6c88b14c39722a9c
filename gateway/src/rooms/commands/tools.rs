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
    let mut text = if tools.names.is_empty() && tools.missing.is_empty() {
        String::from("I may not use tools in this room (settings.troupe.tools opts a group in).")
    } else if tools.names.is_empty() {
        String::from("I have no tools I may use here yet.")
    } else {
        let mut text = String::from("Tools I may use here:");
        for tool in &tools.names {
            text.push_str(&format!("\n- {tool}"));
        }
        text
    };
    // Servers still starting (they connect in the background), failed or refused: their
    // tools are missing from the list, and the admin learns why (issue 43).
    if !tools.missing.is_empty() {
        text.push_str("\nMissing, their tools not offered:");
        for server in &tools.missing {
            text.push_str(&format!("\n- {server}"));
        }
    }
    Answer::text(text)
}
