//! The fake OpenAI checked on its own, and against what OpenAI documents: reply shapes,
//! scripts, the key check, malformed requests, streaming, hangs, embeddings and models.

use super::chat::content_text;
use super::embeddings::base64;
use super::stream::split_keep_spaces;
use super::*;

#[test]
fn base64_matches_known_vectors() {
    assert_eq!(base64(b""), "");
    assert_eq!(base64(b"f"), "Zg==");
    assert_eq!(base64(b"fo"), "Zm8=");
    assert_eq!(base64(b"foo"), "Zm9v");
    assert_eq!(base64(b"foobar"), "Zm9vYmFy");
}

#[test]
fn split_keeps_the_text() {
    let text = "one two three four five six seven";
    assert_eq!(split_keep_spaces(text).concat(), text);
    assert!(split_keep_spaces(text).len() > 1);
    assert_eq!(split_keep_spaces("").concat(), "");
}

#[test]
fn embeddings_are_deterministic_and_normalized() {
    let a = embedding_for("the lighthouse keeper", 64);
    assert_eq!(a, embedding_for("The lighthouse keeper!", 64));
    let norm: f32 = a.iter().map(|x| x * x).sum::<f32>().sqrt();
    assert!((norm - 1.0).abs() < 1e-5);
    assert_ne!(a, embedding_for("a completely different sentence", 64));
}

#[test]
fn content_parts_are_flattened() {
    let parts = json!([{"type": "text", "text": "a"}, {"type": "image_url", "image_url": {"url": "x"}}, {"type": "text", "text": "b"}]);
    assert_eq!(content_text(&parts).unwrap(), "a\nb");
    assert!(content_text(&json!(3)).is_err());
}

fn client() -> reqwest::Client {
    crate::http_client().no_proxy().build().unwrap()
}

fn chat_body(user: &str) -> Value {
    json!({
        "model": "gpt-4o-mini",
        "messages": [
            {"role": "system", "content": "You are Ada."},
            {"role": "user", "content": user}
        ],
        "temperature": 0.7,
        "max_tokens": 200
    })
}

async fn post(fake: &FakeOpenAi, path: &str, body: &Value, key: Option<&str>) -> (u16, Value) {
    let mut req = client().post(format!("{}{path}", fake.url())).json(body);
    if let Some(k) = key {
        req = req.bearer_auth(k);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap())
}

