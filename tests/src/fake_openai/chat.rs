//! `POST /v1/chat/completions` on the fake OpenAI: the request read and checked as OpenAI
//! checks it (400 with its error body), recorded, then answered by the next script (or the
//! fallback, or a matching script): a whole reply, tool calls, an error status, a hang, or a
//! stream (see [`super::stream`]), with usage counted in words.

use std::convert::Infallible;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::stream::{ChunkFrame, paced, split_keep_spaces, streamed_tool_calls};
use super::{
    ChatMessage, ChatRequestRecord, Outcome, Pace, Script, Shared, bad_request, check_auth,
    default_reply_text, error_response, header_str, now_secs, openai_error,
};

/// The message content as text: a string, or the text parts of an array.
pub(super) fn content_text(content: &Value) -> Result<String, String> {
    match content {
        Value::String(s) => Ok(s.clone()),
        Value::Null => Ok(String::new()),
        Value::Array(parts) => {
            let mut texts = Vec::new();
            for part in parts {
                match part.get("type").and_then(Value::as_str) {
                    Some("text") => match part.get("text").and_then(Value::as_str) {
                        Some(t) => texts.push(t.to_string()),
                        None => return Err("a text content part needs a string 'text'".into()),
                    },
                    // As OpenAI checks it: an image part carries `image_url.url`.
                    Some("image_url") => {
                        if part
                            .pointer("/image_url/url")
                            .and_then(Value::as_str)
                            .is_none()
                        {
                            return Err("an image_url content part needs 'image_url.url'".into());
                        }
                    }
                    Some(_) => {}
                    None => return Err("each content part needs a 'type'".into()),
                }
            }
            Ok(texts.join("\n"))
        }
        _ => Err("'content' must be a string or an array of content parts".into()),
    }
}

/// Checks the request against the protocol: `model` and a non-empty `messages` with known
/// roles. Returns `(model, messages, stream)` or the 400 message.
pub(super) fn parse_chat_request(body: &Value) -> Result<(String, Vec<ChatMessage>, bool), String> {
    let Some(obj) = body.as_object() else {
        return Err("We could not parse the JSON body of your request. (HINT: This likely means you aren't \
                    using your HTTP library correctly. The OpenAI API expects a JSON payload, but what was \
                    sent was not valid JSON.)"
            .into());
    };
    let model = match obj.get("model") {
        Some(Value::String(m)) if !m.is_empty() => m.clone(),
        _ => return Err("you must provide a model parameter".into()),
    };
    let Some(Value::Array(raw)) = obj.get("messages") else {
        return Err("Missing required parameter: 'messages'.".into());
    };
    if raw.is_empty() {
        return Err("[] is too short - 'messages'".into());
    }
    let mut messages = Vec::with_capacity(raw.len());
    for (i, m) in raw.iter().enumerate() {
        let role = m.get("role").and_then(Value::as_str).unwrap_or_default();
        if !matches!(role, "system" | "developer" | "user" | "assistant" | "tool") {
            return Err(format!(
                "Invalid value: '{role}'. Supported values are: 'system', 'assistant', 'user', 'tool', 'developer'. (messages[{i}].role)"
            ));
        }
        let content = match m.get("content") {
            Some(c) => content_text(c).map_err(|e| format!("messages[{i}]: {e}"))?,
            None if role == "assistant" => String::new(),
            None => {
                return Err(format!(
                    "Missing required parameter: 'messages[{i}].content'."
                ));
            }
        };
        if role == "tool" && m.get("tool_call_id").and_then(Value::as_str).is_none() {
            return Err(format!(
                "Missing required parameter: 'messages[{i}].tool_call_id'."
            ));
        }
        messages.push(ChatMessage {
            role: role.to_string(),
            content,
        });
    }
    let stream = match obj.get("stream") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err("'stream' must be a boolean".into()),
    };
    Ok((model, messages, stream))
}

pub(super) fn words(text: &str) -> usize {
    text.split_whitespace().count()
}

pub(super) async fn chat_completions(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let json: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let unauthorized = check_auth(&shared, &headers);
    let parsed = parse_chat_request(&json);
    // Record first (and decide the script under the same lock), then act.
    let (record, script) = record_and_choose(&shared, &headers, &json, &parsed, &unauthorized);
    shared.chat_count.send_replace(record.index);

    if let Some(resp) = unauthorized {
        return resp;
    }
    if let Outcome::BadRequest(msg) = &record.outcome {
        return error_response(400, bad_request(msg));
    }
    let script = script.expect("a script for an accepted request");
    play(&shared, script, &record, &json).await
}

