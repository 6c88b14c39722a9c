//! The HTTP edge under abuse (issue 12, findings 9 and 10): half-sent requests, more
//! connections than the cap, errors that must be JSON, a blank API token, and API callers
//! who rotate `userId` and `roomId` to escape the rate limits; and (issue 30, finding 8)
//! slow clients that hold every connection they can, which must neither starve another
//! address nor keep a health check from its answer. The real `troupe run`, talked to over
//! raw TCP where a well-behaved client would hide what is tested; several loopback
//! addresses (127.0.0.2, 127.0.0.3, …) stand for different clients.

use std::net::SocketAddr;
use std::process::Stdio;
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use troupe_e2e::fake_telegram::{FakeTelegram, tg};
use troupe_e2e::{Backend, FakeOpenAi, TestApp, TestAppOptions, troupe_bin};

const AGENT: &str = "Ada";
const BIO: &str = "Ada is a retired lighthouse keeper who collects sea glass.";
/// A hang guard that turns a missing close or answer into a failure, not a timing assertion.
const WAIT: Duration = Duration::from_secs(60);

async fn spawn(env: &[(&str, &str)]) -> TestApp {
    let mut options = TestAppOptions::new(Backend::Sqlite).persona(AGENT, BIO);
    for (k, v) in env {
        options = options.env(k, v);
    }
    TestApp::spawn(options).await
}

/// Reads until the server closes the connection; panics if it does not within `WAIT`.
async fn wait_for_close(stream: &mut TcpStream, what: &str) -> Vec<u8> {
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout(WAIT, stream.read(&mut buf)).await {
            Err(_) => panic!("{what}: the server kept the connection open for {WAIT:?}"),
            Ok(Ok(0)) | Ok(Err(_)) => return seen,
            Ok(Ok(n)) => seen.extend_from_slice(&buf[..n]),
        }
    }
}

/// Reads one response head and its `content-length` body from a kept-alive connection.
async fn read_response(stream: &mut TcpStream, what: &str) -> String {
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let text = String::from_utf8_lossy(&seen).to_string();
        if let Some(end) = text.find("\r\n\r\n") {
            let length = text[..end]
                .lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.eq_ignore_ascii_case("content-length")
                        .then(|| v.trim().parse::<usize>().ok())?
                })
                .unwrap_or(0);
            if seen.len() >= end + 4 + length {
                return text;
            }
        }
        match tokio::time::timeout(WAIT, stream.read(&mut buf)).await {
            Err(_) => panic!("{what}: no answer within {WAIT:?}; got {text:?}"),
            Ok(Ok(0)) | Ok(Err(_)) => panic!("{what}: closed before answering; got {text:?}"),
            Ok(Ok(n)) => seen.extend_from_slice(&buf[..n]),
        }
    }
}

const HEALTHZ: &[u8] = b"GET /healthz HTTP/1.1\r\nHost: troupe\r\n\r\n";