#[tokio::test]
async fn scripted_then_default_replies_with_the_documented_shape() {
    let fake = FakeOpenAi::start().await;
    let key = fake.api_key().unwrap().to_string();
    fake.push_reply("Hello from the script");

    let (status, body) = post(
        &fake,
        "/v1/chat/completions",
        &chat_body("hi there"),
        Some(&key),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(body["object"], "chat.completion");
    assert_eq!(body["model"], "gpt-4o-mini");
    assert!(body["id"].as_str().unwrap().starts_with("chatcmpl-"));
    assert!(body["created"].is_u64());
    assert_eq!(body["choices"][0]["index"], 0);
    assert_eq!(body["choices"][0]["message"]["role"], "assistant");
    assert_eq!(
        body["choices"][0]["message"]["content"],
        "Hello from the script"
    );
    assert_eq!(body["choices"][0]["finish_reason"], "stop");
    let usage = &body["usage"];
    assert_eq!(
        usage["total_tokens"].as_u64().unwrap(),
        usage["prompt_tokens"].as_u64().unwrap() + usage["completion_tokens"].as_u64().unwrap()
    );

    let (status, body) = post(
        &fake,
        "/v1/chat/completions",
        &chat_body("second question"),
        Some(&key),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(
        body["choices"][0]["message"]["content"],
        "Reply #2 to: second question"
    );

    let reqs = fake.requests();
    assert_eq!(reqs.len(), 2);
    assert_eq!(
        reqs[0].authorization.as_deref(),
        Some(format!("Bearer {key}").as_str())
    );
    assert_eq!(
        reqs[0].messages[0],
        ChatMessage {
            role: "system".into(),
            content: "You are Ada.".into()
        }
    );
    assert_eq!(reqs[0].body["temperature"], 0.7);
    assert_eq!(reqs[0].reply(), Some("Hello from the script"));
    assert!(!reqs[0].stream);
    assert_eq!(fake.last_prompt_text(), "You are Ada.\nsecond question");
    assert_eq!(fake.pending_scripts(), 0);
}

#[tokio::test]
async fn status_script_and_fallback() {
    let fake = FakeOpenAi::start().await;
    let key = fake.api_key().unwrap().to_string();
    fake.push(Script::server_error());
    let (status, body) = post(&fake, "/v1/chat/completions", &chat_body("a"), Some(&key)).await;
    assert_eq!(status, 500);
    assert_eq!(body["error"]["type"], "server_error");
    assert!(body["error"]["message"].is_string());
    assert!(body["error"].get("code").is_some());

    fake.set_fallback(Some(Script::rate_limited()));
    for _ in 0..2 {
        let (status, body) = post(&fake, "/v1/chat/completions", &chat_body("b"), Some(&key)).await;
        assert_eq!(status, 429);
        assert_eq!(body["error"]["code"], "rate_limit_exceeded");
    }
    fake.set_fallback(None);
    let (status, _) = post(&fake, "/v1/chat/completions", &chat_body("c"), Some(&key)).await;
    assert_eq!(status, 200);
    let outcomes: Vec<_> = fake.requests().into_iter().map(|r| r.outcome).collect();
    assert!(matches!(outcomes[0], Outcome::Status(500, _)));
    assert!(matches!(outcomes[3], Outcome::Reply(_)));
}

#[tokio::test]
async fn auth_is_checked_and_refusals_are_recorded() {
    let fake = FakeOpenAi::start().await;
    fake.push_reply("kept for the authorized request");
    let (status, body) = post(&fake, "/v1/chat/completions", &chat_body("a"), None).await;
    assert_eq!(status, 401);
    assert_eq!(body["error"]["type"], "invalid_request_error");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("didn't provide an API key")
    );
    let (status, body) = post(
        &fake,
        "/v1/chat/completions",
        &chat_body("a"),
        Some("sk-wrong-key"),
    )
    .await;
    assert_eq!(status, 401);
    assert_eq!(body["error"]["code"], "invalid_api_key");
    assert!(
        !body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("sk-wrong-key")
    );
    let reqs = fake.requests();
    assert_eq!(reqs.len(), 2);
    assert!(reqs.iter().all(|r| r.outcome == Outcome::Unauthorized));
    // A refusal does not consume the script.
    assert_eq!(fake.pending_scripts(), 1);
    let key = fake.api_key().unwrap().to_string();
    let (status, body) = post(&fake, "/v1/chat/completions", &chat_body("a"), Some(&key)).await;
    assert_eq!(status, 200);
    assert_eq!(
        body["choices"][0]["message"]["content"],
        "kept for the authorized request"
    );

    let open = FakeOpenAi::start_with(FakeOpenAiConfig {
        api_key: None,
        ..Default::default()
    })
    .await;
    let (status, _) = post(&open, "/v1/chat/completions", &chat_body("a"), None).await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn malformed_requests_get_400_and_unknown_paths_404() {
    let fake = FakeOpenAi::start().await;
    let key = fake.api_key().unwrap().to_string();
    let (status, body) = post(
        &fake,
        "/v1/chat/completions",
        &json!({"model": "gpt-4o-mini"}),
        Some(&key),
    )
    .await;
    assert_eq!(status, 400);
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("messages")
    );
    let resp = client()
        .post(format!("{}/v1/chat/completions", fake.url()))
        .bearer_auth(&key)
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    assert!(matches!(
        fake.last_request().unwrap().outcome,
        Outcome::BadRequest(_)
    ));

    let (status, body) = post(&fake, "/chat/completions", &chat_body("a"), Some(&key)).await;
    assert_eq!(status, 404);
    assert_eq!(
        body["error"]["message"],
        "Invalid URL (POST /chat/completions)"
    );
    assert_eq!(
        fake.unmatched(),
        vec![UnmatchedRequest {
            method: "POST".into(),
            path: "/chat/completions".into()
        }]
    );
    assert_eq!(fake.request_count(), 2);
}

#[tokio::test]
async fn content_parts_are_recorded_as_text() {
    let fake = FakeOpenAi::start().await;
    let key = fake.api_key().unwrap().to_string();
    let body = json!({"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": "part one"}, {"type": "text", "text": "part two"}]}]});
    let (status, _) = post(&fake, "/v1/chat/completions", &body, Some(&key)).await;
    assert_eq!(status, 200);
    assert_eq!(fake.last_prompt_text(), "part one\npart two");
}

