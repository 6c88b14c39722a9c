//! Linking on both backends, with the time given: a code expires, wrong entries lock,
//! a third person's entry joins nothing until that side confirms, and unlinking undoes.

use troupe_connectors::{AgentId, Platform, UserId};

use super::*;
use crate::people::codes::{MAX_TRIES, TRY_WINDOW_MS};
use crate::storage::test_support::{Kind, on_both_backends, run_with_store as run};
use crate::storage::{Account, Store};

const T0: i64 = 1_700_000_000_000;

fn agent() -> AgentId {
    AgentId::new("tess")
}

fn tg(user: &str) -> Account {
    Account::new(Platform::Telegram, &UserId::new(user))
}

fn dc(user: &str) -> Account {
    Account::new(Platform::Discord, &UserId::new(user))
}

on_both_backends!(
    a_code_links_two_accounts_once_confirmed,
    a_code_expires_after_ten_minutes,
    five_wrong_codes_lock_entry_until_the_window_ends,
    unlinking_leaves_each_account_its_own_person,
);

async fn a_code_links_two_accounts_once_confirmed(store: Store) {
    let (a, sam, eve) = (agent(), tg("sam"), dc("eve"));
    let code = issue(&store, &a, &sam, T0).await.unwrap();
    // A third person who saw the code is shown whom it joins, and nothing is linked.
    let entered = enter(&store, &a, &eve, &code.to_lowercase(), T0 + 1)
        .await
        .unwrap();
    assert!(
        matches!(&entered, Entered::Joins { issuer, .. } if *issuer == sam),
        "{entered:?}"
    );
    assert!(
        !store
            .person_of(&a, Platform::Telegram, &sam.user_id)
            .await
            .unwrap()
            .is_linked()
    );
    // Sam's own Discord account enters it after, and is the one who may confirm.
    let me = dc("sam-d");
    assert_eq!(
        enter(&store, &a, &sam, &code, T0 + 2).await.unwrap(),
        Entered::OwnCode
    );
    enter(&store, &a, &me, &code, T0 + 3).await.unwrap();
    assert_eq!(confirm(&store, &a, &eve, T0 + 4).await.unwrap(), None);
    assert_eq!(
        confirm(&store, &a, &me, T0 + 5).await.unwrap(),
        Some(sam.clone())
    );
    let person = crate::people::person_of(&store, &a, Platform::Discord, &me.user_id)
        .await
        .unwrap();
    assert!(person.id.starts_with("person:"), "{}", person.id);
    assert_eq!(person.accounts, vec![me.clone(), sam.clone()]);
    let same = store
        .person_of(&a, Platform::Telegram, &sam.user_id)
        .await
        .unwrap();
    assert_eq!(same, person);
    let listed = crate::people::linked_accounts(&store, &a, &person.id)
        .await
        .unwrap();
    assert_eq!(listed.len(), 2);
    // The code is used up; another persona knows nothing of the link.
    assert_eq!(
        enter(&store, &a, &eve, &code, T0 + 6).await.unwrap(),
        Entered::Refused
    );
    let other = AgentId::new("rosa");
    assert!(
        !store
            .person_of(&other, Platform::Telegram, &sam.user_id)
            .await
            .unwrap()
            .is_linked()
    );
    // An unlinked account's person is itself.
    let alone = store
        .person_of(&a, Platform::Discord, &eve.user_id)
        .await
        .unwrap();
    assert_eq!(alone.id, "discord:eve");
    let listed = crate::people::linked_accounts(&store, &a, &alone.id)
        .await
        .unwrap();
    assert_eq!(listed, vec![(Platform::Discord, UserId::new("eve"))]);
}

async fn a_code_expires_after_ten_minutes(store: Store) {
    let (a, sam, me) = (agent(), tg("sam"), dc("sam-d"));
    let code = issue(&store, &a, &sam, T0).await.unwrap();
    let late = T0 + codes::CODE_TTL_MS;
    assert_eq!(
        enter(&store, &a, &me, &code, late).await.unwrap(),
        Entered::Refused
    );
    // Entered in time but confirmed too late: nothing is linked.
    let code = issue(&store, &a, &sam, T0).await.unwrap();
    enter(&store, &a, &me, &code, late - 1).await.unwrap();
    assert_eq!(confirm(&store, &a, &me, late).await.unwrap(), None);
    assert!(
        !store
            .person_of(&a, Platform::Telegram, &sam.user_id)
            .await
            .unwrap()
            .is_linked()
    );
    // A new /link replaces the old code.
    let old = issue(&store, &a, &sam, T0).await.unwrap();
    let new = issue(&store, &a, &sam, T0).await.unwrap();
    if old != new {
        assert_eq!(
            enter(&store, &a, &me, &old, T0 + 1).await.unwrap(),
            Entered::Refused
        );
    }
    assert!(matches!(
        enter(&store, &a, &me, &new, T0 + 1).await.unwrap(),
        Entered::Joins { .. }
    ));
}

