//! The console in a real browser: headless Chromium (Debian's `chromium` and
//! `chromium-driver`) against the real binary and the fake model. Each test drives the page
//! as a person would (typing, clicking, dropping files) and checks both what the page shows
//! and what reached the gateway or the model, so that a page that only looks right fails.
//!
//! Outside CI a machine without chromium skips these with a note; under `CI=true` they fail.
//! With `TROUPE_SCREENSHOTS_DIR` set, the tests save a PNG of each page there (the ones in
//! docs/console/ were taken so), and the first test prints the console's first load.
//!
//! `console/guards.rs` has the tests of what a page does when the server is slow or says
//! no: answers out of order, and the new-persona form's errors.

use serde_json::{Value, json};
use std::time::Duration;
use troupe_e2e::browser::{Browser, screenshots_dir};
use troupe_e2e::{Backend, FakeOpenAi, TestApp, TestAppOptions, eventually, persona_json};

#[path = "console/guards.rs"]
mod guards;

const AGENT: &str = "ada";
const BIO: &str = "Ada keeps the harbour office and answers questions about the island.";

const FERRIES: &str = "# Ferries\n\nThe night ferry to Skerry leaves at 23:40 from pier seven. \
                       Tickets are sold on board.\n";
const LAMPS: &str = "# Lamps\n\nThe lighthouse lamp is polished every Sunday with a soft \
                     chamois cloth and vinegar.\n";

async fn spawn(fake: &FakeOpenAi, token: Option<&str>) -> TestApp {
    // On every platform, none with a token: the Personas page says what to set.
    let mut ada = persona_json("Ada", BIO);
    ada["clients"] = json!(["discord", "telegram", "farcaster"]);
    let mut options = TestAppOptions::new(Backend::Sqlite)
        .persona_file("ada.json", ada)
        .openai(fake)
        .env("DISCORD_APPLICATION_ID", "123456789012345678")
        .env("FARCASTER_FID", "4242")
        .env("TROUPE_RATE_API_PER_MIN", "0");
    if let Some(t) = token {
        options = options.api_token(t);
    }
    TestApp::spawn(options).await
}

async fn shot(browser: &Browser, name: &str) {
    if let Some(dir) = screenshots_dir() {
        browser.screenshot(&dir, name).await;
    }
}

/// Opens a page of the console and waits until it has drawn.
async fn open(browser: &Browser, app: &TestApp, page: &str, query: &str) {
    // From a blank page, so the console loads afresh and draws this page once.
    browser.goto("about:blank").await;
    browser.goto(&app.url(&format!("/#/{page}?{query}"))).await;
    browser
        .wait_for(
            &format!("the {page} page"),
            &format!("document.body.dataset.ready === '{page}'"),
        )
        .await;
}

/// Drops the two knowledge files most tests search and waits until both are listed.
async fn drop_ferries_and_lamps(browser: &Browser) {
    drop_files(browser, &[("ferries.md", FERRIES), ("lamps.md", LAMPS)]).await;
    browser
        .wait_for(
            "both files listed",
            &format!(
                "{} && {}",
                document_row("ferries.md"),
                document_row("lamps.md")
            ),
        )
        .await;
}

/// Drops `files` (name, text) on the Knowledge page's drop zone, as a drag from the desktop
/// does: one `drop` event whose DataTransfer holds them all.
async fn drop_files(browser: &Browser, files: &[(&str, &str)]) {
    let files: Vec<Value> = files
        .iter()
        .map(|(name, text)| json!({"name": name, "text": text}))
        .collect();
    browser
        .run(
            "const dt = new DataTransfer();
             for (const f of arguments[0]) dt.items.add(new File([f.text], f.name, {type: 'text/markdown'}));
             const zone = document.getElementById('drop');
             zone.dispatchEvent(new DragEvent('dragover', {dataTransfer: dt, bubbles: true, cancelable: true}));
             zone.dispatchEvent(new DragEvent('drop', {dataTransfer: dt, bubbles: true, cancelable: true}));",
            json!([files]),
        )
        .await;
}

/// The console has drawn its first page.
const CONSOLE_READY: &str = "document.body && document.body.dataset.ready === 'personas' && performance.getEntriesByName('console-interactive').length > 0";

