//! What `POST /v1/chat/completions` answers, in OpenAI's shapes: a `chat.completion`, or
//! server-sent events of `chat.completion.chunk`s ending with `data: [DONE]`, the last
//! chunk carrying `usage` when `stream_options.include_usage` asks for it.
//!
//! A reply the model writes live (`http::live`, `TROUPE_STREAM`) is sent as its pieces come;
//! one that came whole (a retry answered from the journal, a provider that does not
//! stream, an answer of another replica) is cut into word-sized deltas, so every client
//! that reads a stream works the same (docs/openai.md).

use axum::body::Body;
use axum::http::HeaderValue;
use axum::response::{IntoResponse, Response};

use super::super::live::event_stream;
use serde::Serialize;
use serde_json::json;

/// The reply to send, in whichever shape the client asked for.
pub(super) struct Reply {
    /// `chatcmpl-` and the message's id: the same for a retried request.
    pub(super) id: String,
    pub(super) model: String,
    pub(super) created: i64,
    pub(super) text: String,
    pub(super) usage: Usage,
    /// Why the persona did not answer (a muted room): sent as `x-troupe-ignored`.
    pub(super) ignored: Option<String>,
}

/// OpenAI's `usage`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub(super) struct Usage {
    pub(super) prompt_tokens: u32,
    pub(super) completion_tokens: u32,
    pub(super) total_tokens: u32,
}

impl Usage {
    pub(super) fn new(prompt_tokens: u32, completion_tokens: u32) -> Self {
        Usage {
            prompt_tokens,
            completion_tokens,
            total_tokens: prompt_tokens.saturating_add(completion_tokens),
        }
    }
}

impl Reply {
    /// The `chat.completion` object.
    pub(super) fn completion(self) -> Response {
        let body = json!({
            "id": self.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "system_fingerprint": null,
            "choices": [{
                "index": 0,
                "message": {"role": "assistant", "content": self.text, "refusal": null},
                "logprobs": null,
                "finish_reason": "stop",
            }],
            "usage": self.usage,
        });
        with_ignored(axum::Json(body).into_response(), self.ignored.as_deref())
    }

    /// The reply as server-sent events: the role, the text in word-sized deltas, the
    /// finish, `usage` when asked for, and `[DONE]`. For a reply that was not written live
    /// (it came whole: a reply recorded before, a provider that does not stream).
    pub(super) fn stream(self, include_usage: bool) -> Response {
        let chunks = Chunks {
            id: self.id.clone(),
            model: self.model.clone(),
            created: self.created,
            include_usage,
        };
        let mut frames = vec![chunks.role()];
        for piece in self.text.split_inclusive(char::is_whitespace) {
            frames.push(chunks.content(piece));
        }
        frames.extend(chunks.end(self.usage));
        let body = Body::from_stream(futures::stream::iter(
            frames.into_iter().map(Ok::<_, std::convert::Infallible>),
        ));
        with_ignored(event_stream(body), self.ignored.as_deref())
    }
}

/// The `chat.completion.chunk` frames of one streamed completion.
#[derive(Clone)]
pub(super) struct Chunks {
    pub(super) id: String,
    pub(super) model: String,
    pub(super) created: i64,
    pub(super) include_usage: bool,
}

impl Chunks {
    fn frame(&self, choices: serde_json::Value, usage: Option<serde_json::Value>) -> String {
        let mut c = json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "system_fingerprint": null,
            "choices": choices,
        });
        if self.include_usage {
            c["usage"] = usage.unwrap_or(serde_json::Value::Null);
        }
        format!("data: {c}\n\n")
    }

    fn choice(&self, delta: serde_json::Value, finish: Option<&str>) -> String {
        self.frame(
            json!([{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}]),
            None,
        )
    }

    /// The first chunk: the assistant's role.
    pub(super) fn role(&self) -> String {
        self.choice(json!({"role": "assistant", "content": ""}), None)
    }

    /// A piece of the text.
    pub(super) fn content(&self, piece: &str) -> String {
        self.choice(json!({"content": piece}), None)
    }

    /// The finish, `usage` when asked for, and `[DONE]`.
    pub(super) fn end(&self, usage: Usage) -> Vec<String> {
        let mut frames = vec![self.choice(json!({}), Some("stop"))];
        if self.include_usage {
            frames.push(self.frame(json!([]), Some(json!(usage))));
        }
        frames.push("data: [DONE]\n\n".to_string());
        frames
    }

    /// An error after the stream began, in OpenAI's shape (the SDKs raise it), then `[DONE]`.
    pub(super) fn error(&self, error: serde_json::Value) -> Vec<String> {
        vec![format!("data: {error}\n\n"), "data: [DONE]\n\n".to_string()]
    }
}

fn with_ignored(mut response: Response, ignored: Option<&str>) -> Response {
    if let Some(value) = ignored.and_then(|r| HeaderValue::from_str(r).ok()) {
        response.headers_mut().insert("x-troupe-ignored", value);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::header;

    fn reply() -> Reply {
        Reply {
            id: "chatcmpl-1".into(),
            model: "ada".into(),
            created: 7,
            text: "Hello there, friend.".into(),
            usage: Usage::new(10, 4),
            ignored: None,
        }
    }

    #[tokio::test]
    async fn the_chunks_join_to_the_reply_and_the_last_carries_usage() {
        let response = reply().stream(true);
        assert_eq!(
            response.headers()[header::CONTENT_TYPE],
            "text/event-stream"
        );
        let body = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .unwrap();
        let body = String::from_utf8(body.to_vec()).unwrap();
        let datas: Vec<&str> = body
            .split("\n\n")
            .filter_map(|e| e.strip_prefix("data: "))
            .collect();
        assert_eq!(*datas.last().unwrap(), "[DONE]");
        let chunks: Vec<serde_json::Value> = datas[..datas.len() - 1]
            .iter()
            .map(|d| serde_json::from_str(d).unwrap())
            .collect();
        let text: String = chunks
            .iter()
            .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
            .collect();
        assert_eq!(text, "Hello there, friend.");
        let last = chunks.last().unwrap();
        assert_eq!(last["choices"], json!([]));
        assert_eq!(last["usage"]["total_tokens"], 14);
        assert!(
            chunks[..chunks.len() - 1]
                .iter()
                .all(|c| c["usage"].is_null())
        );
        assert_eq!(
            chunks[chunks.len() - 2]["choices"][0]["finish_reason"],
            "stop"
        );
    }
}
