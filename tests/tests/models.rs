//! `troupe models pull` against a fake Hugging Face Hub on 127.0.0.1 serving the real
//! all-MiniLM-L6-v2 files (issue 36): a pull, a pull cut partway and resumed, a file whose
//! hash does not match, a hub that cannot be reached; then, as a new user would, a pull
//! followed by `troupe check` and `troupe run` searching by vectors.

use std::path::Path;
use std::process::Output;

use reqwest::StatusCode;
use serde_json::json;
use troupe_e2e::fake_hub::FakeHub;
use troupe_e2e::multipart::Part;
use troupe_e2e::{Backend, TestApp, TestAppOptions, troupe_bin};

const REPO: &str = "sentence-transformers/all-MiniLM-L6-v2";
const WEIGHTS: &str = "model.safetensors";

/// A fake hub serving the MiniLM files, or `None` (skipped) without them.
async fn hub() -> Option<FakeHub> {
    let dir = troupe_e2e::env::minilm_dir()?;
    Some(FakeHub::start(REPO, &dir).await)
}

/// Runs `troupe models pull ARGS` with `HF_ENDPOINT` = `endpoint`, the model directory
/// `model_dir`, and `extra` environment.
async fn pull(endpoint: &str, model_dir: &Path, args: &[&str], extra: &[(&str, &str)]) -> Output {
    troupe_e2e::fake_hub::pull(&troupe_bin(), endpoint, model_dir, args, extra).await
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).to_string()
}

/// Every file the loader reads is there, byte for byte the hub's.
fn assert_installed(hub: &FakeHub, dir: &Path) {
    for file in [
        WEIGHTS,
        "tokenizer.json",
        "config.json",
        "1_Pooling/config.json",
    ] {
        let got = std::fs::read(dir.join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
        assert!(got == hub.file(file), "{file} differs from the hub's");
    }
}

/// What is beside the model directory but the pull's lock file (kept: removing it would
/// race with another process taking it): no staging directory, no part file.
fn leftovers(parent: &Path) -> Vec<String> {
    std::fs::read_dir(parent)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.file_name().to_string_lossy().to_string())
                .filter(|n| !n.ends_with(".pull.lock"))
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn a_pull_installs_the_checked_files_and_a_second_is_up_to_date() {
    let Some(hub) = hub().await else { return };
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("models/all-MiniLM-L6-v2");
    hub.require_token("hf_s3cret_token");
    let out = pull(&hub.url(), &dir, &[], &[("HF_TOKEN", "hf_s3cret_token")]).await;
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert_installed(&hub, &dir);
    assert!(stdout.contains("installed in"), "{stdout}");
    // The one-time download says what and how much, for a container's log.
    assert!(stderr.contains(&format!("pulling {REPO}")), "{stderr}");
    assert!(
        stderr.contains("model.safetensors (86.66 MiB) checked"),
        "{stderr}"
    );
    // Only what the loader reads: not the README, not vocab.txt.
    assert!(!dir.join("README.md").exists());
    assert!(!dir.join("vocab.txt").exists());
    assert_eq!(leftovers(dir.parent().unwrap()), vec!["all-MiniLM-L6-v2"]);
    // The metadata with the hashes, then each file at the commit it named, with the token.
    let requests = hub.requests();
    assert!(
        requests[0]
            .path
            .starts_with(&format!("/api/models/{REPO}/revision/main?"))
            && requests[0].path.contains("blobs=true"),
        "{requests:?}"
    );
    assert!(
        requests
            .iter()
            .all(|r| r.authorization.as_deref() == Some("Bearer hf_s3cret_token"))
    );
    assert_eq!(hub.downloads_of(WEIGHTS).len(), 1);
    assert!(!stdout.contains("hf_s3cret_token") && !stderr.contains("hf_s3cret_token"));

    // Again: the recorded commit is the hub's, so nothing is downloaded.
    let out = pull(&hub.url(), &dir, &[], &[("HF_TOKEN", "hf_s3cret_token")]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("up to date"),
        "{}",
        text(&out.stdout)
    );
    assert_eq!(hub.downloads_of(WEIGHTS).len(), 1);

    // Without the token the hub's refusal is named, with what to do.
    let out = pull(&hub.url(), &tmp.path().join("other"), &[], &[]).await;
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("HF_TOKEN"),
        "{}",
        text(&out.stderr)
    );
}