/// The median over seven loads of `url` of the time from navigation start until `ready`
/// holds (the `console-interactive` mark for the console, the load event otherwise).
/// Measured, never asserted: it goes to docs/benchmarks.md.
async fn median_load(browser: &Browser, url: &str, ready: &str) -> f64 {
    let mut times = Vec::new();
    for _ in 0..7 {
        browser.goto("about:blank").await;
        browser.goto(url).await;
        browser.wait_for("the page loaded", ready).await;
        let ms = browser
            .run(
                "const m = performance.getEntriesByName('console-interactive')[0];
                 return m ? m.startTime : performance.getEntriesByType('navigation')[0].loadEventEnd;",
                json!([]),
            )
            .await;
        times.push(ms.as_f64().expect("a time"));
    }
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}

/// Text that looks like a raw retrieval score: `score 0.0000437`, `4.37e-6`.
fn has_raw_score(text: &str) -> bool {
    text.contains("score ")
        || text.split_whitespace().any(|w| {
            w.parse::<f64>()
                .is_ok_and(|v| v.fract() != 0.0 && (w.contains("e-") || w.len() > 6))
        })
}

/// Each persona card's table stays inside the card's border, and each card inside the page,
/// at the browser's width and in a narrow page (a phone's).
async fn assert_cards_hold_their_tables(browser: &Browser) {
    for width in ["", "380px"] {
        let overflow = browser
            .run(
                "document.querySelector('main').style.maxWidth = arguments[0];
                 const main = document.querySelector('main').getBoundingClientRect();
                 return Array.from(document.querySelectorAll('.persona')).flatMap((card) => {
                   const c = card.getBoundingClientRect();
                   const t = card.querySelector('table').getBoundingClientRect();
                   const out = [];
                   if (t.right > c.right + 0.5 || card.scrollWidth > card.clientWidth) out.push(`${card.dataset.agent}: table ${t.right} > card ${c.right}`);
                   if (c.right > main.right + 0.5) out.push(`${card.dataset.agent}: card ${c.right} > page ${main.right}`);
                   return out;
                 });",
                json!([width]),
            )
            .await;
        assert_eq!(overflow, json!([]), "width {width:?}: {overflow}");
    }
    browser
        .run(
            "document.querySelector('main').style.maxWidth = '';",
            json!([]),
        )
        .await;
}

fn document_row(source: &str) -> String {
    format!("document.querySelector('#documents tr[data-source=\"{source}\"]')")
}

/// The personas page: its first load and warm loads measured by the browser itself
/// (reported in docs/benchmarks.md), and Ada's card with what each platform needs.
async fn personas_page_shows_adas_card(browser: &Browser, app: &TestApp) {
    browser.goto(&app.url("/")).await;
    browser
        .wait_for(
            "the personas page with Ada",
            "document.body.dataset.ready === 'personas' && document.querySelector('.persona[data-agent=\"ada\"]')",
        )
        .await;
    let timing = browser
        .run(
            "const n = performance.getEntriesByType('navigation')[0];
             const m = performance.getEntriesByName('console-interactive')[0];
             return {domInteractive: n.domInteractive, interactive: m.startTime, load: n.loadEventEnd};",
            json!([]),
        )
        .await;
    eprintln!("console first load (ms since navigation start): {timing}");
    let card = browser
        .run(
            "const card = document.querySelector('.persona[data-agent=\"ada\"]');
             const row = (p) => card.querySelector(`tr[data-platform=\"${p}\"]`);
             return {text: card.innerText,
                     discord: row('discord').innerText,
                     invite: row('discord').querySelector('a').href,
                     farcaster: row('farcaster').querySelector('a').href};",
            json!([]),
        )
        .await;
    assert!(
        card["text"]
            .as_str()
            .unwrap_or("")
            .contains("provider configured"),
        "{card}"
    );
    assert!(
        card["discord"]
            .as_str()
            .unwrap_or("")
            .contains("not configured: set DISCORD_API_TOKEN"),
        "{card}"
    );
    assert_eq!(
        card["invite"],
        "https://discord.com/oauth2/authorize?client_id=123456789012345678\
         &scope=bot%20applications.commands&permissions=70644159056960"
    );
    assert_eq!(card["farcaster"], "https://farcaster.xyz/~/profiles/4242");
    assert_cards_hold_their_tables(browser).await;
    shot(browser, "personas").await;
    // Warm loads, against a same-run reference: the gateway's smallest page, /healthz.
    let warm = median_load(browser, &app.url("/"), CONSOLE_READY).await;
    let reference = median_load(browser, &app.url("/healthz"), "document.readyState === 'complete' && performance.getEntriesByType('navigation')[0].loadEventEnd > 0").await;
    eprintln!(
        "console warm load to interactive: median {warm:.1} ms; /healthz load: median {reference:.1} ms; ratio {:.1}",
        warm / reference.max(0.1)
    );
}

