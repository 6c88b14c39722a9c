//! Streamed answers on the HTTP API (issue 32, docs/media.md "Streaming"): `"stream": true`
//! on `POST /api/agents/{agent}/messages` and on `POST /v1/chat/completions` shows the
//! reply as the model writes it, as server-sent events.
//!
//! The caller's `Live` is registered before the message is journaled (`live::LiveReplies`);
//! the agent that answers it in this process fills it in. Nothing is sent until either the
//! first text is written or the outcome is known: an outcome that comes first (an error, a
//! rate limit, a silent persona, a reply recorded before, an answer of another replica) is
//! answered as without live text, with its own status code, so a client's error handling
//! is the same with and without a stream. Once text flows, the status is 200 and the end
//! of the stream carries the outcome. The reply itself is still journaled and recorded
//! whole, so a client that drops the stream loses nothing: posting again with the same
//! message id gets the recorded reply.

use axum::body::Body;
use axum::http::{HeaderValue, header};
use axum::response::Response;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use tokio::sync::{mpsc, watch};
use troupe_connectors::{AgentId, MessageId};

use crate::live::{LiveReplies, Watching, shown};

/// The conversation's outcome, still to come.
pub(super) type Pending<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// How a streamed conversation started.
pub(super) enum Started<T> {
    /// The outcome came before any text was shown: answered as without live text.
    Done(T),
    /// Text came first: the rest streams.
    Live(Streaming<T>),
}

/// A conversation whose reply is being written.
pub(super) struct Streaming<T> {
    pending: Pending<T>,
    text: watch::Receiver<String>,
    _watching: Watching,
}

/// Starts `converse` with a `Live` registered for `agent`'s reply to `message`, and waits
/// for its first shown text or its outcome, whichever comes first.
pub(super) async fn start<T: Send + 'static>(
    replies: &LiveReplies,
    agent: &AgentId,
    message: &MessageId,
    converse: Pending<T>,
) -> Started<T> {
    let (live, watching) = replies.watch(agent, message);
    let mut text = live.subscribe();
    drop(live);
    let mut pending = converse;
    loop {
        tokio::select! {
            outcome = &mut pending => return Started::Done(outcome),
            changed = text.changed() => {
                // The registry holds the sender for as long as `watching` lives.
                if changed.is_err() {
                    return Started::Done(pending.await);
                }
                if !shown(&text.borrow_and_update()).is_empty() {
                    return Started::Live(Streaming { pending, text, _watching: watching });
                }
            }
        }
    }
}

impl<T: Send + 'static> Streaming<T> {
    /// The stream's response: `delta` frames each new piece of shown text, and `finish`
    /// frames the outcome, given the text already sent.
    pub(super) fn respond(
        self,
        mut delta: impl FnMut(&str) -> String + Send + 'static,
        finish: impl FnOnce(T, &str) -> Vec<String> + Send + 'static,
    ) -> Response {
        let (tx, rx) = mpsc::channel::<String>(32);
        tokio::spawn(async move {
            let Streaming {
                mut pending,
                mut text,
                _watching,
            } = self;
            let mut sent = String::new();
            let mut open = true;
            let outcome = loop {
                let now = shown(&text.borrow_and_update()).to_string();
                // A model call retried after a failure starts its text over: nothing is
                // sent until the new text has passed what was sent.
                if let Some(piece) = now.strip_prefix(sent.as_str()).filter(|p| !p.is_empty()) {
                    if tx.send(delta(piece)).await.is_err() {
                        // The client went away; the reply is recorded all the same.
                        return;
                    }
                    sent = now;
                }
                tokio::select! {
                    biased;
                    outcome = &mut pending => break outcome,
                    changed = text.changed(), if open => open = changed.is_ok(),
                }
            };
            for frame in finish(outcome, &sent) {
                if tx.send(frame).await.is_err() {
                    return;
                }
            }
        });
        let frames = futures::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|f| (Ok::<_, Infallible>(f), rx))
        });
        event_stream(Body::from_stream(frames))
    }
}

/// A `text/event-stream` response of `body`.
pub(super) fn event_stream(body: Body) -> Response {
    let mut response = Response::new(body);
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// One server-sent event named `event`, with `data` as its JSON.
pub(super) fn event(event: &str, data: &serde_json::Value) -> String {
    format!("event: {event}\ndata: {data}\n\n")
}

/// What of `whole` is left to send after `sent` was: the rest, or nothing when the whole
/// does not continue what was sent (a retried call that wrote another text; the final
/// event carries the whole reply for a client to correct itself).
pub(super) fn rest<'a>(whole: &'a str, sent: &str) -> &'a str {
    whole.strip_prefix(sent).unwrap_or("")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn text_that_comes_first_streams_and_the_outcome_ends_it() {
        let replies = LiveReplies::default();
        let agent = AgentId::from("ada");
        let message = MessageId::from("m1");
        let (tx, rx) = tokio::sync::oneshot::channel::<&'static str>();
        let writer = replies.clone();
        let (a, m) = (agent.clone(), message.clone());
        let converse: Pending<&'static str> = Box::pin(async move {
            let live = writer.find(&a, &m).expect("the caller's live reply");
            live.push("Hello");
            rx.await.unwrap_or("lost")
        });
        let Started::Live(streaming) = start(&replies, &agent, &message, converse).await else {
            panic!("the text came first");
        };
        let response = streaming.respond(
            |d| format!("d:{d};"),
            |outcome, sent| vec![format!("end:{outcome}:{sent}")],
        );
        tx.send("done").unwrap();
        let body = axum::body::to_bytes(response.into_body(), 1 << 16)
            .await
            .unwrap();
        assert_eq!(body, "d:Hello;end:done:Hello");
    }

    #[tokio::test]
    async fn an_outcome_before_any_text_is_answered_plainly() {
        let replies = LiveReplies::default();
        let converse: Pending<u8> = Box::pin(async { 7 });
        let started = start(
            &replies,
            &AgentId::from("ada"),
            &MessageId::from("m"),
            converse,
        )
        .await;
        assert!(matches!(started, Started::Done(7)));
    }

    #[test]
    fn the_rest_continues_what_was_sent_or_is_nothing() {
        assert_eq!(rest("Hello there", "Hello"), " there");
        assert_eq!(rest("Goodbye", "Hello"), "");
    }
}
