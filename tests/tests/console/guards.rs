//! The console when the server is slow or says no: a slow answer to an earlier search or
//! draft check is dropped rather than drawn over the newer one, and the new-persona form
//! says what went wrong. The page's `fetch` is wrapped in the page to hold one answer back
//! (a slow server for that request only) or to fail one.

use super::{BIO, drop_ferries_and_lamps, open, set_source, spawn};
use serde_json::json;
use troupe_e2e::browser::Browser;
use troupe_e2e::{FakeOpenAi, persona_json};

/// Holds the page's answers to `fetch` calls whose URL has `path` and whose URL or body has
/// `marker`, until `window.held.release()`: a slow server for that one request.
/// `window.held.started` and `.released` count them; `.handled` counts the released ones the
/// page is done with: refused (an aborted request) or, if answered, its body read.
async fn hold_answers(browser: &Browser, path: &str, marker: &str) {
    browser
        .run(
            "const [path, marker] = arguments;
             const real = window.fetch;
             let release;
             const gate = new Promise((r) => { release = r; });
             const held = {started: 0, released: 0, handled: 0, release: () => release()};
             window.held = held;
             // Counted in a task of its own, after the page's callbacks on the answer ran.
             const done = () => setTimeout(() => { held.handled += 1; });
             const readBody = (response) => {
               for (const how of ['text', 'json']) {
                 const read = response[how].bind(response);
                 response[how] = () => read().finally(done);
               }
               return response;
             };
             window.fetch = function (url, init) {
               const answer = real.apply(this, arguments);
               const seen = String(url) + String((init && init.body) || '');
               if (!String(url).includes(path) || !seen.includes(marker)) return answer;
               held.started += 1;
               return gate.then(() => { held.released += 1; return answer; }).then(
                 readBody,
                 (refused) => { done(); throw refused; });
             };",
            json!([path, marker]),
        )
        .await;
}

/// Lets the held answers go and waits until the page is done with each: its request refused
/// (aborted by a newer one), or its body read. The page draws in the same chain of promise
/// callbacks that reads the body, and the count moves in a task queued after that chain:
/// once it is reached, a stale answer drawn over the newer one is on screen, however slow
/// the machine.
async fn release_held(browser: &Browser) {
    browser.run("window.held.release();", json!([])).await;
    browser
        .wait_for(
            "the held answers handled",
            "window.held.released > 0 && window.held.handled === window.held.started",
        )
        .await;
}

/// Sets a search box's text as typing would, so the page searches.
async fn set_query(browser: &Browser, text: &str) {
    browser
        .run(
            "const q = document.getElementById('q');
             q.value = arguments[0];
             q.dispatchEvent(new Event('input', {bubbles: true}));",
            json!([text]),
        )
        .await;
}

/// The first result source shown by the Knowledge search.
const FIRST_RESULT: &str =
    "(document.querySelector('#results .passage') || {dataset: {}}).dataset.source";

#[tokio::test]
async fn a_slow_earlier_search_does_not_overwrite_a_newer_one() {
    let Some(browser) = Browser::start("console::a_slow_earlier_search").await else {
        return;
    };
    let fake = FakeOpenAi::start().await;
    let app = spawn(&fake, None).await;
    open(&browser, &app, "knowledge", "agent=ada").await;
    drop_ferries_and_lamps(&browser).await;
    // The search for the ferry is slow; while it hangs, the user types a new query.
    hold_answers(&browser, "/knowledge/search", "ferry").await;
    set_query(&browser, "night ferry").await;
    browser
        .wait_for("the ferry search sent", "window.held.started === 1")
        .await;
    set_query(&browser, "lighthouse lamp").await;
    browser
        .wait_for(
            "the lamp search's results",
            &format!("{FIRST_RESULT} === 'lamps.md'"),
        )
        .await;
    release_held(&browser).await;
    let shown = browser
        .run(&format!("return {FIRST_RESULT};"), json!([]))
        .await;
    assert_eq!(
        shown,
        json!("lamps.md"),
        "the late answer for the older query is dropped"
    );

    // Emptying the box while a search hangs leaves it empty.
    hold_answers(&browser, "/knowledge/search", "ferry").await;
    set_query(&browser, "night ferry").await;
    browser
        .wait_for("the ferry search sent", "window.held.started === 1")
        .await;
    set_query(&browser, "").await;
    browser
        .wait_for(
            "the results cleared",
            "!document.querySelector('#results .passage')",
        )
        .await;
    release_held(&browser).await;
    let left = browser
        .run(
            "return document.querySelectorAll('#results .passage').length;",
            json!([]),
        )
        .await;
    assert_eq!(left, json!(0), "an emptied search stays empty");
    browser.quit().await;
}

