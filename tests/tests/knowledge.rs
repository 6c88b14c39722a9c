//! End-to-end tests of knowledge: documents uploaded over HTTP (or named by the character
//! file) reach the prompt that the fake model receives, in their room only, until deleted.
//! Each body runs on SQLite and on Postgres (`TROUPE_TEST_DATABASE_URL`). An upload of
//! several fields is all or nothing, its fields in any order (issue 12, finding 6).

use reqwest::StatusCode;
use serde_json::{Value, json};
use troupe_e2e::multipart::Part;
use troupe_e2e::{Backend, FakeOpenAi, TestApp, TestAppOptions, persona_json, troupe_bin};

const AGENT: &str = "Ada";
const BIO: &str = "Ada keeps the harbour office and answers questions about the island.";

troupe_e2e::on_each_backend!(
    an_uploaded_document_reaches_the_prompt_with_its_source,
    a_room_document_stays_in_its_room,
    a_deleted_document_leaves_the_answers,
    oversized_and_binary_uploads_are_refused_clearly,
    identical_uploads_are_stored_once_and_listed,
    character_knowledge_is_ingested_once_at_start,
    with_an_embedding_model_chunks_and_queries_are_embedded,
    troupe_ingest_adds_a_directory_and_reembeds,
    a_room_id_after_the_file_scopes_it,
    too_many_files_store_nothing,
    one_bad_file_stores_nothing_of_its_upload,
);

/// A handbook in sections, each on its own subject, so that chunks are told apart.
const HANDBOOK: &str = "# Ferries\n\n\
The night ferry to Skerry leaves at 23:40 from pier seven. Tickets are sold on board.\n\n\
# Lamps\n\n\
The lighthouse lamp is polished every Sunday with a soft chamois cloth and vinegar.\n\n\
# Gardens\n\n\
Roses and sea thyme grow in the walled garden behind the chapel; the gate is green.\n";

async fn spawn(backend: Backend, fake: &FakeOpenAi, extra: &[(&str, &str)]) -> TestApp {
    let mut options = TestAppOptions::new(backend)
        .persona(AGENT, BIO)
        .openai(fake)
        // Small chunks, so one handbook becomes several and only the relevant one is sent.
        .env("TROUPE_KNOWLEDGE_CHUNK_TOKENS", "40")
        .env("TROUPE_KNOWLEDGE_CHUNK_OVERLAP", "0");
    for (k, v) in extra {
        options = options.env(k, v);
    }
    TestApp::spawn(options).await
}

/// `POST /api/agents/{agent}/documents` of one `file`, after `roomId` when given.
async fn upload(
    app: &TestApp,
    room: Option<&str>,
    file_name: &str,
    content_type: &str,
    bytes: &[u8],
) -> (StatusCode, Value) {
    let file = Part::File(file_name, content_type, bytes);
    match room {
        Some(room) => app.upload(AGENT, &[Part::Room(room), file]).await,
        None => app.upload(AGENT, &[file]).await,
    }
}

/// Uploads [`HANDBOOK`] agent-wide; the answer, once it says the handbook is stored.
async fn upload_the_handbook(app: &TestApp) -> Value {
    let (status, body) = upload(
        app,
        None,
        "handbook.md",
        "text/markdown",
        HANDBOOK.as_bytes(),
    )
    .await;
    uploaded_id(status, &body);
    body
}