/// The why panel's passage from the uploaded ferries document shows its relevance as a rank, for a reader;
/// the raw fused score is only the tooltip.
async fn the_passage_shows_a_rank_not_a_score(browser: &Browser) {
    let relevance = browser
        .run(
            "const r = document.querySelector('.why .passage[data-source=\"ferries.md\"] .relevance');
             return {text: r.textContent, rank: r.dataset.rank, title: r.title, panel: r.closest('.why').innerText};",
            json!([]),
        )
        .await;
    assert_eq!(relevance["rank"], "1", "{relevance}");
    assert!(
        relevance["text"]
            .as_str()
            .unwrap_or("")
            .starts_with("rank 1 of "),
        "{relevance}"
    );
    assert!(
        relevance["title"]
            .as_str()
            .unwrap_or("")
            .starts_with("score "),
        "{relevance}"
    );
    assert!(
        !has_raw_score(relevance["panel"].as_str().unwrap_or("")),
        "no raw score in the panel: {relevance}"
    );
}

#[tokio::test]
async fn a_reply_shows_the_uploaded_passage_in_its_why_panel() {
    let Some(browser) = Browser::start("console::a_reply_shows_the_uploaded_passage").await else {
        return;
    };
    let fake = FakeOpenAi::start().await;
    let app = spawn(&fake, None).await;

    personas_page_shows_adas_card(&browser, &app).await;

    open(&browser, &app, "knowledge", "agent=ada").await;
    drop_files(&browser, &[("ferries.md", FERRIES)]).await;
    browser
        .wait_for("ferries.md listed", &document_row("ferries.md"))
        .await;

    open(&browser, &app, "chat", "agent=ada&room=console").await;
    browser
        .type_into("#text", "When does the night ferry to Skerry leave?")
        .await;
    browser.click("#send").await;
    let shown = browser
        .wait_for(
            "the reply",
            "document.querySelector('.msg.reply .text') && document.querySelector('.msg.reply .text').textContent",
        )
        .await;
    let passage = browser
        .wait_for(
            "the why panel's passage from ferries.md",
            "document.querySelector('.why .passage[data-source=\"ferries.md\"]') && document.querySelector('.why .passage[data-source=\"ferries.md\"]').innerText",
        )
        .await;
    let reply = fake
        .requests()
        .into_iter()
        .rfind(|r| r.is_reply())
        .expect("the model was asked for a reply");
    assert_eq!(
        shown.as_str(),
        reply.reply(),
        "the page shows the model's reply"
    );
    assert!(
        passage.as_str().unwrap_or("").contains("23:40"),
        "the panel shows the passage's text: {passage}"
    );
    the_passage_shows_a_rank_not_a_score(&browser).await;
    assert!(
        reply.prompt_text().contains("23:40"),
        "the passage the panel lists did reach the prompt"
    );
    shot(&browser, "chat").await;
    browser.quit().await;
}

#[tokio::test]
async fn two_dropped_files_upload_and_are_listed() {
    let Some(browser) = Browser::start("console::two_dropped_files").await else {
        return;
    };
    let fake = FakeOpenAi::start().await;
    let app = spawn(&fake, None).await;
    open(&browser, &app, "knowledge", "agent=ada").await;
    drop_ferries_and_lamps(&browser).await;
    // Each file had its own progress bar, and each finished.
    let bars = browser
        .run(
            "return Array.from(document.querySelectorAll('#uploads .upload')).map(u => [u.dataset.file, u.querySelector('progress').value, u.querySelector('span:last-child').className]);",
            json!([]),
        )
        .await;
    assert_eq!(
        bars,
        json!([["ferries.md", 1, "ok"], ["lamps.md", 1, "ok"]]),
        "{bars}"
    );
    let (_, docs) = app.get(&format!("/api/agents/{AGENT}/documents")).await;
    let mut sources: Vec<&str> = docs["documents"]
        .as_array()
        .expect("documents")
        .iter()
        .filter_map(|d| d["source"].as_str())
        .collect();
    sources.sort();
    assert_eq!(sources, ["ferries.md", "lamps.md"]);
    browser.type_into("#q", "lighthouse lamp").await;
    browser
        .wait_for(
            "a search result from lamps.md",
            "document.querySelector('#results .passage[data-source=\"lamps.md\"]')",
        )
        .await;
    let first = browser
        .run(
            "return document.querySelector('#results .passage .relevance').textContent;",
            json!([]),
        )
        .await;
    assert!(
        first.as_str().unwrap_or("").starts_with("rank 1 of "),
        "{first}"
    );
    shot(&browser, "knowledge").await;
    browser.quit().await;
}

