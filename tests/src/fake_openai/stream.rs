//! Streamed answers on the fake OpenAI (`stream: true`): the reply as SSE chunks, a word at
//! a time with the script's pace (or stalled after some pieces), tool calls as the deltas
//! OpenAI sends, then the usage chunk when asked for and `[DONE]`.

use std::convert::Infallible;

use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::chat::usage_json;
use super::{ChatRequestRecord, Pace, now_secs};

/// The events of a streamed answer, `pace.gap` apart; with `stall_after`, the role and
/// that many pieces, then nothing until the fake stops (the stream then ends unfinished).
pub(super) fn paced(
    events: Vec<Result<Event, Infallible>>,
    pace: Pace,
) -> impl futures::Stream<Item = Result<Event, Infallible>> {
    let limit = pace.stall_after.map(|n| n + 1);
    futures::stream::unfold(
        (events.into_iter().enumerate(), pace, limit),
        |(mut events, mut pace, limit)| async move {
            let (i, event) = events.next()?;
            if limit.is_some_and(|l| i >= l) {
                let _ = pace.shutdown.wait_for(|s| *s).await;
                return None;
            }
            if i > 0 {
                tokio::time::sleep(pace.gap).await;
            }
            Some((event, (events, pace, limit)))
        },
    )
}

/// What every chunk of one streamed answer shares; `usage` is on each chunk (null until
/// the last) only when the request asked for `stream_options.include_usage`.
pub(super) struct ChunkFrame<'a> {
    id: String,
    created: u64,
    model: &'a str,
    pub(super) include_usage: bool,
}

impl<'a> ChunkFrame<'a> {
    pub(super) fn new(record: &'a ChatRequestRecord, request: &Value) -> Self {
        ChunkFrame {
            id: format!("chatcmpl-fake{:06}", record.index),
            created: now_secs(),
            model: &record.model,
            include_usage: request
                .pointer("/stream_options/include_usage")
                .and_then(Value::as_bool)
                .unwrap_or(false),
        }
    }

    pub(super) fn chunk(&self, choices: Value, usage: Value) -> Value {
        let mut c = json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "system_fingerprint": "fp_fake",
            "choices": choices,
        });
        if self.include_usage {
            c["usage"] = usage;
        }
        c
    }
}

/// OpenAI's streamed tool calls: a role chunk, then per call a chunk with its `index`,
/// `id`, `type` and name and an empty `arguments`, then the arguments in pieces (chunks
/// carrying only `index` and `function.arguments`), then `finish_reason: "tool_calls"`,
/// the usage chunk when asked for, and `[DONE]`.
pub(super) fn streamed_tool_calls(
    record: &ChatRequestRecord,
    calls: &[(String, Value)],
    request: &Value,
    usage: (u64, u64),
) -> Response {
    let frame = ChunkFrame::new(record, request);
    let include_usage = frame.include_usage;
    let chunk = |choices: Value, usage: Value| frame.chunk(choices, usage);
    let choice = |delta: Value, finish: Value| json!([{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}]);
    let mut events = vec![chunk(
        choice(
            json!({"role": "assistant", "content": null, "refusal": null}),
            Value::Null,
        ),
        Value::Null,
    )];
    for (i, (name, args)) in calls.iter().enumerate() {
        let head = json!({"tool_calls": [{"index": i, "id": format!("call_fake{:04}_{i}", record.index),
            "type": "function", "function": {"name": name, "arguments": ""}}]});
        events.push(chunk(choice(head, Value::Null), Value::Null));
        let args = args.to_string();
        let cut = args
            .char_indices()
            .nth(args.chars().count() / 2)
            .map_or(0, |(at, _)| at);
        for piece in [&args[..cut], &args[cut..]] {
            let delta = json!({"tool_calls": [{"index": i, "function": {"arguments": piece}}]});
            events.push(chunk(choice(delta, Value::Null), Value::Null));
        }
    }
    events.push(chunk(choice(json!({}), json!("tool_calls")), Value::Null));
    if include_usage {
        events.push(chunk(json!([]), usage_json(usage)));
    }
    let mut sse: Vec<Result<Event, Infallible>> = events
        .into_iter()
        .map(|v| Ok(Event::default().data(v.to_string())))
        .collect();
    sse.push(Ok(Event::default().data("[DONE]")));
    Sse::new(futures::stream::iter(sse)).into_response()
}

/// Splits into pieces of at most three words, keeping the separators, so the pieces
/// concatenate back to the text exactly.
pub(super) fn split_keep_spaces(text: &str) -> Vec<String> {
    let mut pieces = Vec::new();
    let mut current = String::new();
    let mut words_in = 0;
    for part in text.split_inclusive(' ') {
        current.push_str(part);
        words_in += 1;
        if words_in == 3 {
            pieces.push(std::mem::take(&mut current));
            words_in = 0;
        }
    }
    if !current.is_empty() {
        pieces.push(current);
    }
    pieces
}