/// Records the request and, for an accepted one, picks its script, under one lock.
fn record_and_choose(
    shared: &Shared,
    headers: &HeaderMap,
    json: &Value,
    parsed: &Result<(String, Vec<ChatMessage>, bool), String>,
    unauthorized: &Option<Response>,
) -> (ChatRequestRecord, Option<Script>) {
    let mut inner = shared.lock();
    let (model, messages, stream) = match parsed {
        Ok((m, msgs, s)) => (m.clone(), msgs.clone(), *s),
        Err(_) => (String::new(), Vec::new(), false),
    };
    let mut record = ChatRequestRecord {
        index: inner.chats.len() + 1,
        authorization: header_str(headers, header::AUTHORIZATION),
        content_type: header_str(headers, header::CONTENT_TYPE),
        user_agent: header_str(headers, header::USER_AGENT),
        body: json.clone(),
        model,
        messages,
        stream,
        outcome: Outcome::Hang,
        received_at: std::time::Instant::now(),
    };
    let script = if unauthorized.is_some() {
        record.outcome = Outcome::Unauthorized;
        None
    } else if let Err(e) = parsed {
        record.outcome = Outcome::BadRequest(e.clone());
        None
    } else {
        let ruled = inner
            .rules
            .iter()
            .find(|(matches, _)| matches(&record))
            .map(|(_, script)| script.clone());
        let script = ruled
            .or_else(|| inner.script.pop_front())
            .or_else(|| inner.fallback.clone())
            .unwrap_or_else(|| Script::Reply(default_reply(shared, &record)));
        // A model calls only tools it was given.
        let script = match script {
            Script::ToolCalls(_) if record.body.get("tools").is_none() => {
                Script::Reply(default_reply(shared, &record))
            }
            script => script,
        };
        record.outcome = outcome_of(&script);
        Some(script)
    };
    inner.chats.push(record.clone());
    (record, script)
}

/// The reply when no script says otherwise: the test's own default, or the fake's.
fn default_reply(shared: &Shared, record: &ChatRequestRecord) -> String {
    match &shared.config.default_reply {
        Some(f) => f(record),
        None => default_reply_text(record),
    }
}

/// Answers as `script` says, waiting first where it says to (a delay, a gate, a hang).
async fn play(
    shared: &Shared,
    mut script: Script,
    record: &ChatRequestRecord,
    json: &Value,
) -> Response {
    loop {
        match script {
            Script::Delay(d, inner) => {
                let mut shutdown = shared.shutdown.subscribe();
                tokio::select! {
                    _ = tokio::time::sleep(d) => {}
                    _ = shutdown.wait_for(|s| *s) => return shutting_down(),
                }
                script = *inner;
            }
            Script::Gated(gate, inner) => {
                let mut shutdown = shared.shutdown.subscribe();
                tokio::select! {
                    _ = gate.passed() => {}
                    _ = shutdown.wait_for(|s| *s) => return shutting_down(),
                }
                script = *inner;
            }
            Script::Hang => {
                let mut shutdown = shared.shutdown.subscribe();
                let _ = shutdown.wait_for(|s| *s).await;
                return shutting_down();
            }
            Script::Status(code, body) => return error_response(code, body),
            Script::RetryAfter(secs) => {
                let mut response = error_response(429, Script::rate_limited_body());
                response
                    .headers_mut()
                    .insert(header::RETRY_AFTER, axum::http::HeaderValue::from(secs));
                return response;
            }
            Script::ToolCalls(calls) => return tool_calls_response(record, &calls, json),
            Script::Reply(text) => {
                let usage = shared.usage_of(record, &text);
                return completion_response(record, &text, json, usage, None);
            }
            Script::Paced {
                text,
                gap,
                stall_after,
            } => return paced_response(shared, record, json, &text, gap, stall_after).await,
        }
    }
}

/// A [`Script::Paced`] answer: streamed a piece at a time, or (stalling, asked for a
/// whole answer) never.
async fn paced_response(
    shared: &Shared,
    record: &ChatRequestRecord,
    json: &Value,
    text: &str,
    gap: std::time::Duration,
    stall_after: Option<usize>,
) -> Response {
    if stall_after.is_some() && !record.stream {
        let _ = shared.shutdown.subscribe().wait_for(|s| *s).await;
        return shutting_down();
    }
    let usage = shared.usage_of(record, text);
    let pace = Pace {
        gap,
        stall_after,
        shutdown: shared.shutdown.subscribe(),
    };
    completion_response(record, text, json, usage, Some(pace))
}

