//! The parts of an elizaOS 2.x character file that 1.x files do not have, read into the same
//! [`super::Character`] (issue 46). A 1.x file never reaches anything here but [`lore`]
//! (whose string entries read as before) and [`documents`] (whose `knowledge` reads as
//! before), so it loads exactly as it did.
//!
//! What 2.x adds, from its `characterSchema` (packages/core/src/schemas/character.ts) and
//! `Character` type (packages/core/src/types/agent.ts), and what troupe does with it:
//! - `documents`, with `knowledge` as its alias (2.x reads `knowledge` only when
//!   `documents` is empty), in both entry shapes (`knowledge::entries`);
//! - `messageExamples` as groups `{ "examples": [...] }` ([`example_group`]);
//! - `lore` entries `{ loreKey, vectorText, content, metadata }` ([`lore`]): their
//!   `content` joins the lore troupe samples into the prompt;
//! - `advancedPlanning` / `advancedMemory` ([`flag`]): accepted; `troupe check` says what
//!   troupe does instead;
//! - `settings.extra` (`settings::settings`) and `settings.telegram.accounts`
//!   (`accounts`).

use std::path::Path;

use super::diag::{Diags, join, unknown_field_message};
use super::json::{Kind, Node, Pos};
use super::knowledge::{self, KnowledgeEntry};
use super::paths::Policy;
use super::values::{boolean, string_list};

/// What troupe does with `advancedPlanning`, said by `troupe check`.
const PLANNING: &str = "accepted; troupe does not run elizaOS's planner: each message gets one \
     reply from one model turn, which calls the persona's tools when it has any (docs/tools.md)";

/// What troupe does with `advancedMemory`, said by `troupe check`.
const MEMORY: &str = "accepted; troupe always keeps its own memory, whatever this says: a \
     summary of each room and facts about the people in it (docs/memory.md)";

/// `advancedPlanning` or `advancedMemory`: the flag, with a warning that says what troupe
/// does with it.
pub(super) fn flag(key_pos: &Pos, key: &str, v: &Node, d: &mut Diags) -> Option<bool> {
    let value = boolean(v, key, d);
    if value.is_some() {
        let what = if key == "advancedPlanning" {
            PLANNING
        } else {
            MEMORY
        };
        d.warn(key_pos, key, what);
    }
    value
}

/// The character's documents: 2.x `documents` when it has entries, else `knowledge` (the
/// 1.x name, and 2.x's alias). A `knowledge` list next to a non-empty `documents` is not
/// read, as in elizaOS 2.x, and a warning says so.
pub(super) fn documents(
    root: &Node,
    cwd: &Path,
    policy: &Policy,
    d: &mut Diags,
) -> Vec<KnowledgeEntry> {
    let present = |key: &str| root.get(key).filter(|v| !matches!(v.kind, Kind::Null));
    let docs = present("documents");
    let has_docs = docs.is_some_and(|v| !matches!(&v.kind, Kind::Array(a) if a.is_empty()));
    match (docs, present("knowledge")) {
        (Some(docs), Some(k)) if has_docs => {
            d.warn(
                &k.pos,
                "knowledge",
                "not read: `documents` is set, and elizaOS 2.x reads `knowledge` (its old \
                 name) only when `documents` is empty",
            );
            knowledge::entries(docs, "documents", cwd, policy, d)
        }
        (Some(docs), None) => knowledge::entries(docs, "documents", cwd, policy, d),
        (_, Some(k)) => knowledge::entries(k, "knowledge", cwd, policy, d),
        (_, None) => Vec::new(),
    }
}

/// A 2.x example group `{ "examples": [...] }` at `path`: its messages; `None` (reported)
/// when it has no list of them.
pub(super) fn example_group<'a>(conv: &'a Node, path: &str, d: &mut Diags) -> Option<&'a [Node]> {
    let members = conv.members()?;
    for m in members.iter().filter(|m| m.key != "examples") {
        d.warn(
            &m.key_pos,
            &join(path, &m.key),
            unknown_field_message(&m.key, &["examples"]),
        );
    }
    match conv.get("examples").map(|e| &e.kind) {
        Some(Kind::Array(msgs)) => Some(msgs.as_slice()),
        Some(_) => {
            let e = conv.get("examples")?;
            d.wrong_type(e, &join(path, "examples"), "a list of messages");
            None
        }
        None => {
            d.error(
                &conv.pos,
                path,
                "expected a conversation: a list of messages, or (elizaOS 2.x) \
                 { \"examples\": [ messages ] }",
            );
            None
        }
    }
}

/// `lore`: strings (v0), or 2.x entries `{ "loreKey", "vectorText", "content", "metadata" }`
/// of which troupe keeps the `content`. troupe samples lore into every prompt, as v0 did;
/// 2.x's lorebook picks entries by their `vectorText` instead, which troupe does not.
pub(super) fn lore(v: &Node, d: &mut Diags) -> Vec<String> {
    let Kind::Array(items) = &v.kind else {
        // Reported as for any list of strings, as before 2.x.
        return string_list(v, "lore", d);
    };
    let mut out = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let path = format!("lore[{i}]");
        match &item.kind {
            Kind::String(s) => out.push(s.clone()),
            Kind::Object(members) => {
                for m in members {
                    if !["loreKey", "vectorText", "content", "metadata"].contains(&m.key.as_str()) {
                        d.warn(
                            &m.key_pos,
                            &join(&path, &m.key),
                            unknown_field_message(
                                &m.key,
                                &["loreKey", "vectorText", "content", "metadata"],
                            ),
                        );
                    }
                }
                match item.get("content").map(|c| &c.kind) {
                    Some(Kind::String(s)) => out.push(s.clone()),
                    Some(_) => {
                        let c = item.get("content").unwrap_or(item);
                        d.wrong_type(c, &join(&path, "content"), "a string");
                    }
                    None => d.error(
                        &item.pos,
                        &path,
                        "a lore entry needs its \"content\": the text the character knows",
                    ),
                }
            }
            _ => d.wrong_type(item, &path, "a string"),
        }
    }
    out
}

#[cfg(test)]
mod tests;