#[tokio::test]
async fn a_slow_check_of_an_older_draft_does_not_overwrite_a_newer_one() {
    let Some(browser) = Browser::start("console::a_slow_check").await else {
        return;
    };
    let fake = FakeOpenAi::start().await;
    let app = spawn(&fake, None).await;
    open(&browser, &app, "characters", "file=ada.json").await;
    browser
        .wait_for(
            "the first check",
            "document.getElementById('check-status').textContent === 'no errors'",
        )
        .await;
    let good = serde_json::to_string_pretty(&persona_json("Ada", BIO)).unwrap();
    // The broken draft's check is slow; before it answers, the draft is fixed.
    hold_answers(&browser, "/api/characters/check", "BROKEN").await;
    set_source(&browser, "{\"name\": \"BROKEN\",").await;
    browser
        .wait_for("the broken draft's check sent", "window.held.started === 1")
        .await;
    set_source(&browser, &good).await;
    browser
        .wait_for(
            "the fixed draft checked",
            "document.getElementById('check-status').textContent === 'no errors'",
        )
        .await;
    release_held(&browser).await;
    let after = browser
        .run(
            "return {status: document.getElementById('check-status').textContent,
                     problems: document.querySelectorAll('#problems li').length,
                     saving: document.getElementById('review').disabled};",
            json!([]),
        )
        .await;
    assert_eq!(
        after,
        json!({"status": "no errors", "problems": 0, "saving": false}),
        "the late answer for the broken draft is dropped"
    );
    browser.quit().await;
}

#[tokio::test]
async fn the_new_persona_form_shows_what_went_wrong() {
    let Some(browser) = Browser::start("console::the_new_persona_form").await else {
        return;
    };
    let fake = FakeOpenAi::start().await;
    let app = spawn(&fake, None).await;
    open(&browser, &app, "characters", "").await;
    const NEW_STATUS: &str = "document.querySelector('#new-status .error') && document.querySelector('#new-status .error').textContent";

    // A name whose file exists: said under the form, and no editor opens.
    browser.type_into("#new-name", "Ada").await;
    browser.click("#new-persona").await;
    let said = browser.wait_for("the form's error", NEW_STATUS).await;
    assert!(
        said.as_str()
            .unwrap_or("")
            .contains("`ada.json` exists already"),
        "{said}"
    );
    let editor = browser
        .run("return !!document.getElementById('source');", json!([]))
        .await;
    assert_eq!(editor, json!(false), "no editor for a name that is taken");

    // The template failing to load: the answer's `{error, detail}` is shown.
    browser
        .run(
            "const real = window.fetch;
             window.fetch = function (url) {
               if (!String(url).includes('template.json')) return real.apply(this, arguments);
               return Promise.resolve(new Response(JSON.stringify({error: 'unavailable', detail: 'the template is missing'}),
                 {status: 503, headers: {'content-type': 'application/json'}}));
             };",
            json!([]),
        )
        .await;
    browser
        .run("document.getElementById('new-name').value = '';", json!([]))
        .await;
    browser.type_into("#new-name", "Cleo").await;
    browser.click("#new-persona").await;
    browser
        .wait_for(
            "the template's error",
            &format!("({NEW_STATUS} || '').includes('unavailable')"),
        )
        .await;
    let said = browser
        .run(&format!("return {NEW_STATUS};"), json!([]))
        .await;
    assert_eq!(said, json!("unavailable: the template is missing"));

    // The file appearing on disk while the new persona is edited: the API refuses the
    // create with a conflict, and the page says so.
    open(&browser, &app, "characters", "").await;
    browser.type_into("#new-name", "Cleo").await;
    browser.click("#new-persona").await;
    browser
        .wait_for(
            "the template checked",
            "document.querySelector('#editor-card h2').textContent === 'cleo.json' && document.getElementById('check-status').textContent === 'no errors'",
        )
        .await;
    let other = serde_json::to_string_pretty(&persona_json("Cleo Other", BIO)).unwrap();
    std::fs::write(app.data_dir().join("personas/cleo.json"), other).unwrap();
    browser.click("#review").await;
    browser
        .wait_for("the new file's diff", "document.getElementById('save')")
        .await;
    browser.click("#save").await;
    let refused = browser
        .wait_for(
            "the create refused",
            "document.querySelector('#save-status.error') && document.querySelector('#save-status.error').textContent",
        )
        .await;
    assert_eq!(
        refused,
        json!("conflict: `cleo.json` exists already; open it to edit it"),
    );
    browser.quit().await;
}