#[tokio::test]
async fn an_interrupted_pull_resumes_from_the_byte_it_reached() {
    let Some(hub) = hub().await else { return };
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("all-MiniLM-L6-v2");
    let cut = 8 << 20;
    hub.cut_next_download(WEIGHTS, cut);
    let out = pull(&hub.url(), &dir, &[], &[]).await;
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "a cut download succeeded: {stderr}");
    assert!(stderr.contains("interrupted"), "{stderr}");
    assert!(stderr.contains("again to resume"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(!dir.exists(), "a half-pulled model was installed");

    let out = pull(&hub.url(), &dir, &[], &[]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_installed(&hub, &dir);
    let gets = hub.downloads_of(WEIGHTS);
    assert_eq!(gets.len(), 2, "{gets:?}");
    assert_eq!(gets[0].range, None, "{gets:?}");
    // The second run asked only for the rest: from a byte the first run had received.
    let resumed_at: usize = gets[1]
        .range
        .as_deref()
        .and_then(|r| r.strip_prefix("bytes="))
        .and_then(|r| r.strip_suffix('-'))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("the second download was not a resume: {gets:?}"));
    assert!(
        resumed_at > 0 && resumed_at <= cut,
        "resumed at {resumed_at}"
    );
    // The small files finished in the first run are not fetched again.
    assert_eq!(hub.downloads_of("tokenizer.json").len(), 1);
}

#[tokio::test]
async fn a_file_that_does_not_match_the_hubs_hash_is_refused_and_nothing_installed() {
    let Some(hub) = hub().await else { return };
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("all-MiniLM-L6-v2");
    hub.corrupt(WEIGHTS);
    let out = pull(&hub.url(), &dir, &[], &[]).await;
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("model.safetensors"), "{stderr}");
    assert!(stderr.contains("sha256"), "{stderr}");
    assert!(stderr.contains("nothing was installed"), "{stderr}");
    assert!(!dir.exists(), "a model with a bad file was installed");
    let staging = tmp.path().join(".all-MiniLM-L6-v2.pull");
    assert!(!staging.join(WEIGHTS).exists() && !staging.join("model.safetensors.part").exists());

    // A git-kept file is checked by its blob id the same way (in another directory: the
    // files this one checked are kept for the next run, and would not be fetched again).
    let hub = self::hub().await.expect("the files are there");
    hub.corrupt("tokenizer.json");
    let dir = tmp.path().join("other/all-MiniLM-L6-v2");
    let out = pull(&hub.url(), &dir, &[], &[]).await;
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("tokenizer.json") && stderr.contains("git blob id"),
        "{stderr}"
    );
    assert!(!dir.exists());
}

/// A hub can announce and send any size: a file past its cap (768 MiB for the weights,
/// docs/knowledge.md) is refused from the metadata, before a byte of it is asked for or
/// written (issue 43).
#[tokio::test]
async fn a_hub_announcing_a_50_gb_file_is_refused_before_any_byte_is_written() {
    let Some(hub) = hub().await else { return };
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("all-MiniLM-L6-v2");
    hub.announce_size(WEIGHTS, 50_000_000_000);
    let out = pull(&hub.url(), &dir, &[], &[]).await;
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("model.safetensors as 50000000000 bytes")
            && stderr.contains(&format!("at most {}", 768u64 << 20))
            && stderr.contains("nothing was downloaded"),
        "{stderr}"
    );
    let downloads: Vec<_> = hub
        .requests()
        .into_iter()
        .filter(|r| r.path.contains("/resolve/"))
        .collect();
    assert!(downloads.is_empty(), "no file was asked for: {downloads:?}");
    assert!(
        leftovers(tmp.path()).is_empty(),
        "{:?}",
        leftovers(tmp.path())
    );
    // The same hub announcing the true size is pulled as usual.
    let hub = hub_again(hub).await;
    let out = pull(&hub.url(), &dir, &[], &[]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_installed(&hub, &dir);
}

/// A fresh fake hub serving the same files (no fault left over from `old`).
async fn hub_again(old: FakeHub) -> FakeHub {
    drop(old);
    hub().await.expect("the files were there a moment ago")
}