#[tokio::test]
async fn half_sent_requests_are_closed_after_the_header_timeout() {
    let app = spawn(&[("TROUPE_HTTP_HEADER_TIMEOUT_SECS", "1")]).await;
    let mut held = Vec::new();
    for i in 0..50 {
        let mut s = TcpStream::connect(app.addr()).await.unwrap();
        // Headers without the blank line that ends them, as a slowloris client sends.
        s.write_all(
            format!("GET /healthz HTTP/1.1\r\nHost: troupe\r\nX-Slow-{i}: 1\r\n").as_bytes(),
        )
        .await
        .unwrap();
        held.push(s);
    }
    // A connection that sends nothing at all is closed too.
    held.push(TcpStream::connect(app.addr()).await.unwrap());
    for (i, s) in held.iter_mut().enumerate() {
        let answer = wait_for_close(s, &format!("half-sent request {i}")).await;
        assert!(
            !String::from_utf8_lossy(&answer).contains("200 OK"),
            "a half-sent request was answered"
        );
    }
    // The server still serves whole requests.
    let (status, _) = app.get("/healthz").await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn a_stalled_body_fails_and_its_connection_closes() {
    let app = spawn(&[("TROUPE_HTTP_BODY_TIMEOUT_SECS", "1")]).await;
    let mut s = TcpStream::connect(app.addr()).await.unwrap();
    s.write_all(
        b"POST /api/agents/ada/messages HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"text\": \"hel",
    )
    .await
    .unwrap();
    let answer =
        String::from_utf8_lossy(&wait_for_close(&mut s, "a stalled body").await).to_string();
    assert!(
        answer.is_empty() || answer.starts_with("HTTP/1.1 400"),
        "{answer}"
    );
}

/// `GET /api/agents`, a request that is not a probe.
const AGENTS: &[u8] = b"GET /api/agents HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";

/// A connection served on one of `TROUPE_HTTP_MAX_CONNECTIONS` (proven by a 200 to a
/// request that is not a probe), polled while the server answers `busy`: until a slot comes
/// free, such as the test client's kept-alive connection from start-up once the header
/// deadline closes it. `WAIT` bounds the polling.
async fn general_connection(addr: SocketAddr, what: &str) -> TcpStream {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(AGENTS).await.unwrap();
        let answer = read_response(&mut s, what).await;
        if answer.starts_with("HTTP/1.1 200") {
            return s;
        }
        assert!(answer.starts_with("HTTP/1.1 503"), "{what}: {answer}");
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: still busy after {WAIT:?}"
        );
        // A poll interval, not a synchronisation: the deadline above bounds the loop.
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

#[tokio::test]
async fn past_the_cap_probes_are_answered_and_other_requests_told_to_retry() {
    let app = spawn(&[
        ("TROUPE_HTTP_MAX_CONNECTIONS", "2"),
        ("TROUPE_HTTP_HEADER_TIMEOUT_SECS", "1"),
        ("TROUPE_HTTP_BODY_TIMEOUT_SECS", "120"),
    ])
    .await;
    // Two connections, each proven served, then held inside a request whose body never
    // comes (past the header deadline, which no longer applies).
    let mut held = Vec::new();
    for i in 0..2 {
        let mut s = general_connection(app.addr(), &format!("held connection {i}")).await;
        s.write_all(
            b"POST /webhooks/telegram/ada HTTP/1.1\r\nHost: troupe\r\nContent-Length: 100\r\n\r\n",
        )
        .await
        .unwrap();
        held.push(s);
    }
    // A third connection is on the probes' lane: a probe is answered...
    let mut probe = TcpStream::connect(app.addr()).await.unwrap();
    probe.write_all(HEALTHZ).await.unwrap();
    let answer = read_response(&mut probe, "a probe past the cap").await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    // ...and anything else is told to come back, at once.
    let mut other = TcpStream::connect(app.addr()).await.unwrap();
    other.write_all(AGENTS).await.unwrap();
    let answer = read_response(&mut other, "a request past the cap").await;
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(
        answer.to_ascii_lowercase().contains("retry-after: 1"),
        "{answer}"
    );
    assert!(
        answer.contains("\"busy\"") && answer.contains("TROUPE_HTTP_MAX_CONNECTIONS"),
        "{answer}"
    );
    // One held connection closes: its slot serves the next caller.
    drop(held.remove(0));
    general_connection(app.addr(), "after a held connection closed").await;
}

/// A connection from `ip` (a loopback address: each one is another client).
async fn connect_from(ip: [u8; 4], to: SocketAddr) -> TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::from((ip, 0))).unwrap();
    socket
        .connect(to)
        .await
        .unwrap_or_else(|e| panic!("connect from {ip:?}: {e}"))
}