/// Sets the editor's text as typing would (an `input` event), so the page checks it.
async fn set_source(browser: &Browser, text: &str) {
    browser
        .run(
            "const area = document.getElementById('source');
             area.value = arguments[0];
             area.dispatchEvent(new Event('input', {bubbles: true}));",
            json!([text]),
        )
        .await;
}

/// `fixed` with a syntax error: the comma after the line before `"bio"` is gone, so the
/// parser stops at the `"bio"` line. Returns the draft and that line (0-based).
fn broken_draft(fixed: &str) -> (String, usize) {
    let lines: Vec<&str> = fixed.lines().collect();
    let bio_line = lines
        .iter()
        .position(|l| l.trim_start().starts_with("\"bio\""))
        .expect("a bio line");
    let mut broken: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
    let before_bio = broken[bio_line - 1].trim_end().to_string();
    let unclosed = before_bio
        .strip_suffix(',')
        .expect("the line before bio ends with a comma");
    broken[bio_line - 1] = unclosed.to_string();
    (broken.join("\n"), bio_line)
}

/// A draft with a syntax error: flagged at its line, and "Review and save" is disabled.
async fn a_broken_draft_is_flagged_and_cannot_be_saved(browser: &Browser, fixed: &str) {
    let (broken, bio_line) = broken_draft(fixed);
    set_source(browser, &broken).await;
    let flagged = browser
        .wait_for(
            "a syntax error in the problems list",
            "document.querySelector('#problems li.error') && document.querySelector('#problems li.error').dataset.line",
        )
        .await;
    assert_eq!(
        flagged.as_str(),
        Some((bio_line + 1).to_string().as_str()),
        "the error is at the line of `\"bio\"` (1-based {})",
        bio_line + 1
    );
    let saving = browser
        .run(
            "return document.getElementById('review').disabled;",
            json!([]),
        )
        .await;
    assert_eq!(saving, json!(true), "a file with errors cannot be saved");
}

/// The editor holding `fixed` (Ada with `new_bio`): checked, its diff against the file
/// shown, saved, and on disk as it was in the editor.
async fn review_and_save(browser: &Browser, app: &TestApp, fixed: &str, new_bio: &str) {
    set_source(browser, fixed).await;
    browser
        .wait_for(
            "the check passing",
            "document.getElementById('check-status').textContent === 'no errors'",
        )
        .await;
    browser.click("#review").await;
    let added = browser
        .wait_for(
            "the diff",
            "document.querySelector('#diff .add') && Array.from(document.querySelectorAll('#diff .add')).map(d => d.textContent).join('\\n')",
        )
        .await;
    assert!(added.as_str().unwrap_or("").contains(new_bio), "{added}");
    let removed = browser
        .run(
            "return Array.from(document.querySelectorAll('#diff .del')).map(d => d.textContent).join('\\n');",
            json!([]),
        )
        .await;
    assert!(removed.as_str().unwrap_or("").contains(BIO), "{removed}");
    browser.click("#save").await;
    browser
        .wait_for(
            "the save",
            "document.querySelector('#save-status.ok') || document.querySelector('#save-status.error')",
        )
        .await;
    let status = browser
        .run(
            "return document.getElementById('save-status').className + ': ' + document.getElementById('save-status').textContent;",
            json!([]),
        )
        .await;
    assert!(status.as_str().unwrap_or("").starts_with("ok"), "{status}");
    let on_disk = std::fs::read_to_string(app.data_dir().join("personas/ada.json")).unwrap();
    assert_eq!(on_disk, fixed, "the file on disk is what the editor held");
}

