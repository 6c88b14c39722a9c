//! Hostile documents through the real binary (issue 12, findings 1 and 5): files built to
//! crash, stall or bloat a parser (self-referencing PDFs, a decompression bomb, deep
//! nesting, megabyte lines, a CSV a million columns wide). Each gets a JSON answer, a
//! document or an `{error, detail}`, within 30 s; the gateway answers chat while they are
//! read, and its own memory stays small (the parsing happens in `troupe extract` workers).
//!
//! On the code before the sandbox, the two PDFs of finding 1 killed the gateway (the
//! request failed without an answer) and the texts of finding 5 took minutes.

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};
use troupe_e2e::multipart::{self, Part};
use troupe_e2e::{Backend, FakeOpenAi, TestApp, TestAppOptions};

const AGENT: &str = "Ada";
/// The bound the issue sets on every answer.
const ANSWER_DEADLINE: Duration = Duration::from_secs(30);
/// The bound on the gateway's own peak memory, in kB (VmHWM).
const MAX_GATEWAY_KB: u64 = 150 * 1024;

/// A PDF of `objects` (bodies of objects 1..), object 1 the catalog, with a correct
/// cross-reference table, so that the parser gets past the structure to the hostile part.
fn pdf(objects: &[Vec<u8>]) -> Vec<u8> {
    let mut out = b"%PDF-1.4\n".to_vec();
    let mut offsets = Vec::new();
    for (i, body) in objects.iter().enumerate() {
        offsets.push(out.len());
        out.extend_from_slice(format!("{} 0 obj\n", i + 1).as_bytes());
        out.extend_from_slice(body);
        out.extend_from_slice(b"\nendobj\n");
    }
    let xref = out.len();
    out.extend_from_slice(
        format!("xref\n0 {}\n0000000000 65535 f \n", objects.len() + 1).as_bytes(),
    );
    for o in offsets {
        out.extend_from_slice(format!("{o:010} 00000 n \n").as_bytes());
    }
    out.extend_from_slice(
        format!(
            "trailer\n<< /Size {} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n",
            objects.len() + 1
        )
        .as_bytes(),
    );
    out
}

fn stream(dict: &str, data: &[u8]) -> Vec<u8> {
    let mut out = format!("<< {dict} /Length {} >>\nstream\n", data.len()).into_bytes();
    out.extend_from_slice(data);
    out.extend_from_slice(b"\nendstream");
    out
}

const FONT: &str = "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>";

/// Finding 1: a page whose `/Parent` is itself.
fn parent_loop_pdf() -> Vec<u8> {
    let content = b"BT /F1 12 Tf 72 720 Td (loop) Tj ET";
    pdf(&[
        b"<< /Type /Catalog /Pages 2 0 R >>".to_vec(),
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>".to_vec(),
        b"<< /Type /Page /Parent 3 0 R /MediaBox [0 0 612 792] /Contents 4 0 R >>".to_vec(),
        stream("", content),
        FONT.as_bytes().to_vec(),
    ])
}

/// Finding 1: a form XObject that draws itself.
fn self_xobject_pdf() -> Vec<u8> {
    pdf(&[
        b"<< /Type /Catalog /Pages 2 0 R >>".to_vec(),
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>".to_vec(),
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] \
           /Resources << /XObject << /X1 5 0 R >> /Font << /F1 6 0 R >> >> /Contents 4 0 R >>"
            .to_vec(),
        stream("", b"/X1 Do"),
        stream(
            "/Type /XObject /Subtype /Form /BBox [0 0 612 792] \
             /Resources << /XObject << /X1 5 0 R >> >>",
            b"/X1 Do",
        ),
        FONT.as_bytes().to_vec(),
    ])
}

fn zlib(data: impl FnOnce(&mut dyn Write)) -> Vec<u8> {
    let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
    data(&mut z);
    z.finish().expect("zlib")
}