pub(super) fn outcome_of(script: &Script) -> Outcome {
    match script {
        Script::Reply(t) => Outcome::Reply(t.clone()),
        Script::Status(c, b) => Outcome::Status(*c, b.clone()),
        Script::Hang => Outcome::Hang,
        Script::Delay(_, inner) | Script::Gated(_, inner) => outcome_of(inner),
        Script::RetryAfter(_) => Outcome::Status(429, Script::rate_limited_body()),
        Script::ToolCalls(calls) => Outcome::ToolCalls(calls.iter().map(|c| c.0.clone()).collect()),
        Script::Paced { text, .. } => Outcome::Reply(text.clone()),
    }
}

pub(super) fn shutting_down() -> Response {
    error_response(
        503,
        openai_error(
            "The fake OpenAI server is shutting down.",
            "server_error",
            None,
        ),
    )
}

/// The usage the fake reports by default: words of the prompt and of the reply.
pub(super) fn word_usage(record: &ChatRequestRecord, text: &str) -> (u64, u64) {
    (
        words(&record.prompt_text()).max(1) as u64,
        words(text) as u64,
    )
}

pub(super) fn usage_json((prompt, completion): (u64, u64)) -> Value {
    json!({"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion})
}

pub(super) fn completion_response(
    record: &ChatRequestRecord,
    text: &str,
    request: &Value,
    usage: (u64, u64),
    pace: Option<Pace>,
) -> Response {
    let id = format!("chatcmpl-fake{:06}", record.index);
    let created = now_secs();
    if !record.stream {
        let body = json!({
            "id": id,
            "object": "chat.completion",
            "created": created,
            "model": record.model,
            "system_fingerprint": "fp_fake",
            "choices": [{
                "index": 0,
                "message": {"role": "assistant", "content": text, "refusal": null},
                "logprobs": null,
                "finish_reason": "stop"
            }],
            "usage": usage_json(usage),
        });
        return (StatusCode::OK, axum::Json(body)).into_response();
    }

    let frame = ChunkFrame::new(record, request);
    let include_usage = frame.include_usage;
    let chunk = |delta: Value, finish: Value| {
        frame.chunk(
            json!([{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}]),
            Value::Null,
        )
    };
    let mut events = vec![chunk(
        json!({"role": "assistant", "content": "", "refusal": null}),
        Value::Null,
    )];
    for piece in split_keep_spaces(text) {
        events.push(chunk(json!({"content": piece}), Value::Null));
    }
    events.push(chunk(json!({}), json!("stop")));
    if include_usage {
        events.push(frame.chunk(json!([]), usage_json(usage)));
    }
    let mut sse: Vec<Result<Event, Infallible>> = events
        .into_iter()
        .map(|v| Ok(Event::default().data(v.to_string())))
        .collect();
    sse.push(Ok(Event::default().data("[DONE]")));
    match pace {
        None => Sse::new(futures::stream::iter(sse)).into_response(),
        Some(pace) => Sse::new(paced(sse, pace)).into_response(),
    }
}

/// OpenAI's answer with tool calls (non-streaming): `message.content` null, one
/// `tool_calls` entry per call with `function.arguments` as a JSON string.
pub(super) fn tool_calls_response(
    record: &ChatRequestRecord,
    calls: &[(String, Value)],
    request: &Value,
) -> Response {
    let id = |i: usize| format!("call_fake{:04}_{i}", record.index);
    let usage = (words(&record.prompt_text()).max(1) as u64, 10);
    if record.stream {
        return streamed_tool_calls(record, calls, request, usage);
    }
    let tool_calls: Vec<Value> = calls
        .iter()
        .enumerate()
        .map(|(i, (name, args))| {
            json!({
                "id": id(i),
                "type": "function",
                "function": {"name": name, "arguments": args.to_string()},
            })
        })
        .collect();
    let body = json!({
        "id": format!("chatcmpl-fake{:06}", record.index),
        "object": "chat.completion",
        "created": now_secs(),
        "model": record.model,
        "system_fingerprint": "fp_fake",
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": null, "refusal": null, "tool_calls": tool_calls},
            "logprobs": null,
            "finish_reason": "tool_calls"
        }],
        "usage": usage_json(usage),
    });
    (StatusCode::OK, axum::Json(body)).into_response()
}