/// A new persona from the template: created on save, loaded by hot reload.
async fn a_new_persona_from_the_template_is_saved_and_loaded(browser: &Browser, app: &TestApp) {
    browser.type_into("#new-name", "Bea Bright").await;
    browser.click("#new-persona").await;
    browser
        .wait_for(
            "the template checked",
            "document.querySelector('#editor-card h2').textContent === 'bea-bright.json' && document.getElementById('check-status').textContent === 'no errors'",
        )
        .await;
    browser.click("#review").await;
    browser
        .wait_for("the new file's diff", "document.getElementById('save')")
        .await;
    browser.click("#save").await;
    browser
        .wait_for(
            "the new file saved",
            "document.querySelector('#save-status.ok')",
        )
        .await;
    eventually("Bea loaded", Duration::from_secs(20), || async {
        app.get("/api/agents/bea-bright").await.0 == 200
    })
    .await;
}

#[tokio::test]
async fn a_character_edited_in_the_browser_is_checked_saved_and_reloaded() {
    let Some(browser) = Browser::start("console::a_character_edited").await else {
        return;
    };
    let fake = FakeOpenAi::start().await;
    let app = spawn(&fake, None).await;
    let (_, before) = app.get(&format!("/api/agents/{AGENT}")).await;

    open(&browser, &app, "characters", "file=ada.json").await;
    browser
        .wait_for("the editor", "document.getElementById('source')")
        .await;

    const NEW_BIO: &str = "Ada now runs the lighthouse on Skerry and counts seabirds.";
    let fixed = serde_json::to_string_pretty(&persona_json("Ada", NEW_BIO)).unwrap();
    a_broken_draft_is_flagged_and_cannot_be_saved(&browser, &fixed).await;
    shot(&browser, "characters").await;
    review_and_save(&browser, &app, &fixed, NEW_BIO).await;

    // Hot reload: the persona's revision changes, then the next reply's prompt has the bio.
    let old = before["revision"].clone();
    eventually("the persona reloaded", Duration::from_secs(20), || async {
        let (_, now) = app.get(&format!("/api/agents/{AGENT}")).await;
        now["revision"] != old
    })
    .await;
    let (status, _) = app
        .post_message(AGENT, &json!({"roomId": "console", "text": "Who are you?"}))
        .await;
    assert!(status.is_success(), "{status}");
    assert!(
        fake.last_prompt_text().contains(NEW_BIO),
        "the new bio is in the next prompt"
    );

    a_new_persona_from_the_template_is_saved_and_loaded(&browser, &app).await;
    browser.quit().await;
}

/// Two facts about Sam, as fact extraction would have stored them.
async fn two_facts_about_sam(app: &TestApp) {
    let db = sqlx::SqlitePool::connect(app.database_url()).await.unwrap();
    for fact in ["keeps bees", "lives by the harbour"] {
        sqlx::query(
            "INSERT INTO user_facts (agent_id, platform, user_id, fact, room, created_at_ms)
             VALUES ('ada', 'web', 'console-user', $1, 'web:console', 1)",
        )
        .bind(fact)
        .execute(&db)
        .await
        .unwrap();
    }
}

/// Deletes the fact "keeps bees" with its row's button: the row goes, and so does the
/// fact on the server.
async fn delete_keeps_bees(browser: &Browser, app: &TestApp) {
    let id = browser
        .run(
            "const row = Array.from(document.querySelectorAll('#facts tr[data-fact]')).find(r => r.querySelector('.fact-text').textContent === 'keeps bees');
             row.querySelector('button').click();
             return row.dataset.fact;",
            json!([]),
        )
        .await;
    browser
        .wait_for(
            "the fact's row gone",
            &format!(
                "!document.querySelector('#facts tr[data-fact=\"{}\"]')",
                id.as_str().unwrap()
            ),
        )
        .await;
    let (_, facts) = app
        .get(&format!("/api/agents/{AGENT}/rooms/console/facts"))
        .await;
    let left: Vec<&str> = facts["facts"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f["fact"].as_str())
        .collect();
    assert_eq!(left, ["lives by the harbour"]);
}