#[tokio::test]
async fn a_hub_that_cannot_be_reached_is_one_clear_error() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("all-MiniLM-L6-v2");
    let port = troupe_e2e::services::free_port();
    let endpoint = format!("http://127.0.0.1:{port}");
    let out = pull(&endpoint, &dir, &[], &[]).await;
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!("cannot reach the model hub at {endpoint}")),
        "{stderr}"
    );
    assert!(stderr.contains("HF_ENDPOINT"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(!dir.exists());

    // A name troupe does not know is refused before any request.
    let out = pull(&endpoint, &dir, &["not a model"], &[]).await;
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("all-MiniLM-L6-v2"),
        "{}",
        text(&out.stderr)
    );
}

/// What a new user does: pull the model, check, run, and find a passage by its meaning.
#[tokio::test]
async fn a_new_user_pulls_the_model_and_search_is_hybrid() {
    let Some(hub) = hub().await else { return };
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("all-MiniLM-L6-v2");
    let out = pull(&hub.url(), &dir, &[], &[]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("installed in"),
        "{}",
        text(&out.stdout)
    );

    let app = TestApp::spawn(
        TestAppOptions::new(Backend::Sqlite)
            .persona("Ada", "A harbour guide.")
            .env("TROUPE_EMBEDDING_PROVIDER", "local")
            .env("TROUPE_EMBEDDING_MODEL_DIR", dir.to_str().unwrap()),
    )
    .await;

    // `troupe check` says search is hybrid, with the model and its size.
    let (ok, said) = check(&app, &dir);
    assert!(ok, "{said}");
    assert!(said.contains("hybrid"), "{said}");
    assert!(
        said.contains("all-MiniLM-L6-v2") && said.contains("384"),
        "{said}"
    );
    assert!(
        said.contains("ada: knowledge: hybrid") && said.contains("0 of 0 chunks have vectors"),
        "{said}"
    );

    upload_two_passages(&app).await;
    app.wait_for_vectors("ada", troupe_e2e::WAIT).await;
    // Not one word in common with the harbour passage (nor with the other): keywords
    // alone find nothing, the model finds it by its meaning.
    assert_eq!(
        sources(&app, PARAPHRASE).await.first().map(String::as_str),
        Some("harbour.txt")
    );
    // The persona's view says so: the model, its size, every chunk with its vector.
    let (status, ada) = app.get("/api/agents/ada").await;
    assert_eq!(status, StatusCode::OK, "{ada}");
    let k = &ada["knowledge"];
    assert_eq!(k["hybrid"], json!(true), "{ada}");
    assert_eq!(k["model"], json!("local:all-MiniLM-L6-v2"), "{ada}");
    assert_eq!(k["dimensions"], json!(384), "{ada}");
    assert_eq!(
        (k["chunks"].clone(), k["chunksWithVectors"].clone()),
        (json!(2), json!(2)),
        "{ada}"
    );
    assert!(app.logs().contains("hybrid"), "{}", app.logs());
    // And `troupe check`, beside the running gateway, counts them per persona.
    let (ok, said) = check(&app, &dir);
    assert!(ok, "{said}");
    assert!(
        said.contains(
            "ada: knowledge: hybrid (keywords and vectors of local:all-MiniLM-L6-v2, \
             384 dimensions); 2 of 2 chunks have vectors"
        ),
        "{said}"
    );
}

/// `troupe check` against the app's personas and database, with the local model in
/// `model_dir`: whether it passed, and what it said (stdout then stderr).
fn check(app: &TestApp, model_dir: &Path) -> (bool, String) {
    let out = std::process::Command::new(troupe_bin())
        .arg("check")
        .current_dir(app.data_dir())
        .env("TROUPE_PERSONAS", app.data_dir().join("personas"))
        .env("TROUPE_DATABASE_URL", app.database_url())
        .env("TROUPE_EMBEDDING_PROVIDER", "local")
        .env("TROUPE_EMBEDDING_MODEL_DIR", model_dir)
        .output()
        .expect("run troupe check");
    let said = format!("{}{}", text(&out.stdout), text(&out.stderr));
    (out.status.success(), said)
}