#[tokio::test]
async fn streaming_sends_chunks_then_done() {
    let fake = FakeOpenAi::start().await;
    let key = fake.api_key().unwrap().to_string();
    fake.push_reply("one two three four five six seven");
    let mut body = chat_body("stream please");
    body["stream"] = json!(true);
    body["stream_options"] = json!({"include_usage": true});
    let resp = client()
        .post(format!("{}/v1/chat/completions", fake.url()))
        .bearer_auth(&key)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert!(
        resp.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    let text = resp.text().await.unwrap();
    let data: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .collect();
    assert_eq!(data.last(), Some(&"[DONE]"));
    let chunks: Vec<Value> = data[..data.len() - 1]
        .iter()
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    assert!(
        chunks
            .iter()
            .all(|c| c["object"] == "chat.completion.chunk")
    );
    let content: String = chunks
        .iter()
        .filter_map(|c| {
            c["choices"]
                .get(0)
                .and_then(|ch| ch["delta"]["content"].as_str())
        })
        .collect();
    assert_eq!(content, "one two three four five six seven");
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let finish: Vec<&Value> = chunks
        .iter()
        .filter(|c| {
            c["choices"]
                .get(0)
                .is_some_and(|ch| ch["finish_reason"] == "stop")
        })
        .collect();
    assert_eq!(finish.len(), 1);
    let last = chunks.last().unwrap();
    assert_eq!(last["choices"], json!([]));
    assert!(last["usage"]["total_tokens"].as_u64().unwrap() > 0);
    assert!(fake.last_request().unwrap().stream);
}

#[tokio::test]
async fn hang_never_answers_and_wait_for_requests_sees_it() {
    let fake = FakeOpenAi::start().await;
    let key = fake.api_key().unwrap().to_string();
    fake.push(Script::Hang);
    let url = format!("{}/v1/chat/completions", fake.url());
    let req = client()
        .post(url)
        .bearer_auth(&key)
        .json(&chat_body("are you there?"))
        .send();
    let pending = tokio::spawn(req);
    let reqs = fake.wait_for_requests(1, Duration::from_secs(10)).await;
    assert_eq!(reqs[0].outcome, Outcome::Hang);
    assert!(!pending.is_finished());
    // Dropping the fake releases the hanging request with a 503.
    drop(fake);
    let resp = pending.await.unwrap().unwrap();
    assert_eq!(resp.status(), 503);
}

#[tokio::test]
async fn a_client_timeout_fires_on_hang() {
    let fake = FakeOpenAi::start().await;
    fake.set_fallback(Some(Script::Hang));
    let err = crate::http_client()
        .no_proxy()
        .timeout(Duration::from_millis(200))
        .build()
        .unwrap()
        .post(format!("{}/v1/chat/completions", fake.url()))
        .bearer_auth(fake.api_key().unwrap())
        .json(&chat_body("x"))
        .send()
        .await
        .unwrap_err();
    assert!(err.is_timeout());
    assert!(
        fake.try_wait_for_requests(2, Duration::from_millis(50))
            .await
            .is_err()
    );
}

#[tokio::test]
async fn delay_then_reply() {
    let fake = FakeOpenAi::start().await;
    fake.push(Script::Delay(
        Duration::from_millis(10),
        Box::new(Script::reply("late")),
    ));
    let key = fake.api_key().unwrap().to_string();
    let (status, body) = post(&fake, "/v1/chat/completions", &chat_body("x"), Some(&key)).await;
    assert_eq!(status, 200);
    assert_eq!(body["choices"][0]["message"]["content"], "late");
}

#[tokio::test]
async fn embeddings_and_models() {
    let fake = FakeOpenAi::start().await;
    let key = fake.api_key().unwrap().to_string();
    let body = json!({"model": "text-embedding-3-small", "input": ["sea glass", "lighthouse"]});
    let (status, resp) = post(&fake, "/v1/embeddings", &body, Some(&key)).await;
    assert_eq!(status, 200);
    assert_eq!(resp["object"], "list");
    assert_eq!(resp["data"].as_array().unwrap().len(), 2);
    assert_eq!(resp["data"][1]["index"], 1);
    let v: Vec<f32> = serde_json::from_value(resp["data"][0]["embedding"].clone()).unwrap();
    assert_eq!(v, embedding_for("sea glass", 64));
    assert!(resp["usage"]["prompt_tokens"].is_u64());

    let body = json!({"model": "text-embedding-3-small", "input": "sea glass", "dimensions": 8, "encoding_format": "base64"});
    let (status, resp) = post(&fake, "/v1/embeddings", &body, Some(&key)).await;
    assert_eq!(status, 200);
    let expected: Vec<u8> = embedding_for("sea glass", 8)
        .iter()
        .flat_map(|x| x.to_le_bytes())
        .collect();
    assert_eq!(resp["data"][0]["embedding"], base64(&expected));
    assert_eq!(fake.embedding_requests().len(), 2);
    assert_eq!(fake.request_count(), 0);

    let (status, _) = post(
        &fake,
        "/v1/embeddings",
        &json!({"model": "m", "input": "x"}),
        None,
    )
    .await;
    assert_eq!(status, 401);

    let resp = client()
        .get(format!("{}/v1/models", fake.url()))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let models: Value = resp.json().await.unwrap();
    assert_eq!(models["object"], "list");
    assert_eq!(models["data"][0]["id"], "gpt-4o-mini");
    assert_eq!(models["data"][0]["object"], "model");
    let resp = client()
        .get(format!("{}/v1/models/nope", fake.url()))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 404);
}