#[tokio::test]
async fn a_fact_deleted_in_the_browser_is_gone() {
    let Some(browser) = Browser::start("console::a_fact_deleted").await else {
        return;
    };
    let fake = FakeOpenAi::start().await;
    let app = spawn(&fake, None).await;
    let (status, _) = app
        .post_message(
            AGENT,
            &json!({"roomId": "console", "userId": "console-user", "userName": "Sam", "text": "I keep bees."}),
        )
        .await;
    assert!(status.is_success(), "{status}");
    two_facts_about_sam(&app).await;

    open(&browser, &app, "rooms", "agent=ada&room=web:console").await;
    browser
        .wait_for(
            "two facts",
            "document.querySelectorAll('#facts tr[data-fact]').length === 2",
        )
        .await;
    shot(&browser, "rooms").await;
    delete_keeps_bees(&browser, &app).await;
    // Drawn again from the server, the page no longer has it.
    open(&browser, &app, "rooms", "agent=ada&room=web:console").await;
    browser
        .wait_for(
            "one fact",
            "document.querySelectorAll('#facts tr[data-fact]').length === 1",
        )
        .await;

    // The room controls run the room's commands: muted from the page, the persona ignores
    // the room and calls no model; unmuted, it answers again.
    let calls = fake.request_count();
    browser
        .click("#room-controls button[data-command='/mute 1h']")
        .await;
    const REPLY: &str = "(document.getElementById('room-command-reply') || {}).textContent || ''";
    let muted = browser.wait_for("the mute command's answer", REPLY).await;
    let say = json!({"roomId": "console", "userId": "console-user", "text": "still there?"});
    let (status, answer) = app.post_message(AGENT, &say).await;
    assert!(status.is_success(), "{answer}");
    assert_eq!(
        answer["ignored"], "the persona is muted in this room",
        "{answer}"
    );
    assert_eq!(fake.request_count(), calls, "a muted room calls no model");
    browser
        .click("#room-controls button[data-command='/unmute']")
        .await;
    browser
        .wait_for(
            "the unmute command's answer",
            &format!("{REPLY} !== '' && {REPLY} !== {muted}"),
        )
        .await;
    let (_, answer) = app.post_message(AGENT, &say).await;
    assert_eq!(
        answer["replies"].as_array().map(Vec::len),
        Some(1),
        "{answer}"
    );
    browser.quit().await;
}

#[tokio::test]
async fn with_a_token_the_console_asks_once_and_sends_it() {
    let Some(browser) = Browser::start("console::with_a_token").await else {
        return;
    };
    let fake = FakeOpenAi::start().await;
    let app = spawn(&fake, Some("s3cret-token")).await;
    browser.goto(&app.url("/")).await;
    browser
        .wait_for(
            "the token dialog",
            "document.getElementById('token-dialog').open",
        )
        .await;
    browser.type_into("#token-input", "s3cret-token").await;
    browser.click("#token-form button").await;
    browser
        .wait_for(
            "the personas page",
            "document.body.dataset.ready === 'personas' && document.querySelector('.persona[data-agent=\"ada\"]')",
        )
        .await;
    let kept = browser
        .run(
            "return sessionStorage.getItem('troupe.apiToken');",
            json!([]),
        )
        .await;
    assert_eq!(kept, json!("s3cret-token"));
    // Another page in the same tab does not ask again.
    open(&browser, &app, "health", "").await;
    let asked = browser
        .run(
            "return document.getElementById('token-dialog').open;",
            json!([]),
        )
        .await;
    assert_eq!(asked, json!(false));
    browser
        .wait_for(
            "metrics drawn",
            "document.getElementById('metrics-status').textContent.startsWith('Updated')",
        )
        .await;
    // Messages while the page polls: the "messages in" chart shows their rate.
    for text in ["one", "two", "three"] {
        let (status, _) = app
            .post_message(AGENT, &json!({"roomId": "health", "text": text}))
            .await;
        assert!(status.is_success(), "{status}");
    }
    browser
        .wait_for(
            "a rate of messages in above zero",
            "parseFloat(document.querySelector('#charts .chart .value').textContent) > 0",
        )
        .await;
    if screenshots_dir().is_some() {
        // A few more polls and messages, so the charts have a shape in the picture.
        for (round, polls) in [(1, 4), (2, 7)] {
            browser
                .wait_for(
                    "more polls",
                    &format!(
                        "Number(document.querySelector('#charts .chart').dataset.points) >= {polls}"
                    ),
                )
                .await;
            for i in 0..round * 2 {
                let text = format!("round {round}, message {i}");
                app.post_message(AGENT, &json!({"roomId": "health", "text": text}))
                    .await;
            }
        }
        browser
            .wait_for(
                "the last poll",
                "Number(document.querySelector('#charts .chart').dataset.points) >= 9",
            )
            .await;
    }
    shot(&browser, "health").await;
    browser.quit().await;
}

