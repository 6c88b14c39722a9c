//! Streamed calls (issue 32, `TROUPE_STREAM`): the same chat request as `chat.rs` sends,
//! asked with `stream: true`, each piece of text shown in the turn's [`Live`] as it arrives. The
//! scheduler's turn, the permit, the deadline (for the whole stream, not per piece), the
//! failure's classification and the tokens charged are the plain call's; the breaker
//! retries a call that failed mid-stream from the start, and the `Live` starts over with it.
//! A step of a turn with tools streams the same way: its text is shown as it comes, and a
//! step that ends asking for tools takes its text back (`chat.rs`), so what stays shown is
//! the text written after the last tool step.

use futures::StreamExt;
use genai::chat::{ChatOptions, ChatRequest, ChatStreamEvent};

use super::breaker::Failure;
use super::client::{GenaiProvider, MAX_TOKENS};
use crate::live::Live;

/// What one streamed call returned: the text (shown as it came), the tool calls it asked
/// for (a step of a turn with tools), and the tokens it used.
pub(super) struct Streamed {
    pub text: String,
    pub calls: Vec<genai::chat::ToolCall>,
    pub usage: genai::chat::Usage,
}

impl GenaiProvider {
    /// Sends `request` with `stream: true`: each piece of text goes to `live` as it
    /// arrives (which starts empty), tool calls are gathered whole, and the tokens used are
    /// charged to the account at the end.
    pub(super) async fn stream_chat(
        &self,
        request: ChatRequest,
        live: &Live,
    ) -> Result<Streamed, Failure> {
        live.restart();
        let (turn, _permit) = self.admit().await?;
        // genai asks an OpenAI-compatible server for `stream_options.include_usage` when
        // usage is captured, so a streamed reply is accounted like a whole one.
        let options = ChatOptions::default()
            .with_max_tokens(MAX_TOKENS)
            .with_capture_usage(true)
            .with_capture_tool_calls(true);
        let deadline = tokio::time::Instant::now() + self.timeout();
        let call = self
            .client()
            .exec_chat_stream(&self.target().model, request, Some(&options));
        let mut stream = match tokio::time::timeout_at(deadline, call).await {
            Err(_) => return Err(self.timed_out()),
            Ok(Err(e)) => return Err(self.failed(e)),
            Ok(Ok(response)) => response.stream,
        };
        let mut streamed = Streamed {
            text: String::new(),
            calls: Vec::new(),
            usage: genai::chat::Usage::default(),
        };
        loop {
            let event = match tokio::time::timeout_at(deadline, stream.next()).await {
                Err(_) => return Err(self.timed_out()),
                Ok(None) => break,
                Ok(Some(Err(e))) => return Err(self.failed(inner_error(e))),
                Ok(Some(Ok(event))) => event,
            };
            match event {
                ChatStreamEvent::Chunk(chunk) => {
                    streamed.text.push_str(&chunk.content);
                    live.push(&chunk.content);
                }
                ChatStreamEvent::End(end) => {
                    if let Some(calls) = end.captured_tool_calls() {
                        streamed.calls = calls.into_iter().cloned().collect();
                    }
                    if let Some(captured) = end.captured_usage {
                        streamed.usage = captured;
                    }
                }
                _ => {}
            }
        }
        if let Some(turn) = &turn {
            let usage = &streamed.usage;
            let used = usage.prompt_tokens.unwrap_or(0) + usage.completion_tokens.unwrap_or(0);
            turn.charge(u64::try_from(used).unwrap_or(0));
        }
        Ok(streamed)
    }
}

/// The HTTP error inside a stream's error. genai reports a refused streamed request (a 429,
/// a 5xx) as a `WebStream` error wrapping the `HttpError` with its status and headers: the
/// breaker must see that status to retry, back off and honour `retry-after`, as it does
/// for a plain call.
fn inner_error(error: genai::Error) -> genai::Error {
    match error {
        genai::Error::WebStream {
            model_iden,
            cause,
            error,
        } => match error.downcast::<genai::Error>() {
            Ok(inner) => *inner,
            Err(error) => genai::Error::WebStream {
                model_iden,
                cause,
                error,
            },
        },
        other => other,
    }
}
