//! The access records on both backends: the limits of a code (three waiting, one per
//! sender per ten minutes, an hour's life), approval and its lockout, revoking. The clock
//! is an argument, so an hour passes without waiting for it.

use troupe_connectors::{AgentId, Platform};

use super::test_support::{Kind, on_both_backends, run_with_store as run};
use super::{Approval, Asker, Store, Telling};
use crate::pairing::{LOCKOUT_MS, REISSUE_MS, TTL_MS};

const T0: i64 = 1_800_000_000_000;

fn asker<'a>(agent: &'a AgentId, user: &'a str, now_ms: i64) -> Asker<'a> {
    Asker {
        agent_id: agent,
        platform: Platform::Telegram,
        user_id: user,
        user_name: "Someone",
        now_ms,
    }
}

on_both_backends!(codes_keep_their_limits_and_approval_its_lockout);

async fn codes_keep_their_limits_and_approval_its_lockout(store: Store) {
    let tess = AgentId::new("tess");
    let first = store
        .access_tell(asker(&tess, "1", T0), Telling::Code, REISSUE_MS)
        .await
        .unwrap();
    let first = first.expect("a code");
    // The same sender within ten minutes: no new code.
    let again = store
        .access_tell(asker(&tess, "1", T0 + 1), Telling::Code, REISSUE_MS)
        .await
        .unwrap();
    assert_eq!(again, None);
    // Three more senders: the first code is dropped, three wait.
    for (i, user) in ["2", "3", "4"].iter().enumerate() {
        let told = store
            .access_tell(
                asker(&tess, user, T0 + 10 + i as i64),
                Telling::Code,
                REISSUE_MS,
            )
            .await
            .unwrap();
        assert!(told.is_some());
    }
    let (pending, _) = store.access_list(Some(&tess), T0 + 100).await.unwrap();
    assert_eq!(pending.len(), 3);
    assert!(pending.iter().all(|p| p.user_id != "1"));
    let dropped = store
        .access_approve(Some(&first), None, "s", "t", T0 + 100)
        .await
        .unwrap();
    assert_eq!(dropped, Approval::Refused);

    // Another persona's code is refused for this one.
    let dot = AgentId::new("dot");
    let dots = store
        .access_tell(asker(&dot, "9", T0), Telling::Code, REISSUE_MS)
        .await
        .unwrap()
        .unwrap();
    let other = store
        .access_approve(Some(&dots), Some(&tess), "s", "t", T0 + 200)
        .await
        .unwrap();
    assert_eq!(other, Approval::Refused);

    // Five wrong approvals lock the scope; the right code is refused until the lockout ends,
    // and another scope is not locked.
    let (pending, _) = store.access_list(Some(&tess), T0 + 300).await.unwrap();
    let right = pending[0].code.clone();
    for i in 0..3 {
        let wrong = store
            .access_approve(Some("ZZZZZZZZ"), None, "s", "t", T0 + 300 + i)
            .await
            .unwrap();
        assert_eq!(wrong, Approval::Refused);
    }
    let locked = store
        .access_approve(Some(&right), None, "s", "t", T0 + 400)
        .await
        .unwrap();
    assert_eq!(
        locked,
        Approval::LockedOut {
            until_ms: T0 + 302 + LOCKOUT_MS
        }
    );
    let elsewhere = store
        .access_approve(Some(&right), Some(&tess), "other", "t", T0 + 500)
        .await
        .unwrap();
    let Approval::Approved(approved) = elsewhere else {
        panic!("{elsewhere:?}")
    };
    assert_eq!(approved.agent_id.as_str(), "tess");
    assert!(
        store
            .access_approved(&tess, &approved.subject)
            .await
            .unwrap()
    );
    assert!(
        !store
            .access_approved(&dot, &approved.subject)
            .await
            .unwrap()
    );

    // An hour on, an old code has expired; a revoked sender is a stranger again.
    let (pending, _) = store
        .access_list(Some(&tess), T0 + TTL_MS + 20)
        .await
        .unwrap();
    assert!(pending.is_empty(), "{pending:?}");
    assert_eq!(
        store.access_revoke(None, &approved.subject).await.unwrap(),
        1
    );
    assert!(
        !store
            .access_approved(&tess, &approved.subject)
            .await
            .unwrap()
    );
    let user = approved.subject.split_once(':').unwrap().1.to_string();
    let anew = store
        .access_tell(asker(&tess, &user, T0 + 600), Telling::Code, REISSUE_MS)
        .await
        .unwrap();
    assert!(anew.is_some(), "a revoked sender gets a code again");
}