/// `troupe check` on a fresh machine, before any pull and before any database: it says
/// per persona that search is keywords only and what to run, and creates nothing.
#[test]
fn check_before_the_pull_says_keywords_only_and_creates_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let personas = tmp.path().join("personas");
    std::fs::create_dir_all(&personas).unwrap();
    let ada = troupe_e2e::persona_json("Ada", "A harbour guide.");
    std::fs::write(personas.join("ada.json"), ada.to_string()).unwrap();
    let model_dir = tmp.path().join("models/all-MiniLM-L6-v2");
    let db = tmp.path().join("data/troupe.db");
    let out = std::process::Command::new(troupe_bin())
        .arg("check")
        .current_dir(tmp.path())
        .env("TROUPE_PERSONAS", &personas)
        .env("TROUPE_DATABASE_URL", format!("sqlite://{}", db.display()))
        .env("TROUPE_EMBEDDING_PROVIDER", "local")
        .env("TROUPE_EMBEDDING_MODEL_DIR", &model_dir)
        .env_remove("TROUPE_MODELS_AUTO_PULL")
        .output()
        .expect("run troupe check");
    let said = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{said}");
    let line = said
        .lines()
        .find(|l| l.contains("ada: knowledge:"))
        .unwrap_or_else(|| panic!("no line for ada: {said}"));
    assert!(line.contains("keywords only"), "{line}");
    assert!(line.contains("troupe models pull"), "{line}");
    assert!(line.contains("no database yet"), "{line}");
    assert!(!db.exists(), "check created the database");
    assert!(!model_dir.exists());
}

/// The paraphrase of the harbour passage: no word in common with any document.
const PARAPHRASE: &str =
    "when%20is%20the%20port%20authority%20shut%20at%20the%20end%20of%20the%20week";

/// The sources a search for `q` finds.
async fn sources(app: &TestApp, q: &str) -> Vec<String> {
    app.search_sources("ada", q, 2).await
}

/// Uploads the harbour passage and an unrelated one to Ada.
async fn upload_two_passages(app: &TestApp) {
    let harbour = "The harbour office closes at five on Fridays.";
    let goats = "Chamois graze on the high alpine meadows all summer long.";
    let (status, body) = app
        .upload(
            "ada",
            &[
                Part::File("harbour.txt", "text/plain", harbour.as_bytes()),
                Part::File("alps.txt", "text/plain", goats.as_bytes()),
            ],
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
}

/// `TROUPE_MODELS_AUTO_PULL=true`: the gateway answers with keywords while it pulls, then
/// turns vectors on and embeds what was stored meanwhile.
#[tokio::test]
async fn the_background_pull_turns_vectors_on_and_embeds_what_was_stored() {
    let Some(hub) = hub().await else { return };
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("all-MiniLM-L6-v2");
    hub.hold(WEIGHTS);
    let app = TestApp::spawn(
        TestAppOptions::new(Backend::Sqlite)
            .persona("Ada", "A harbour guide.")
            .env("TROUPE_EMBEDDING_PROVIDER", "local")
            .env("TROUPE_EMBEDDING_MODEL_DIR", dir.to_str().unwrap())
            .env("TROUPE_MODELS_AUTO_PULL", "true")
            .env("HF_ENDPOINT", &hub.url()),
    )
    .await;
    hub.wait_for_downloads(WEIGHTS, 1).await;

    // Meanwhile: documents are accepted and found by their words, not by their meaning.
    upload_two_passages(&app).await;
    assert_eq!(sources(&app, "harbour%20office").await, vec!["harbour.txt"]);
    assert!(sources(&app, PARAPHRASE).await.is_empty());
    assert!(
        !dir.exists(),
        "the model was installed before its download finished"
    );
    let (_, ada) = app.get("/api/agents/ada").await;
    assert_eq!(ada["knowledge"]["hybrid"], json!(false), "{ada}");
    let why = ada["knowledge"]["whyNot"].as_str().unwrap_or_default();
    assert!(why.contains("being pulled"), "{ada}");

    hub.release();
    troupe_e2e::eventually(
        "the paraphrase finds the harbour passage by its vector",
        troupe_e2e::WAIT,
        || async {
            sources(&app, PARAPHRASE).await.first().map(String::as_str) == Some("harbour.txt")
        },
    )
    .await;
    assert_installed(&hub, &dir);
    let (_, ada) = app.get("/api/agents/ada").await;
    assert_eq!(ada["knowledge"]["chunksWithVectors"], json!(2), "{ada}");
    let logs = app.logs();
    assert!(logs.contains("pulling it in the background"), "{logs}");
    assert!(logs.contains("stored chunks embedded"), "{logs}");
}

/// Without the model and without the pull: one line saying what to run, and keywords.
#[tokio::test]
async fn a_missing_local_model_is_one_line_saying_what_to_run() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("all-MiniLM-L6-v2");
    let app = TestApp::spawn(
        TestAppOptions::new(Backend::Sqlite)
            .persona("Ada", "A harbour guide.")
            .env("TROUPE_EMBEDDING_PROVIDER", "local")
            .env("TROUPE_EMBEDDING_MODEL_DIR", dir.to_str().unwrap()),
    )
    .await;
    // stderr is read beside stdout's `listening` line: wait for the log to catch up.
    troupe_e2e::eventually("the log says what to run", troupe_e2e::WAIT, || async {
        app.logs().contains("troupe models pull")
    })
    .await;
    let logs = app.logs();
    let lines: Vec<&str> = logs
        .lines()
        .filter(|l| l.contains("troupe models pull"))
        .collect();
    assert_eq!(lines.len(), 1, "{logs}");
    assert!(lines[0].contains(&dir.display().to_string()), "{logs}");
    assert!(!dir.exists());
}