/// A slow client: the start of a request's headers, the rest never sent.
async fn slow_client(ip: [u8; 4], to: SocketAddr) -> TcpStream {
    let mut s = connect_from(ip, to).await;
    s.write_all(b"GET /api/agents HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        .await
        .unwrap();
    s
}

/// A connection past its address's share is answered 429 and closed at once (waited on,
/// with `WAIT` as the hang guard).
async fn assert_refused_for_its_address(ip: [u8; 4], to: SocketAddr, what: &str) {
    let mut s = connect_from(ip, to).await;
    let answer = String::from_utf8_lossy(&wait_for_close(&mut s, what).await).to_string();
    assert!(answer.starts_with("HTTP/1.1 429"), "{what}: {answer}");
    assert!(
        answer.contains("TROUPE_HTTP_MAX_CONNECTIONS_PER_IP"),
        "{what}: {answer}"
    );
}

/// Starts troupe with these caps (and a header deadline far longer than any test), then
/// opens `per_address` slow clients from 127.0.0.2.
async fn slow_clients(max_connections: usize, per_address: usize) -> (TestApp, Vec<TcpStream>) {
    let app = spawn(&[
        ("TROUPE_HTTP_MAX_CONNECTIONS", &max_connections.to_string()),
        (
            "TROUPE_HTTP_MAX_CONNECTIONS_PER_IP",
            &per_address.to_string(),
        ),
        ("TROUPE_HTTP_HEADER_TIMEOUT_SECS", "600"),
    ])
    .await;
    let mut slow = Vec::new();
    for _ in 0..per_address {
        slow.push(slow_client(SLOW_IP, app.addr()).await);
    }
    (app, slow)
}

const SLOW_IP: [u8; 4] = [127, 0, 0, 2];

/// Finding 8: slow clients from one address fill both its share and the whole server, and
/// keep reconnecting. The health check still gets its answer.
#[tokio::test]
async fn a_probe_is_answered_while_slow_clients_hold_every_connection() {
    let (app, slow) = slow_clients(4, 4).await;
    // Every general slot is held (by the slow clients, and the test client's kept-alive
    // connection from start-up if it is still open): a request that is not a probe is
    // told so at once.
    let mut s = connect_from([127, 0, 0, 3], app.addr()).await;
    s.write_all(AGENTS).await.unwrap();
    let answer = read_response(&mut s, "a request while the server is full").await;
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    // The attacker's reconnections are never served: refused for its address, or, once a
    // slow client that landed on the probes' lane has been closed there, closed at the
    // lane's own short header deadline.
    for i in 0..4 {
        let what = format!("reconnection {i}");
        let mut s = connect_from(SLOW_IP, app.addr()).await;
        let answer = String::from_utf8_lossy(&wait_for_close(&mut s, &what).await).to_string();
        assert!(
            answer.is_empty() || answer.starts_with("HTTP/1.1 429"),
            "{what}: {answer}"
        );
    }
    // The container's health check, from loopback as the image's is.
    for probe in ["/healthz", "/readyz"] {
        let mut s = connect_from([127, 0, 0, 1], app.addr()).await;
        s.write_all(format!("GET {probe} HTTP/1.1\r\nHost: localhost\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let answer = read_response(&mut s, probe).await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{probe}: {answer}");
    }
    drop(slow);
}

/// Finding 8: one address takes its share and no more (it tries to fill the server), so
/// another address is served.
#[tokio::test]
async fn one_address_cannot_starve_another() {
    let (app, slow) = slow_clients(8, 3).await;
    // As many more as would fill the server: each is refused at once. They are accepted
    // after the three slow clients, so those are counted when these are.
    for i in 0..5 {
        assert_refused_for_its_address(SLOW_IP, app.addr(), &format!("connection {}", i + 4)).await;
    }
    // Another client is served, request after request on its kept-alive connection.
    let mut other = connect_from([127, 0, 0, 3], app.addr()).await;
    for i in 0..3 {
        other.write_all(AGENTS).await.unwrap();
        let answer = read_response(&mut other, &format!("another address, request {i}")).await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    }
    drop(slow);
}

#[tokio::test]
async fn every_error_is_json() {
    let app = spawn(&[]).await;
    let check = |what: &str, status: StatusCode, body: &Value, want: StatusCode, code: &str| {
        assert_eq!(status, want, "{what}: {body}");
        assert_eq!(body["error"], code, "{what}: not a JSON error: {body}");
        assert!(
            body["detail"].as_str().is_some_and(|d| !d.is_empty()),
            "{what}: no detail: {body}"
        );
    };
    let (status, body) = app
        .get(&format!("/api/agents/{AGENT}/rooms/r1/memories?limit=abc"))
        .await;
    check(
        "limit=abc",
        status,
        &body,
        StatusCode::BAD_REQUEST,
        "bad_request",
    );
    let (status, body) = app.get("/api/agents/%FF%FE").await;
    check(
        "a path that is not UTF-8",
        status,
        &body,
        StatusCode::BAD_REQUEST,
        "bad_request",
    );
    let (status, body) = app
        .post_raw(
            &format!("/api/agents/{AGENT}/messages"),
            "{not json",
            "application/json",
            None,
        )
        .await;
    check(
        "bad JSON",
        status,
        &body,
        StatusCode::BAD_REQUEST,
        "bad_request",
    );
    // POST /messages takes one image's base64 (TROUPE_MEDIA_MAX_BYTES, 10 MiB) on top of
    // TROUPE_MAX_BODY_BYTES (docs/media.md), so its body is over the limit past 1 + 13.4 MiB.
    for (path, size) in [
        ("/webhooks/telegram/ada", (1 << 20) + 1024),
        ("/api/agents/ada/messages", (15 << 20) + 1024),
    ] {
        let big = "x".repeat(size);
        let (status, body) = app.post_raw(path, &big, "application/json", None).await;
        check(
            &format!("{path} over its limit"),
            status,
            &body,
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
        );
    }
}

#[tokio::test]
async fn a_blank_api_token_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = tokio::process::Command::new(troupe_bin());
    cmd.arg("run")
        .current_dir(dir.path())
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("TROUPE_HTTP_ADDR", "127.0.0.1:0")
        .env(
            "TROUPE_DATABASE_URL",
            format!("sqlite://{}", dir.path().join("t.db").display()),
        )
        .env("TROUPE_PERSONAS", dir.path())
        .env("TROUPE_API_TOKEN", "   ")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let child = cmd.spawn().unwrap();
    let out = tokio::time::timeout(WAIT, child.wait_with_output())
        .await
        .expect("troupe kept running with a blank TROUPE_API_TOKEN")
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("TROUPE_API_TOKEN") && stderr.contains("white space"),
        "the refusal does not say what to fix: {stderr}"
    );
}

