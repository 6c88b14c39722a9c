//! Waiting on a fake, the same way for every fake: re-check a condition each time the fake
//! publishes a change, up to a deadline, and on timeout say what the fake saw.
//!
//! A fake publishes its changes on a `tokio::sync::watch` channel (a counter of what it
//! got, or a version it bumps after each change once its state lock is released). A wait
//! wakes on each change, never on a timer, so tests need no sleeps; the deadline only
//! bounds a wait that would otherwise hang. A timed-out wait is an `Err` whose text names
//! what was awaited and ends with the fake's [`Diagnose::diagnostics`]; the fakes'
//! `wait_for_*` methods panic with it, their `try_wait_for_*` twins hand it back so a test
//! can add the gateway's logs.

use std::fmt::Display;
use std::time::Duration;

use tokio::sync::watch;

/// How long a test waits for work the gateway does in the background, on its own: a hang
/// guard, not a timing assertion.
pub const WAIT: Duration = Duration::from_secs(60);

/// What a fake shows when a wait on it times out: the requests it got and its state, so
/// that a failing test says what the connector or the gateway actually did.
pub trait Diagnose {
    fn diagnostics(&self) -> String;
}

/// Re-runs `check` after every change published on `changes` until it gives a value, or
/// `timeout` has passed (then it checks once more). A closed channel ends the wait too.
pub async fn until<V, T>(
    mut changes: watch::Receiver<V>,
    timeout: Duration,
    mut check: impl FnMut() -> Option<T>,
) -> Option<T> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        // Mark the current value seen before checking, so a change made during the check
        // wakes the next `changed()` instead of being missed.
        changes.borrow_and_update();
        if let Some(value) = check() {
            return Some(value);
        }
        match tokio::time::timeout_at(deadline, changes.changed()).await {
            Ok(Ok(())) => continue,
            _ => return check(),
        }
    }
}

/// [`until`], with the diagnostic of `fake` on timeout: "expected `expected` within …".
pub async fn until_or_report<F, V, T>(
    fake: &F,
    changes: watch::Receiver<V>,
    timeout: Duration,
    expected: impl Display,
    check: impl FnMut() -> Option<T>,
) -> Result<T, String>
where
    F: Diagnose + ?Sized,
{
    match until(changes, timeout, check).await {
        Some(value) => Ok(value),
        None => Err(report(fake, expected, timeout)),
    }
}

/// The text of a timed-out wait on `fake`.
pub fn report<F: Diagnose + ?Sized>(fake: &F, expected: impl Display, timeout: Duration) -> String {
    format!(
        "expected {expected} within {timeout:?}\n{}",
        fake.diagnostics()
    )
}

/// One line per request, for a fake's diagnostics.
pub fn lines<I, T>(title: &str, items: I) -> String
where
    I: IntoIterator<Item = T>,
    T: Display,
{
    let items: Vec<String> = items.into_iter().map(|i| i.to_string()).collect();
    format!("{title} ({}):\n  {}", items.len(), items.join("\n  "))
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fake;
    impl Diagnose for Fake {
        fn diagnostics(&self) -> String {
            "requests (0):".into()
        }
    }

    #[tokio::test]
    async fn wakes_on_a_change_and_reports_a_timeout() {
        let (tx, rx) = watch::channel(0usize);
        let probe = rx.clone();
        let waiter = tokio::spawn(async move {
            until(rx, Duration::from_secs(30), || {
                (*probe.borrow() >= 2).then_some("two")
            })
            .await
        });
        tx.send_replace(1);
        tx.send_replace(2);
        assert_eq!(waiter.await.unwrap(), Some("two"));

        // Nothing changes: the wait ends at its deadline, with the fake's diagnostics.
        let err = until_or_report(
            &Fake,
            tx.subscribe(),
            Duration::from_millis(50),
            "3 sends",
            || None::<()>,
        )
        .await
        .unwrap_err();
        assert!(err.starts_with("expected 3 sends within 50ms\n"), "{err}");
        assert!(err.ends_with("requests (0):"), "{err}");
    }
}
