//! Approving a pairing code and revoking an approval: one path for every way in (an owner's
//! `/approve CODE` in a DM, `POST /api/pairing/approve`, the console, `troupe pairing`).
//! Each way is a scope of its own for the lockout: wrong codes tried by one persona's owners
//! lock approval there, not on the operator's CLI.

use troupe_connectors::AgentId;

use crate::pairing as codes;
use crate::storage::{Approval, Store};

/// Approves `typed` (any case) for `by`, in lockout scope `scope`, for `agent`'s codes only
/// when given. A code that cannot be one (a look-alike letter, the wrong length) is a
/// wrong code like any other.
pub async fn approve(
    store: &Store,
    typed: &str,
    agent: Option<&AgentId>,
    scope: &str,
    by: &str,
    now_ms: i64,
) -> anyhow::Result<Approval> {
    let code = codes::normalize(typed);
    let approval = store
        .access_approve(code.as_deref(), agent, scope, by, now_ms)
        .await?;
    match &approval {
        Approval::Approved(a) => {
            tracing::info!(persona = %a.agent_id, subject = %a.subject, by, "pairing code approved")
        }
        Approval::Refused => tracing::info!(scope, "a wrong pairing code"),
        Approval::LockedOut { .. } => tracing::warn!(scope, "pairing approval is locked out"),
    }
    Ok(approval)
}

/// What the one who approved is told. A wrong code and an expired one read the same, so
/// the answer never says whether a code exists.
pub fn answer(approval: &Approval, now_ms: i64) -> String {
    match approval {
        Approval::Approved(a) => format!(
            "Approved {} ({}) for {}.",
            a.subject, a.user_name, a.agent_id
        ),
        Approval::Refused => "That code is not valid.".to_string(),
        Approval::LockedOut { until_ms } => format!(
            "Too many wrong codes: approval is locked for {} more minutes.",
            ((until_ms - now_ms) / 60_000).max(1)
        ),
    }
}

/// `CODE` when `text` is `/approve CODE` (or `/approve@bot CODE`).
pub fn approve_command(text: &str) -> Option<&str> {
    let text = text.trim();
    let rest = text.strip_prefix("/approve")?;
    let rest = match rest.strip_prefix('@') {
        Some(bot) => bot.split_once(char::is_whitespace).map_or("", |(_, r)| r),
        None if rest.starts_with(char::is_whitespace) || rest.is_empty() => rest,
        None => return None,
    };
    Some(rest.trim())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_approve_command_is_read_with_or_without_the_bot() {
        assert_eq!(approve_command("/approve ABCD2345"), Some("ABCD2345"));
        assert_eq!(
            approve_command(" /approve@tess_bot abcd2345 "),
            Some("abcd2345")
        );
        assert_eq!(approve_command("/approve"), Some(""));
        assert_eq!(approve_command("/approved x"), None);
        assert_eq!(approve_command("hello /approve X"), None);
    }
}