async fn five_wrong_codes_lock_entry_until_the_window_ends(store: Store) {
    let (a, sam, guesser) = (agent(), tg("sam"), dc("guesser"));
    let code = issue(&store, &a, &sam, T0).await.unwrap();
    let wrong = if code == "AAAAAAAA" {
        "BBBBBBBB"
    } else {
        "AAAAAAAA"
    };
    for i in 1..MAX_TRIES {
        let got = enter(&store, &a, &guesser, wrong, T0 + i).await.unwrap();
        assert_eq!(got, Entered::Refused, "try {i}");
    }
    // The fifth wrong entry locks; then even the right code is refused, look-alikes count.
    let got = enter(&store, &a, &guesser, "АBCDEFGH", T0 + MAX_TRIES)
        .await
        .unwrap();
    assert_eq!(got, Entered::Locked { minutes: 10 });
    let got = enter(&store, &a, &guesser, &code, T0 + 100).await.unwrap();
    assert!(matches!(got, Entered::Locked { .. }), "{got:?}");
    assert_eq!(confirm(&store, &a, &guesser, T0 + 101).await.unwrap(), None);
    // Another account is not locked by the guesser; the guesser is again after the window.
    let me = dc("sam-d");
    assert!(matches!(
        enter(&store, &a, &me, &code, T0 + 102).await.unwrap(),
        Entered::Joins { .. }
    ));
    let code = issue(&store, &a, &sam, T0 + TRY_WINDOW_MS).await.unwrap();
    let got = enter(&store, &a, &guesser, &code, T0 + TRY_WINDOW_MS + 1)
        .await
        .unwrap();
    assert!(matches!(got, Entered::Joins { .. }), "{got:?}");
}

async fn link(store: &Store, issuer: &Account, joining: &Account, at: i64) {
    let a = agent();
    let code = issue(store, &a, issuer, at).await.unwrap();
    enter(store, &a, joining, &code, at).await.unwrap();
    assert_eq!(
        confirm(store, &a, joining, at).await.unwrap().as_ref(),
        Some(issuer)
    );
}

async fn unlinking_leaves_each_account_its_own_person(store: Store) {
    let a = agent();
    let (sam, me, third) = (tg("sam"), dc("sam-d"), tg("sam-2"));
    link(&store, &sam, &me, T0).await;
    assert_eq!(
        enter(
            &store,
            &a,
            &me,
            &issue(&store, &a, &sam, T0).await.unwrap(),
            T0
        )
        .await
        .unwrap(),
        Entered::AlreadyLinked
    );
    link(&store, &me, &third, T0).await;
    let person = store
        .person_of(&a, Platform::Telegram, &third.user_id)
        .await
        .unwrap();
    assert_eq!(person.accounts.len(), 3);
    assert_eq!(unlink(&store, &a, &third).await.unwrap().len(), 2);
    assert!(
        !store
            .person_of(&a, Platform::Telegram, &third.user_id)
            .await
            .unwrap()
            .is_linked()
    );
    let rest = store
        .person_of(&a, Platform::Telegram, &sam.user_id)
        .await
        .unwrap();
    assert_eq!(rest.accounts, vec![me.clone(), sam.clone()]);
    assert_eq!(store.linked_people(&a).await.unwrap(), vec![rest]);
    assert_eq!(unlink(&store, &a, &me).await.unwrap(), vec![sam.clone()]);
    // A person left with one account is no longer linked; unlinking again does nothing.
    assert!(
        !store
            .person_of(&a, Platform::Telegram, &sam.user_id)
            .await
            .unwrap()
            .is_linked()
    );
    assert!(unlink(&store, &a, &sam).await.unwrap().is_empty());
    assert!(store.linked_people(&a).await.unwrap().is_empty());
}
