//! A chat call (a reply, a step of a turn with tools, a vision description, a summary, a
//! post's draft): the prompt as a chat request, with the request's tools and the turn's
//! earlier tool steps (`tools.rs`), sent through the account's breaker, one attempt at a
//! time, plain or streamed (`stream.rs`). A call that offered no tools takes none back.

use super::breaker::Failure;
use super::client::{GenaiProvider, completion_of, completion_with};
use super::tools::{calls_of, request};
use super::{Completion, OutageNotice, ProviderError, Reply, ToolCall, ToolRound};
use crate::live::Live;
use crate::persona::Prompt;

impl GenaiProvider {
    /// The chat call: each attempt through the account's breaker, shown in `live` as it is
    /// written when one is given.
    pub(super) async fn chat(
        &self,
        prompt: &Prompt,
        round: Option<ToolRound<'_>>,
        notice: Option<&dyn OutageNotice>,
        live: Option<&Live>,
    ) -> Result<Reply, ProviderError> {
        match live {
            None => {
                self.breaker()
                    .call(notice, || self.attempt(prompt, round))
                    .await
            }
            Some(live) => {
                self.breaker()
                    .call(notice, || self.attempt_live(prompt, round, live))
                    .await
            }
        }
    }

    /// One attempt: the answer whole.
    async fn attempt(
        &self,
        prompt: &Prompt,
        round: Option<ToolRound<'_>>,
    ) -> Result<Reply, Failure> {
        let response = self.exec(request(prompt, round)).await?;
        let calls = calls_of(round, response.tool_calls());
        let text = response.first_text().map(str::trim).unwrap_or("");
        reply_of(completion_of(&response, text.to_string()), calls)
    }

    /// One streamed attempt: the text is shown in `live` as it comes; an answer that ends
    /// asking for tools takes it back (what the model wrote before a call is not the answer).
    async fn attempt_live(
        &self,
        prompt: &Prompt,
        round: Option<ToolRound<'_>>,
        live: &Live,
    ) -> Result<Reply, Failure> {
        let streamed = self.stream_chat(request(prompt, round), live).await?;
        let calls = calls_of(round, &streamed.calls);
        if !calls.is_empty() {
            live.restart();
        }
        let text = streamed.text.trim().to_string();
        reply_of(completion_with(&streamed.usage, text), calls)
    }
}

/// A call that neither asked for a tool nor wrote anything failed.
fn reply_of(completion: Completion, calls: Vec<ToolCall>) -> Result<Reply, Failure> {
    if calls.is_empty() && completion.text.is_empty() {
        return Err(Failure {
            error: ProviderError::Empty,
            transient: false,
        });
    }
    Ok(Reply {
        calls,
        ..Reply::answer(completion)
    })
}