/// Finding 9: a caller that rotates `userId` and `roomId` is limited by its address, and
/// cannot use up the quota that the platforms' users need.
#[tokio::test]
async fn api_callers_are_budgeted_by_address_not_by_the_ids_they_choose() {
    let telegram = FakeTelegram::start().await;
    let model = FakeOpenAi::start().await;
    let character = telegram.persona("Tess", BIO);
    let app = TestApp::spawn(
        TestAppOptions::new(Backend::Sqlite)
            .persona_file("tess.json", character)
            .openai(&model)
            .env("TROUPE_RATE_API_PER_MIN", "5")
            .env("TROUPE_RATE_AGENT_PER_MIN", "20"),
    )
    .await;

    let url = app.url("/api/agents/tess/messages");
    let mut answered = 0;
    for i in 0..25 {
        let response = app
            .client()
            .post(&url)
            .json(&json!({"roomId": format!("r{i}"), "userId": format!("u{i}"), "text": "hello"}))
            .send()
            .await
            .unwrap();
        let status = response.status();
        let retry_after = response.headers().get("retry-after").cloned();
        let body: Value = response.json().await.unwrap_or(Value::Null);
        if i < 5 {
            assert_eq!(status, StatusCode::OK, "message {i}: {body}");
            answered += 1;
        } else {
            assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "message {i}: {body}");
            assert_eq!(body["error"], "rate_limited", "{body}");
            let secs: u64 = retry_after
                .and_then(|v| v.to_str().ok()?.parse().ok())
                .unwrap_or_else(|| panic!("message {i}: no retry-after in seconds"));
            assert!((1..=60).contains(&secs), "retry-after {secs}");
        }
    }
    assert_eq!(answered, 5);
    // Nothing over the budget was journaled: no room of it exists.
    let (_, rooms) = app.get("/api/agents/tess/rooms").await;
    let listed = rooms["rooms"].as_array().map(Vec::len).unwrap_or(0);
    assert_eq!(listed, 5, "{rooms}");

    // A platform user is still answered.
    telegram.push_message(tg::text(
        tg::private_chat(501, "Ann"),
        tg::user(501, "Ann"),
        "Is the ferry running?",
    ));
    if let Err(e) = telegram.try_wait_for_sent(1, WAIT).await {
        panic!("{e}\n----- troupe output -----\n{}", app.logs());
    }
    let asked = model
        .requests()
        .iter()
        .any(|r| r.prompt_text().contains("Is the ferry running?"));
    assert!(asked, "the Telegram message did not reach the model");
}
