//! Where a connector keeps the ids of a reply's messages shown while it was written
//! (issue 32): in its `ConnectorState` (the database), under `live:<reply key>`, so that a
//! gateway killed mid-stream and driven again edits those messages rather than posting a
//! second copy. Discord and Telegram share it; each says which ids are its own.

use crate::connector::ConnectorState;
use crate::model::MessageId;

/// The connector state key of a reply's live messages.
fn state_key(key: &str) -> String {
    format!("live:{key}")
}

/// The messages shown live of reply `key` by an earlier run, those `valid` takes.
pub(crate) async fn saved(
    state: &dyn ConnectorState,
    key: &str,
    valid: impl Fn(&str) -> bool,
) -> Vec<MessageId> {
    match state.get(&state_key(key)).await {
        Ok(Some(ids)) => ids
            .split(',')
            .filter(|id| valid(id))
            .map(MessageId::from)
            .collect(),
        _ => Vec::new(),
    }
}

/// Keeps the messages shown live of reply `key` across a restart.
pub(crate) async fn save(state: &dyn ConnectorState, key: &str, ids: &[MessageId]) {
    let ids: Vec<&str> = ids.iter().map(MessageId::as_str).collect();
    if let Err(e) = state.put(&state_key(key), &ids.join(",")).await {
        tracing::warn!(error = %e, "could not keep a streamed message's id");
    }
}

/// The reply `key` is finished (or taken back): nothing to resume.
pub(crate) async fn forget(state: &dyn ConnectorState, key: &str) {
    let _ = state.put(&state_key(key), "").await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::connector::MemoryState;

    #[tokio::test]
    async fn ids_are_kept_read_back_and_forgotten() {
        let state = MemoryState::default();
        save(
            &state,
            "ada:1",
            &[MessageId::from("-5:1"), MessageId::from("-5:2")],
        )
        .await;
        let ids = saved(&state, "ada:1", |id| id.contains(':')).await;
        assert_eq!(ids, vec![MessageId::from("-5:1"), MessageId::from("-5:2")]);
        forget(&state, "ada:1").await;
        assert!(saved(&state, "ada:1", |id| !id.is_empty()).await.is_empty());
    }
}