/// Finding 5: a page whose content is 1 GiB of spaces behind three FlateDecode layers; the
/// whole file is a few kilobytes.
fn flate_bomb_pdf() -> Vec<u8> {
    let block = vec![b' '; 1 << 20];
    let inner = zlib(|z| {
        for _ in 0..1024 {
            z.write_all(&block).expect("deflate");
        }
    });
    let middle = zlib(|z| z.write_all(&inner).expect("deflate"));
    let outer = zlib(|z| z.write_all(&middle).expect("deflate"));
    pdf(&[
        b"<< /Type /Catalog /Pages 2 0 R >>".to_vec(),
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>".to_vec(),
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] \
           /Resources << /Font << /F1 5 0 R >> >> /Contents 4 0 R >>"
            .to_vec(),
        stream("/Filter [/FlateDecode /FlateDecode /FlateDecode]", &outer),
        FONT.as_bytes().to_vec(),
    ])
}

/// Finding 5's CSV: 1M columns, a header and one row, about 10 MB.
fn wide_csv() -> Vec<u8> {
    let columns = 1_000_000;
    let mut out = Vec::with_capacity(10 << 20);
    for i in 0..columns {
        if i > 0 {
            out.push(b',');
        }
        write!(out, "c{i}").expect("write");
    }
    out.push(b'\n');
    for i in 0..columns {
        if i > 0 {
            out.push(b',');
        }
        out.push(b'1');
    }
    out.push(b'\n');
    out
}

/// JSON whose `path: value` lines would be hundreds of megabytes: a long key nested 100
/// deep, holding 5000 values.
fn json_path_bomb() -> Vec<u8> {
    let key = "k".repeat(1000);
    let mut out = String::new();
    for _ in 0..100 {
        out.push_str(&format!("{{\"{key}\":"));
    }
    out.push('[');
    out.push_str(&vec!["1"; 5000].join(","));
    out.push(']');
    out.push_str(&"}".repeat(100));
    out.into_bytes()
}

/// The corpus: (file name, content type, bytes).
fn corpus() -> Vec<(&'static str, &'static str, Vec<u8>)> {
    vec![
        ("parent_loop.pdf", "application/pdf", parent_loop_pdf()),
        ("self_xobject.pdf", "application/pdf", self_xobject_pdf()),
        ("flate_bomb.pdf", "application/pdf", flate_bomb_pdf()),
        (
            "unclosed.html",
            "text/html",
            format!("<html><body>{}text", "<b><i>".repeat(100_000)).into_bytes(),
        ),
        (
            "nested.html",
            "text/html",
            format!("<html><body>{}deep", "<div>".repeat(100_000)).into_bytes(),
        ),
        ("word.txt", "text/plain", vec![b'a'; 1 << 20]),
        ("wide.csv", "text/csv", wide_csv()),
        (
            "nested.json",
            "application/json",
            format!("{}{}", "[".repeat(100_000), "]".repeat(100_000)).into_bytes(),
        ),
        ("path_bomb.json", "application/json", json_path_bomb()),
        (
            "quotes.md",
            "text/markdown",
            format!("{} deep\n", ">".repeat(50_000)).into_bytes(),
        ),
    ]
}

/// One file as multipart; a JSON answer within [`ANSWER_DEADLINE`] or a panic.
async fn upload(
    client: &reqwest::Client,
    url: &str,
    name: &str,
    content_type: &str,
    bytes: Vec<u8>,
) -> (StatusCode, Value) {
    let file = Part::File(name, content_type, &bytes);
    let response = multipart::attach(client.post(url), &[file])
        .send()
        .await
        .unwrap_or_else(|e| panic!("{name}: no answer within {ANSWER_DEADLINE:?}: {e}"));
    let status = response.status();
    let text = response
        .text()
        .await
        .unwrap_or_else(|e| panic!("{name}: reading the answer: {e}"));
    let body: Value = serde_json::from_str(&text)
        .unwrap_or_else(|_| panic!("{name}: {status} with a body that is not JSON: {text}"));
    (status, body)
}