/// An upload answers once its document is stored: keyword search finds it at once, and
/// its vectors follow in the background, counted in `GET …/documents`, until a paraphrase
/// finds it too. The document is big enough (hundreds of chunks, embedded a page of 256 at
/// a time, each page stored at once) that its first page cannot be done by the time the
/// answer is read back; nothing here measures time.
#[tokio::test]
async fn an_upload_answers_before_its_vectors_which_follow_in_the_background() {
    for backend in [Backend::Sqlite, Backend::Postgres] {
        let Some(backend) = backend.or_skip("an_upload_answers_before_its_vectors") else {
            continue;
        };
        let Some(dir) = troupe_e2e::env::minilm_dir() else {
            return;
        };
        upload_then_vectors_follow(backend, &dir).await;
    }
}

async fn upload_then_vectors_follow(backend: Backend, dir: &Path) {
    let app = TestApp::spawn(
        TestAppOptions::new(backend)
            .persona("Ada", "A harbour guide.")
            .env("TROUPE_EMBEDDING_PROVIDER", "local")
            .env("TROUPE_EMBEDDING_MODEL_DIR", dir.to_str().unwrap())
            .env("TROUPE_KNOWLEDGE_CHUNK_TOKENS", "48")
            .env("TROUPE_KNOWLEDGE_CHUNK_OVERLAP", "0"),
    )
    .await;
    // A lamp ledger of many entries, with the harbour's hours in the middle: no word of
    // the paraphrase is in it.
    let mut ledger = String::new();
    for i in 0..1200 {
        if i == 600 {
            ledger.push_str("The harbour office closes at five on Fridays.\n\n");
        }
        ledger.push_str(&format!(
            "Lamp log {i}: the lighthouse lamp was polished and its brass fittings cleaned with vinegar.\n\n"
        ));
    }
    let goats = "Chamois graze on the high alpine meadows all summer long.";
    let (status, body) = app
        .upload(
            "ada",
            &[
                Part::File("ledger.txt", "text/plain", ledger.as_bytes()),
                Part::File("alps.txt", "text/plain", goats.as_bytes()),
            ],
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (done, total) = app.vectors("ada").await;
    assert!(
        total > 300,
        "the ledger is too small to prove anything: {total} chunks"
    );
    assert!(
        done < total,
        "the upload waited for its vectors ({done} of {total})"
    );
    // Found by its words at once; not yet by its meaning.
    assert_eq!(
        sources(&app, "harbour%20office")
            .await
            .first()
            .map(String::as_str),
        Some("ledger.txt")
    );
    app.wait_for_vectors("ada", std::time::Duration::from_secs(300))
        .await;
    assert_eq!(
        sources(&app, PARAPHRASE).await.first().map(String::as_str),
        Some("ledger.txt")
    );
    let (_, ada) = app.get("/api/agents/ada").await;
    assert_eq!(ada["knowledge"]["chunksWithVectors"], json!(total), "{ada}");
}