#[tokio::test]
async fn a_connected_telegram_bot_shows_its_state_and_link() {
    let Some(browser) = Browser::start("console::a_connected_telegram_bot").await else {
        return;
    };
    let fake = FakeOpenAi::start().await;
    let telegram = troupe_e2e::fake_telegram::FakeTelegram::start().await;
    let tess = telegram.persona("Tess", BIO);
    let app = TestApp::spawn(
        TestAppOptions::new(Backend::Sqlite)
            .persona_file("tess.json", tess)
            .openai(&fake),
    )
    .await;
    open(&browser, &app, "personas", "").await;
    let row = browser
        .wait_for(
            "Tess's Telegram row, connected",
            "(() => { const r = document.querySelector('.persona[data-agent=\"tess\"] tr[data-platform=\"telegram\"]');
                      return r && r.querySelector('.connector').innerText.includes('connected') && r.querySelector('a') && {text: r.innerText, link: r.querySelector('a').href}; })()",
        )
        .await;
    assert_eq!(
        row["link"],
        format!("https://t.me/{}", telegram.bot_username()),
        "{row}"
    );
    let leaked = browser
        .run(
            "return document.documentElement.outerHTML.includes(arguments[0]);",
            json!([telegram.token()]),
        )
        .await;
    assert_eq!(leaked, json!(false), "the bot token never reaches the page");
    browser.quit().await;
}

/// The character routes read and write only plain files directly in the personas
/// directory, refuse a draft with errors, and leave no temporary file behind.
#[tokio::test]
async fn character_routes_stay_inside_the_personas_directory() {
    let fake = FakeOpenAi::start().await;
    let app = spawn(&fake, None).await;
    let personas = app.data_dir().join("personas");
    let outside = app.data_dir().join("outside.json");
    std::fs::write(&outside, "{\"name\": \"Outside\"}").unwrap();
    std::os::unix::fs::symlink(&outside, personas.join("link.json")).unwrap();
    let client = app.client();
    let put = |file: &str, body: Value| {
        client
            .put(app.url(&format!("/api/characters/{file}")))
            .json(&body)
            .send()
    };

    for bad in [
        "..%2Foutside.json",
        ".hidden.json",
        "a%2Fb.json",
        "link.json",
        "x.txt",
    ] {
        let (status, body) = app.get(&format!("/api/characters/{bad}")).await;
        assert!(status == 400 || status == 404, "GET {bad}: {status} {body}");
        assert!(
            !body.to_string().contains("Outside"),
            "GET {bad} read it: {body}"
        );
    }
    let status = put("link.json", json!({"file": "link.json", "text": "{}"}))
        .await
        .unwrap()
        .status();
    assert_eq!(status, 400, "a symlink is not written through");
    assert_eq!(
        std::fs::read_to_string(&outside).unwrap(),
        "{\"name\": \"Outside\"}"
    );

    // A new file with an error is refused, and not created.
    let response = put(
        "new.json",
        json!({"file": "new.json", "text": "{\"name\": }"}),
    )
    .await
    .unwrap();
    assert_eq!(response.status(), 422);
    assert!(!personas.join("new.json").exists());
    // An edit from a stale revision is refused.
    let response = put(
        "ada.json",
        json!({"file": "ada.json", "text": serde_json::to_string(&persona_json("Ada", BIO)).unwrap(), "baseRevision": "0000000000000000"}),
    )
    .await
    .unwrap();
    assert_eq!(response.status(), 409);
    // A new file that checks is created.
    let text = serde_json::to_string_pretty(&persona_json("Bea", BIO)).unwrap();
    let response = put("bea.json", json!({"file": "bea.json", "text": text}))
        .await
        .unwrap();
    assert_eq!(response.status(), 201);
    assert_eq!(
        std::fs::read_to_string(personas.join("bea.json")).unwrap(),
        text
    );
    // A draft whose id another file has is an error, as `troupe check` says.
    let (status, answer) = app
        .post_json(
            "/api/characters/check",
            &json!({"file": "copy.json", "text": text}),
            None,
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["ok"], json!(false), "{answer}");
    let left: Vec<String> = std::fs::read_dir(&personas)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().to_string())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(left.is_empty(), "temporary files left: {left:?}");
}
