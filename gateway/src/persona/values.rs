//! Typed values read out of the positioned JSON tree: a string, a boolean, a list of
//! strings, a scalar used as text. A value of the wrong type is reported at its position
//! and read as absent, so one pass over a character finds every problem.

use super::diag::Diags;
use super::json::{Kind, Node};

pub(super) fn list_has_wrong_items(v: &Node) -> bool {
    match &v.kind {
        Kind::Array(items) => items.iter().any(|i| !matches!(i.kind, Kind::String(_))),
        _ => false,
    }
}

pub(super) fn string(v: &Node, path: &str, d: &mut Diags) -> Option<String> {
    match &v.kind {
        Kind::String(s) => Some(s.clone()),
        _ => {
            d.wrong_type(v, path, "a string");
            None
        }
    }
}

pub(super) fn boolean(v: &Node, path: &str, d: &mut Diags) -> Option<bool> {
    match &v.kind {
        Kind::Bool(b) => Some(*b),
        Kind::Null => None,
        _ => {
            d.wrong_type(v, path, "true or false");
            None
        }
    }
}

/// A list of strings. A single string gets a hint to wrap it, since elizaOS refuses it too.
pub(super) fn string_list(v: &Node, path: &str, d: &mut Diags) -> Vec<String> {
    match &v.kind {
        Kind::Array(items) => items
            .iter()
            .enumerate()
            .filter_map(|(i, item)| match &item.kind {
                Kind::String(s) => Some(s.clone()),
                _ => {
                    d.wrong_type(item, &format!("{path}[{i}]"), "a string");
                    None
                }
            })
            .collect(),
        Kind::String(_) => {
            d.error(
                &v.pos,
                path,
                "expected a list of strings, found a string (wrap it in [ ])",
            );
            Vec::new()
        }
        _ => {
            d.wrong_type(v, path, "a list of strings");
            Vec::new()
        }
    }
}

/// Secret and id values may be written as strings, numbers or booleans (1.x allows all
/// three); they are used as strings.
pub(super) fn scalar_text(v: &Node) -> Option<String> {
    match &v.kind {
        Kind::String(s) => Some(s.clone()),
        Kind::Number(n) => Some(n.clone()),
        Kind::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}