/// Each upload's answer: stored with an id, or refused with an error that names the file;
/// the PDFs of finding 1 and the bomb refused as unreadable or stored, and the megabyte
/// word stored as ordinary text.
fn assert_each_answered_clearly(answers: &[(&str, StatusCode, Value)]) {
    for (name, status, body) in answers {
        if status.is_success() {
            assert!(body["id"].is_string(), "{name}: {status} {body}");
        } else {
            assert!(
                status.is_client_error() || *status == StatusCode::SERVICE_UNAVAILABLE,
                "{name}: {status} {body}"
            );
            assert!(
                body["error"].is_string()
                    && body["detail"].as_str().is_some_and(|d| d.contains(name)),
                "{name}: {status} {body}"
            );
        }
    }
    // The two PDFs of finding 1 and the bomb are refused as unreadable, not stored.
    for pdf in ["parent_loop.pdf", "self_xobject.pdf", "flate_bomb.pdf"] {
        let (_, status, body) = answers.iter().find(|(n, _, _)| *n == pdf).unwrap();
        assert!(
            matches!(
                *status,
                StatusCode::UNPROCESSABLE_ENTITY | StatusCode::CREATED
            ),
            "{pdf}: {status} {body}"
        );
    }
    // The megabyte word is ordinary text once chunking is linear.
    let (_, status, body) = answers.iter().find(|(n, _, _)| *n == "word.txt").unwrap();
    assert_eq!(*status, StatusCode::CREATED, "word.txt: {body}");
}

#[tokio::test]
async fn hostile_documents_get_an_answer_and_the_gateway_stays_up() {
    let fake = FakeOpenAi::start().await;
    let app = TestApp::spawn(
        TestAppOptions::new(Backend::Sqlite)
            .persona(AGENT, "Ada keeps the harbour office.")
            .openai(&fake)
            // Chat must stay answerable throughout: no rate limit in the way.
            .env("TROUPE_RATE_USER_PER_MIN", "0")
            .env("TROUPE_RATE_ROOM_PER_MIN", "0")
            .env("TROUPE_RATE_AGENT_PER_MIN", "0")
            .env("TROUPE_RATE_API_PER_MIN", "0"),
    )
    .await;
    let pid = app.pid().expect("the gateway runs");
    let corpus = corpus();
    for (name, _, bytes) in &corpus {
        eprintln!("hostile corpus: {name}: {} bytes", bytes.len());
    }

    let client = troupe_e2e::http_client()
        .no_proxy()
        .timeout(ANSWER_DEADLINE)
        .build()
        .expect("client");
    let url = app.url(&format!("/api/agents/{AGENT}/documents"));
    let uploading = Arc::new(AtomicBool::new(true));
    let uploads = {
        let uploading = uploading.clone();
        tokio::spawn(async move {
            let mut answers = Vec::new();
            for (name, content_type, bytes) in corpus {
                let started = std::time::Instant::now();
                let (status, body) = upload(&client, &url, name, content_type, bytes).await;
                eprintln!(
                    "hostile corpus: {name}: {status} in {:?}: {body}",
                    started.elapsed()
                );
                answers.push((name, status, body));
            }
            uploading.store(false, Ordering::SeqCst);
            answers
        })
    };

    // Chat goes on while the corpus is read.
    let answered_during = Arc::new(AtomicUsize::new(0));
    while uploading.load(Ordering::SeqCst) {
        let (status, body) = app
            .post_message(
                AGENT,
                &json!({"roomId": "r1", "userId": "u1", "userName": "Sam", "text": "Are you there?"}),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "chat during the uploads: {body}");
        if uploading.load(Ordering::SeqCst) {
            answered_during.fetch_add(1, Ordering::SeqCst);
        }
    }
    let answers = uploads.await.expect("the upload task");
    assert!(
        answered_during.load(Ordering::SeqCst) > 0,
        "no chat message was answered while the documents were read"
    );

    assert_each_answered_clearly(&answers);

    // Still up, still answering, and its own memory stayed small.
    let (status, _) = app.get("/healthz").await;
    assert_eq!(status, StatusCode::OK);
    let peak = troupe_e2e::gauges::peak_rss_kib(pid);
    eprintln!("hostile corpus: gateway peak RSS {peak} kB");
    assert!(
        peak < MAX_GATEWAY_KB,
        "the gateway's peak RSS was {peak} kB, over {MAX_GATEWAY_KB} kB"
    );
}
