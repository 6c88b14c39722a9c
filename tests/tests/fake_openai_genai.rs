//! The OpenAI fake against `genai`, the client the gateway calls models with: plain and
//! streamed chat, errors and embeddings. If these pass, a gateway failure in `gateway.rs`
//! is the gateway's, not the fake's.

use futures::StreamExt;
use genai::adapter::AdapterKind;
use genai::chat::{ChatMessage, ChatOptions, ChatRequest, ChatStreamEvent};
use genai::resolver::{AuthData, Endpoint, ServiceTargetResolver};
use genai::{Client, ModelIden, ServiceTarget};
use troupe_e2e::fake_openai::embedding_for;
use troupe_e2e::{FakeOpenAi, Outcome, Script};

/// A genai client that sends every OpenAI call to `base_url` (which must end with `/`, as
/// genai joins paths onto it) with `key`.
fn client_for(base_url: String, key: String) -> Client {
    let resolver = ServiceTargetResolver::from_resolver_fn(
        move |target: ServiceTarget| -> Result<ServiceTarget, genai::resolver::Error> {
            Ok(ServiceTarget {
                endpoint: Endpoint::from_owned(base_url.clone()),
                auth: AuthData::from_single(key.clone()),
                model: ModelIden::new(AdapterKind::OpenAI, target.model.model_name),
            })
        },
    );
    troupe_e2e::install_crypto_provider();
    Client::builder()
        .with_service_target_resolver(resolver)
        .build()
        .expect("genai client")
}

fn client(fake: &FakeOpenAi) -> Client {
    client_for(
        format!("{}/", fake.base_url()),
        fake.api_key().unwrap().to_string(),
    )
}

fn request(user: &str) -> ChatRequest {
    ChatRequest::default()
        .with_system("You are Ada.")
        .append_message(ChatMessage::user(user))
}

#[tokio::test]
async fn genai_chat_gets_the_scripted_reply() {
    let fake = FakeOpenAi::start().await;
    fake.push_reply("Ahoy.");
    let res = client(&fake)
        .exec_chat("gpt-4o-mini", request("hello"), None)
        .await
        .expect("chat");
    assert_eq!(res.first_text(), Some("Ahoy."));
    assert!(res.usage.total_tokens.is_some());
    let rec = fake.last_request().unwrap();
    assert_eq!(rec.model, "gpt-4o-mini");
    assert_eq!(rec.messages.len(), 2);
    assert_eq!(rec.messages[0].role, "system");
    assert_eq!(rec.last_user_message(), Some("hello"));

    let res = client(&fake)
        .exec_chat("gpt-4o-mini", request("again"), None)
        .await
        .expect("chat");
    assert_eq!(res.first_text(), Some("Reply #2 to: again"));
}

#[tokio::test]
async fn genai_stream_gets_the_whole_reply() {
    let fake = FakeOpenAi::start().await;
    fake.push_reply("The tides follow the moon, mostly.");
    let options = ChatOptions::default()
        .with_capture_usage(true)
        .with_capture_content(true);
    let res = client(&fake)
        .exec_chat_stream("gpt-4o-mini", request("tides?"), Some(&options))
        .await
        .expect("stream");
    let mut stream = res.stream;
    let mut text = String::new();
    let mut ended = false;
    while let Some(event) = stream.next().await {
        match event.expect("stream event") {
            ChatStreamEvent::Chunk(c) => text.push_str(&c.content),
            ChatStreamEvent::End(end) => {
                ended = true;
                assert!(
                    end.captured_usage.is_some_and(|u| u.total_tokens.is_some()),
                    "no usage captured"
                );
            }
            _ => {}
        }
    }
    assert!(ended, "the stream did not end");
    assert_eq!(text, "The tides follow the moon, mostly.");
    assert!(fake.last_request().unwrap().stream);
}

#[tokio::test]
async fn genai_sees_errors_with_their_status() {
    let fake = FakeOpenAi::start().await;
    fake.push(Script::server_error());
    let err = client(&fake)
        .exec_chat("gpt-4o-mini", request("x"), None)
        .await
        .unwrap_err();
    assert_eq!(err.status().map(|s| s.as_u16()), Some(500), "{err}");

    let wrong = client_for(format!("{}/", fake.base_url()), "sk-wrong".into());
    let err = wrong
        .exec_chat("gpt-4o-mini", request("x"), None)
        .await
        .unwrap_err();
    assert_eq!(err.status().map(|s| s.as_u16()), Some(401), "{err}");
    assert_eq!(fake.last_request().unwrap().outcome, Outcome::Unauthorized);
}

#[tokio::test]
async fn genai_without_a_trailing_slash_misses_the_route() {
    // genai joins "chat/completions" onto the base URL, so ".../v1" loses its last segment.
    // The fake answers 404 like OpenAI and records the path: a gateway that passes
    // OPENAI_BASE_URL through unchanged shows up here.
    let fake = FakeOpenAi::start().await;
    let no_slash = client_for(fake.base_url(), fake.api_key().unwrap().to_string());
    let err = no_slash
        .exec_chat("gpt-4o-mini", request("x"), None)
        .await
        .unwrap_err();
    assert_eq!(err.status().map(|s| s.as_u16()), Some(404), "{err}");
    assert_eq!(fake.unmatched()[0].path, "/chat/completions");
}

#[tokio::test]
async fn genai_embeddings_are_the_fakes_vectors() {
    let fake = FakeOpenAi::start().await;
    let res = client(&fake)
        .embed_batch(
            "text-embedding-3-small",
            vec!["sea glass".into(), "lighthouse".into()],
            None,
        )
        .await
        .expect("embed");
    let vectors: Vec<Vec<f32>> = res.embeddings.iter().map(|e| e.vector().to_vec()).collect();
    assert_eq!(
        vectors,
        vec![
            embedding_for("sea glass", 64),
            embedding_for("lighthouse", 64)
        ]
    );
    assert_eq!(
        fake.embedding_requests()[0].inputs,
        vec!["sea glass", "lighthouse"]
    );
}