async fn read(response: reqwest::Response) -> (StatusCode, Value) {
    let status = response.status();
    let text = response.text().await.expect("response body");
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

async fn delete(app: &TestApp, id: &str) -> (StatusCode, Value) {
    let response = app
        .client()
        .delete(app.url(&format!("/api/agents/{AGENT}/documents/{id}")))
        .send()
        .await
        .expect("DELETE document");
    read(response).await
}

/// Asks in `room` and returns the prompt the model received for it.
async fn prompt_for(app: &TestApp, fake: &FakeOpenAi, room: &str, text: &str) -> String {
    let before = fake.request_count();
    let (status, body) = app
        .post_message(
            AGENT,
            &json!({"roomId": room, "userId": "u-sam", "userName": "Sam", "text": text}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let requests = fake.requests();
    assert_eq!(requests.len(), before + 1, "one model call per message");
    requests[before].prompt_text()
}

fn uploaded_id(status: StatusCode, body: &Value) -> String {
    assert_eq!(status, StatusCode::CREATED, "{body}");
    body["id"]
        .as_str()
        .unwrap_or_else(|| panic!("no id in {body}"))
        .to_string()
}

async fn an_uploaded_document_reaches_the_prompt_with_its_source(backend: Backend) {
    let fake = FakeOpenAi::start().await;
    let app = spawn(backend, &fake, &[]).await;
    let body = upload_the_handbook(&app).await;
    assert!(body["chunks"].as_u64().unwrap() >= 3, "{body}");
    assert_eq!(body["duplicate"], json!(false));

    let prompt = prompt_for(
        &app,
        &fake,
        "r1",
        "When does the night ferry to Skerry leave?",
    )
    .await;
    assert!(prompt.contains("# Knowledge"), "{prompt}");
    assert!(prompt.contains("From handbook.md:"), "{prompt}");
    assert!(
        prompt.contains("leaves at 23:40 from pier seven"),
        "{prompt}"
    );
    // The matching chunk, not the whole document.
    assert!(!prompt.contains("chamois"), "{prompt}");
    assert!(!prompt.contains("walled garden"), "{prompt}");

    // Search shows the same chunk, with a score and its source.
    let (status, found) = app
        .get(&format!(
            "/api/agents/{AGENT}/knowledge/search?q=night%20ferry&limit=2"
        ))
        .await;
    assert_eq!(status, StatusCode::OK, "{found}");
    let first = &found["results"][0];
    assert_eq!(first["source"], json!("handbook.md"), "{found}");
    assert!(first["text"].as_str().unwrap().contains("23:40"), "{found}");
    assert!(first["score"].as_f64().unwrap() > 0.0, "{found}");
    assert!(
        first["chunkId"].as_str().unwrap().ends_with(":0"),
        "{found}"
    );
    // The citation: which document, which chunk of it.
    assert_eq!(first["chunk"], json!(0), "{found}");
    assert!(first["documentId"].as_str().is_some(), "{found}");
    let (status, err) = app
        .get(&format!("/api/agents/{AGENT}/knowledge/search"))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{err}");
    assert!(err["detail"].as_str().unwrap().contains("`q`"), "{err}");
    let (status, err) = app
        .get(&format!(
            "/api/agents/{AGENT}/knowledge/search?q=x&limit=lots"
        ))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{err}");
    assert!(err["detail"].as_str().unwrap().contains("limit"), "{err}");
}

async fn a_room_document_stays_in_its_room(backend: Backend) {
    let fake = FakeOpenAi::start().await;
    let app = spawn(backend, &fake, &[]).await;
    let (status, body) = upload(
        &app,
        Some("r1"),
        "vault.txt",
        "text/plain",
        b"The harbour vault code is 4417; change it every spring.",
    )
    .await;
    uploaded_id(status, &body);
    assert_eq!(body["roomId"], json!("web:r1"), "{body}");

    let in_r1 = prompt_for(&app, &fake, "r1", "What is the vault code?").await;
    assert!(
        in_r1.contains("4417") && in_r1.contains("From vault.txt:"),
        "{in_r1}"
    );
    let in_r2 = prompt_for(&app, &fake, "r2", "What is the vault code?").await;
    assert!(
        !in_r2.contains("4417"),
        "another room's document leaked:\n{in_r2}"
    );
    assert!(!in_r2.contains("vault.txt"), "{in_r2}");

    let search = |room: &'static str| {
        let app = &app;
        async move {
            let (status, found) = app
                .get(&format!(
                    "/api/agents/{AGENT}/knowledge/search?q=vault%20code&roomId={room}"
                ))
                .await;
            assert_eq!(status, StatusCode::OK, "{found}");
            found["results"].as_array().unwrap().len()
        }
    };
    assert_eq!(search("r1").await, 1);
    assert_eq!(search("web:r1").await, 1);
    assert_eq!(search("r2").await, 0);
}

async fn a_deleted_document_leaves_the_answers(backend: Backend) {
    let fake = FakeOpenAi::start().await;
    let app = spawn(backend, &fake, &[]).await;
    let (status, body) = upload(
        &app,
        None,
        "tides.txt",
        "text/plain",
        b"High tide at the north jetty is at 06:12 tomorrow.",
    )
    .await;
    let id = uploaded_id(status, &body);
    let before = prompt_for(&app, &fake, "r1", "When is high tide at the jetty?").await;
    assert!(before.contains("06:12"), "{before}");

    let (status, body) = delete(&app, &id).await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    let after = prompt_for(&app, &fake, "r1", "When is high tide at the jetty, again?").await;
    assert!(
        !after.contains("06:12"),
        "a deleted document still answers:\n{after}"
    );
    assert!(!after.contains("# Knowledge"), "{after}");

    let (status, body) = delete(&app, &id).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert!(body["detail"].as_str().unwrap().contains(&id), "{body}");
    let (status, listed) = app.get(&format!("/api/agents/{AGENT}/documents")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(listed["documents"], json!([]), "{listed}");
}

async fn oversized_and_binary_uploads_are_refused_clearly(backend: Backend) {
    let fake = FakeOpenAi::start().await;
    let app = spawn(
        backend,
        &fake,
        &[("TROUPE_KNOWLEDGE_MAX_FILE_BYTES", "1000")],
    )
    .await;

    let big = "All work and no play. ".repeat(100);
    let (status, body) = upload(&app, None, "big.txt", "text/plain", big.as_bytes()).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{body}");
    assert_eq!(body["error"], json!("payload_too_large"), "{body}");
    let detail = body["detail"].as_str().unwrap();
    assert!(
        detail.contains("big.txt")
            && detail.contains("1000")
            && detail.contains("TROUPE_KNOWLEDGE_MAX_FILE_BYTES"),
        "{detail}"
    );

    let png = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x01\0\0\0\x01\x08\x06\0\0\0";
    let (status, body) = upload(&app, None, "photo.png", "image/png", png).await;
    assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE, "{body}");
    let detail = body["detail"].as_str().unwrap();
    assert!(
        detail.contains("photo.png") && detail.contains("PNG"),
        "{detail}"
    );
    assert!(
        detail.contains("Markdown"),
        "says what is accepted: {detail}"
    );

    let (status, body) = upload(&app, None, "blob", "application/octet-stream", b"a\0b\0c").await;
    assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE, "{body}");

    // Not multipart at all: a clear 400, not a panic.
    let (status, body) = app
        .post_raw(
            &format!("/api/agents/{AGENT}/documents"),
            "{}",
            "application/json",
            None,
        )
        .await;
    assert!(status.is_client_error(), "{status}: {body}");
    assert!(body["detail"].is_string(), "{body}");

    let (_, listed) = app.get(&format!("/api/agents/{AGENT}/documents")).await;
    assert_eq!(listed["documents"], json!([]), "{listed}");
    // The gateway is still well.
    let (status, _) = upload(&app, None, "ok.txt", "text/plain", b"small and fine").await;
    assert_eq!(status, StatusCode::CREATED);
}

async fn identical_uploads_are_stored_once_and_listed(backend: Backend) {
    let fake = FakeOpenAi::start().await;
    let app = spawn(backend, &fake, &[]).await;
    let text = b"The chapel bell rings at noon and at six.";
    let (status, first) = upload(&app, None, "bell.txt", "text/plain", text).await;
    let id = uploaded_id(status, &first);
    let (status, again) = upload(&app, None, "bell-copy.txt", "text/plain", text).await;
    assert_eq!(status, StatusCode::OK, "{again}");
    assert_eq!(again["duplicate"], json!(true), "{again}");
    assert_eq!(again["id"], json!(id), "{again}");
    let (status, in_room) = upload(&app, Some("r1"), "bell.txt", "text/plain", text).await;
    let room_id = uploaded_id(status, &in_room);
    assert_ne!(room_id, id);

    let (status, listed) = app.get(&format!("/api/agents/{AGENT}/documents")).await;
    assert_eq!(status, StatusCode::OK, "{listed}");
    let docs = listed["documents"].as_array().unwrap();
    assert_eq!(docs.len(), 2, "{listed}");
    let agent_wide = docs.iter().find(|d| d["id"] == json!(id)).unwrap();
    assert_eq!(agent_wide["source"], json!("bell.txt"));
    assert_eq!(agent_wide["roomId"], Value::Null);
    assert_eq!(agent_wide["chunks"], json!(1));
    assert_eq!(agent_wide["origin"], json!("upload"));
    let (_, r1) = app
        .get(&format!("/api/agents/{AGENT}/documents?roomId=r1"))
        .await;
    assert_eq!(r1["documents"].as_array().unwrap().len(), 1, "{r1}");
    assert_eq!(r1["documents"][0]["roomId"], json!("web:r1"), "{r1}");
    let (status, _) = app.get("/api/agents/nobody/documents").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

/// Finding 6: a `roomId` after the `file` got 400 with the file already stored for every
/// room. Now the order does not matter, and the document is the room's only.
async fn a_room_id_after_the_file_scopes_it(backend: Backend) {
    let fake = FakeOpenAi::start().await;
    let app = spawn(backend, &fake, &[]).await;
    let (status, body) = app
        .upload(
            AGENT,
            &[
                Part::File(
                    "vault.txt",
                    "text/plain",
                    b"The harbour vault code is 4417; change it every spring.",
                ),
                Part::Room("r1"),
            ],
        )
        .await;
    uploaded_id(status, &body);
    assert_eq!(body["roomId"], json!("web:r1"), "{body}");
    let docs = listed(&app).await;
    assert_eq!(docs.len(), 1, "{docs:?}");
    assert_eq!(docs[0]["roomId"], json!("web:r1"), "{docs:?}");
    let in_r2 = prompt_for(&app, &fake, "r2", "What is the vault code?").await;
    assert!(
        !in_r2.contains("4417"),
        "another room's document leaked:\n{in_r2}"
    );
    let in_r1 = prompt_for(&app, &fake, "r1", "What is the vault code?").await;
    assert!(in_r1.contains("4417"), "{in_r1}");

    // Two rooms for one upload is a mistake, refused before anything is stored.
    let (status, body) = app
        .upload(
            AGENT,
            &[
                Part::Room("r1"),
                Part::File("other.txt", "text/plain", b"Another harbour fact."),
                Part::Room("r2"),
            ],
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(listed(&app).await.len(), 1);
}

/// Finding 6: 21 files got 413 with 20 of them stored.
async fn too_many_files_store_nothing(backend: Backend) {
    let fake = FakeOpenAi::start().await;
    let app = spawn(backend, &fake, &[]).await;
    let texts: Vec<(String, String)> = (0..21)
        .map(|i| (format!("note-{i}.txt"), format!("Harbour note number {i}.")))
        .collect();
    let parts: Vec<Part<'_>> = texts
        .iter()
        .map(|(name, text)| Part::File(name, "text/plain", text.as_bytes()))
        .collect();
    let (status, body) = app.upload(AGENT, &parts).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{body}");
    assert_eq!(body["error"], json!("too_many_files"), "{body}");
    assert!(
        listed(&app).await.is_empty(),
        "a refused upload stored files"
    );

    // Twenty is the limit, and all twenty are stored.
    let (status, body) = app.upload(AGENT, &parts[..20]).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body["documents"].as_array().unwrap().len(), 20, "{body}");
    assert_eq!(listed(&app).await.len(), 20);
}

/// Finding 6: a bad file among good ones leaves nothing of the upload stored, whatever
/// its place.
async fn one_bad_file_stores_nothing_of_its_upload(backend: Backend) {
    let fake = FakeOpenAi::start().await;
    let app = spawn(backend, &fake, &[]).await;
    let png = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x01\0\0\0\x01\x08\x06\0\0\0";
    let good = Part::File("good.txt", "text/plain", b"The pier lamp is lit at dusk.");
    let also = Part::File("also.txt", "text/plain", b"The ferry bell rings twice.");
    let (status, body) = app
        .upload(
            AGENT,
            &[good, Part::File("photo.png", "image/png", png), also],
        )
        .await;
    assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE, "{body}");
    assert!(
        body["detail"].as_str().unwrap().contains("photo.png"),
        "{body}"
    );
    assert!(
        listed(&app).await.is_empty(),
        "the good files of a failed upload were stored"
    );

    // Unreadable (no text in it) as the last of three.
    let (status, body) = app
        .upload(
            AGENT,
            &[
                Part::File("good.txt", "text/plain", b"The pier lamp is lit at dusk."),
                Part::File("also.txt", "text/plain", b"The ferry bell rings twice."),
                Part::File("empty.txt", "text/plain", b"   \n  "),
            ],
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert!(listed(&app).await.is_empty());
    let prompt = prompt_for(&app, &fake, "r1", "When is the pier lamp lit?").await;
    assert!(!prompt.contains("dusk"), "{prompt}");
}

async fn character_knowledge_is_ingested_once_at_start(backend: Backend) {
    let fake = FakeOpenAi::start().await;
    let dir = tempfile::tempdir().unwrap();
    let facts = dir.path().join("facts.md");
    std::fs::write(
        &facts,
        "# Dog\n\nThe keeper's dog is a collie named Pilot.\n",
    )
    .unwrap();
    let mut character = persona_json(AGENT, BIO);
    character["knowledge"] = json!([
        "The harbour office closes at five on Fridays.",
        {"path": facts.display().to_string()},
    ]);
    let mut app = TestApp::spawn(
        TestAppOptions::new(backend)
            .persona_file("ada.json", character)
            .openai(&fake)
            // The file is outside the personas directory: the operator allows its directory.
            .env(
                "TROUPE_KNOWLEDGE_ALLOW_PATHS",
                &dir.path().display().to_string(),
            ),
    )
    .await;
    let docs = listed(&app).await;
    assert_eq!(docs.len(), 2, "{docs:?}");
    assert!(
        docs.iter().all(|d| d["origin"] == json!("character")),
        "{docs:?}"
    );

    let prompt = prompt_for(&app, &fake, "r1", "What is the keeper's dog called?").await;
    assert!(
        prompt.contains("named Pilot") && prompt.contains("facts.md"),
        "{prompt}"
    );

    // A restart finds the same content and adds nothing.
    app.restart().await;
    let again = listed(&app).await;
    let ids = |d: &[Value]| {
        let mut ids: Vec<String> = d.iter().map(|d| d["id"].to_string()).collect();
        ids.sort();
        ids
    };
    assert_eq!(ids(&again), ids(&docs));
}

async fn listed(app: &TestApp) -> Vec<Value> {
    let (status, listed) = app.get(&format!("/api/agents/{AGENT}/documents")).await;
    assert_eq!(status, StatusCode::OK, "{listed}");
    listed["documents"].as_array().unwrap().clone()
}

async fn with_an_embedding_model_chunks_and_queries_are_embedded(backend: Backend) {
    let fake = FakeOpenAi::start().await;
    let app = spawn(
        backend,
        &fake,
        &[("TROUPE_EMBEDDING_MODEL", "text-embedding-3-small")],
    )
    .await;
    upload_the_handbook(&app).await;
    // The upload answers before its chunks are embedded; they follow in the background.
    app.wait_for_vectors(&AGENT.to_lowercase(), troupe_e2e::WAIT)
        .await;
    let embedded: Vec<String> = fake
        .embedding_requests()
        .iter()
        .flat_map(|r| r.inputs.clone())
        .collect();
    assert!(
        embedded.iter().any(|t| t.contains("night ferry to Skerry")),
        "{embedded:?}"
    );
    assert!(
        fake.embedding_requests()
            .iter()
            .all(|r| r.body["model"] == json!("text-embedding-3-small")),
    );

    let prompt = prompt_for(
        &app,
        &fake,
        "r1",
        "When does the night ferry to Skerry leave?",
    )
    .await;
    assert!(prompt.contains("leaves at 23:40"), "{prompt}");
    let queries: Vec<String> = fake
        .embedding_requests()
        .iter()
        .flat_map(|r| r.inputs.clone())
        .collect();
    assert!(
        queries
            .iter()
            .any(|t| t == "When does the night ferry to Skerry leave?"),
        "the query was not embedded: {queries:?}"
    );
    assert!(
        !app.logs().contains(fake.api_key().unwrap()),
        "the API key reached the logs"
    );
}

/// Runs `troupe ingest ARGS` against the app's database and personas, with the fake as the
/// embedding API; returns (exit code, stdout, stderr).
async fn troupe_ingest(app: &TestApp, fake: &FakeOpenAi, args: &[&str]) -> (i32, String, String) {
    let mut cmd = tokio::process::Command::new(troupe_bin());
    cmd.arg("ingest")
        .args(args)
        .current_dir(app.data_dir())
        .env("TROUPE_DATABASE_URL", app.database_url())
        .env("TROUPE_PERSONAS", app.data_dir().join("personas"))
        .env("TROUPE_EMBEDDING_MODEL", "text-embedding-3-small")
        .env("OPENAI_BASE_URL", fake.base_url())
        .env("OPENAI_API_KEY", fake.api_key().unwrap())
        .env("NO_PROXY", "127.0.0.1,localhost")
        .env("no_proxy", "127.0.0.1,localhost")
        .env_remove("TROUPE_CONFIG");
    let out = cmd.output().await.expect("run troupe ingest");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

async fn troupe_ingest_adds_a_directory_and_reembeds(backend: Backend) {
    let fake = FakeOpenAi::start().await;
    let app = spawn(backend, &fake, &[]).await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("sub")).unwrap();
    std::fs::write(dir.path().join("ferries.md"), HANDBOOK).unwrap();
    std::fs::write(
        dir.path().join("sub/prices.csv"),
        "item,price\nnight ferry ticket,12 crowns\n",
    )
    .unwrap();
    std::fs::write(dir.path().join("sub/photo.png"), b"\x89PNG\r\n\x1a\n\0\0").unwrap();
    std::fs::write(dir.path().join(".hidden.txt"), "never read").unwrap();
    let target = dir.path().display().to_string();

    let (code, stdout, stderr) = troupe_ingest(&app, &fake, &["--agent", AGENT, &target]).await;
    // The PNG is skipped with its reason, so the exit code says something failed.
    assert_eq!(code, 1, "stdout: {stdout}\nstderr: {stderr}");
    assert!(
        stderr.contains("photo.png") && stderr.contains("PNG"),
        "{stderr}"
    );
    assert!(stdout.contains("2 document(s) added"), "{stdout}");
    let docs = listed(&app).await;
    assert_eq!(docs.len(), 2, "{docs:?}");
    assert!(docs.iter().all(|d| d["origin"] == json!("cli")), "{docs:?}");
    // Every chunk was embedded as it was ingested.
    let chunks: u64 = docs.iter().map(|d| d["chunks"].as_u64().unwrap()).sum();
    let embedded_at_ingest: usize = fake
        .embedding_requests()
        .iter()
        .map(|r| r.inputs.len())
        .sum();
    assert_eq!(embedded_at_ingest, chunks as usize);

    // Again: everything is known, nothing is added.
    let (_, stdout, _) = troupe_ingest(&app, &fake, &["--agent", "ada", &target]).await;
    assert!(
        stdout.contains("0 document(s) added") && stdout.contains("2 already known"),
        "{stdout}"
    );

    // --reembed embeds every chunk once more.
    let before: usize = fake
        .embedding_requests()
        .iter()
        .map(|r| r.inputs.len())
        .sum();
    let (code, stdout, stderr) = troupe_ingest(&app, &fake, &["--agent", AGENT, "--reembed"]).await;
    assert_eq!(code, 0, "stdout: {stdout}\nstderr: {stderr}");
    assert!(
        stdout.contains(&format!("{chunks} chunk(s) embedded")),
        "{stdout}"
    );
    let after: usize = fake
        .embedding_requests()
        .iter()
        .map(|r| r.inputs.len())
        .sum();
    assert_eq!(after - before, chunks as usize);

    let (code, _, stderr) = troupe_ingest(&app, &fake, &["--agent", "nobody", &target]).await;
    assert_ne!(code, 0);
    assert!(stderr.contains("no persona `nobody`"), "{stderr}");
    assert!(!stderr.contains(fake.api_key().unwrap()));
}

/// The sources `GET /knowledge/search?q=` finds through `app`.
async fn found_sources(app: &TestApp, q: &str) -> Vec<String> {
    app.search_sources(AGENT, q, 5).await
}

/// Two replicas on one Postgres database, each with its own keyword index: a document
/// uploaded through A is found through B once B's index has followed the change sequence,
/// and a delete through B leaves A's results; both report a caught-up index in `/readyz`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_follow_each_others_uploads_and_deletes() {
    if troupe_e2e::env::postgres_url("two_replicas_follow_each_others_uploads_and_deletes")
        .is_none()
    {
        return;
    }
    let fake = FakeOpenAi::start().await;
    let a = spawn(Backend::Postgres, &fake, &[("TROUPE_INDEX_POLL_MS", "100")]).await;
    let b = TestApp::spawn(a.replica_options()).await;
    let wait = std::time::Duration::from_secs(30);

    let (status, body) = upload(
        &a,
        None,
        "handbook.md",
        "text/markdown",
        HANDBOOK.as_bytes(),
    )
    .await;
    let id = uploaded_id(status, &body);
    assert_eq!(found_sources(&a, "night%20ferry").await, ["handbook.md"]);
    troupe_e2e::eventually(
        "replica B finds the upload made through A",
        wait,
        || async { found_sources(&b, "night%20ferry").await == ["handbook.md"] },
    )
    .await;

    let (status, body) = delete(&b, &id).await;
    assert!(status.is_success(), "{status} {body}");
    assert!(found_sources(&b, "night%20ferry").await.is_empty());
    troupe_e2e::eventually("replica A no longer finds what B deleted", wait, || async {
        found_sources(&a, "night%20ferry").await.is_empty()
    })
    .await;
    for app in [&a, &b] {
        troupe_e2e::eventually("the replica's index has caught up", wait, || async {
            let (_, ready) = app.get("/readyz").await;
            let index = &ready["knowledgeIndex"];
            index["lag"] == json!(0) && index["applied"].as_i64().is_some_and(|n| n >= 2)
        })
        .await;
    }
}

/// A document just under the size limit is read by `troupe ingest` through the extract
/// workers with their default address-space limit (`TROUPE_EXTRACT_MEMORY_MB`, 512). The
/// workers are this executable, on its allocator: jemalloc's default of keeping freed
/// address space mapped (`retain`) crashed the worker on a 52 MB document that glibc's
/// malloc read in the same limit, so the worker runs with its own allocator options.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_document_at_the_size_limit_is_read_within_the_workers_memory() {
    let dir = tempfile::tempdir().unwrap();
    let personas = dir.path().join("personas");
    std::fs::create_dir_all(&personas).unwrap();
    std::fs::write(
        personas.join("ada.json"),
        serde_json::to_vec(&persona_json(AGENT, BIO)).unwrap(),
    )
    .unwrap();
    // Prose-like Markdown from a fixed generator: words of a 5,000-word vocabulary in
    // sentences and paragraphs under headings, 1 KiB under the default limit of 50 MiB.
    let target = (50 << 20) - 1024;
    let mut text = String::with_capacity(target);
    let mut state: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut section = 0;
    while text.len() < target - 200 {
        if next() % 40 == 0 {
            section += 1;
            text.push_str(&format!("\n## Section {section}\n\n"));
        }
        for i in 0..(6 + next() % 14) {
            if i > 0 {
                text.push(' ');
            }
            text.push_str(&format!("w{}", next() % 5_000));
        }
        text.push_str(if next() % 6 == 0 { ".\n\n" } else { ". " });
    }
    let file = dir.path().join("big.md");
    std::fs::write(&file, &text).unwrap();
    drop(text);

    let out = tokio::process::Command::new(troupe_bin())
        .args(["ingest", "--agent", AGENT])
        .arg(&file)
        .current_dir(dir.path())
        .env(
            "TROUPE_DATABASE_URL",
            format!("sqlite://{}", dir.path().join("troupe.db").display()),
        )
        .env("TROUPE_PERSONAS", &personas)
        .env("TROUPE_INDEX_DIR", dir.path().join("index"))
        .env_remove("TROUPE_CONFIG")
        .env_remove("TROUPE_EXTRACT_MEMORY_MB")
        // What is tested is the worker's memory, not its speed: the default deadline (20 s)
        // was missed on a machine under a load of 16, so this run allows ten minutes.
        .env("TROUPE_EXTRACT_TIMEOUT_SECS", "600")
        .output()
        .await
        .expect("run troupe ingest");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        out.status.success() && stdout.contains("1 document(s) added"),
        "status {:?}\nstdout: {stdout}\nstderr: {stderr}",
        out.status
    );
}
