//! End-to-end tests of one person across platforms (issue 44 item 6, docs/people.md): a
//! persona on the fake Telegram and the fake Discord at once, through the real `troupe run`
//! binary and the fake model. Sam links his Telegram and Discord accounts with `/link` in
//! direct messages; then what the persona learned on Telegram is known on Discord,
//! `/forgetme` on one forgets on both, one per-user budget spans both, and an approval
//! (pairing) of one account lets the linked ones in.
//!
//! Nothing is waited out with a timer: each step waits for the answer it sends (messages of
//! one room are handled in order), and the background fact extraction is waited on through
//! the memories route.

use std::sync::Arc;

use reqwest::StatusCode;
use serde_json::{Value, json};
use troupe_e2e::fake_discord::{self, Author, FakeDiscord, NewMessage};
use troupe_e2e::fake_openai::{FACTS_TASK, default_reply_text};
use troupe_e2e::fake_telegram::{FakeTelegram, tg};
use troupe_e2e::gauges::{code_in as pairing_code, pairing};
use troupe_e2e::{
    Backend, ChatRequestRecord, FakeOpenAi, FakeOpenAiConfig, TestApp, TestAppOptions, WAIT,
    eventually, persona_json,
};

const AGENT: &str = "Tess";
const BIO: &str = "Tess keeps the night ferry's logbook and knows every buoy in the strait.";
/// Sam on Telegram (his DM's chat id is his user id).
const SAM_TG: i64 = 601;
/// Sam's and Eve's DM channels with the bot on Discord.
const SAM_DM: &str = "520000000000000001";
const EVE_DM: &str = "520000000000000002";
const FACT: &str = "Sam keeps bees on his roof";

troupe_e2e::on_each_backend!(a_fact_told_on_telegram_is_known_on_discord_once_linked);

struct Both {
    app: TestApp,
    telegram: FakeTelegram,
    discord: FakeDiscord,
    model: FakeOpenAi,
}

fn is_facts(r: &ChatRequestRecord) -> bool {
    r.system_prompt().is_some_and(|s| s.starts_with(FACTS_TASK))
}

/// The fake model: fact extraction finds `FACT` in what Sam wrote about bees, nothing in
/// anything else; replies are the fake's default.
async fn model() -> FakeOpenAi {
    FakeOpenAi::start_with(FakeOpenAiConfig {
        default_reply: Some(Arc::new(|r: &ChatRequestRecord| {
            if !is_facts(r) {
                default_reply_text(r)
            } else if r.prompt_text().contains("I keep bees") {
                json!([FACT]).to_string()
            } else {
                "[]".to_string()
            }
        })),
        ..FakeOpenAiConfig::default()
    })
    .await
}

impl Both {
    async fn spawn(
        backend: Backend,
        model: FakeOpenAi,
        env: &[(&str, &str)],
        spend: Value,
    ) -> Both {
        let telegram = FakeTelegram::start().await;
        let discord = FakeDiscord::start().await;
        let mut c = persona_json(AGENT, BIO);
        c["clients"] = json!(["telegram", "discord"]);
        c["settings"]["secrets"] = json!({
            "TELEGRAM_BOT_TOKEN": telegram.token(),
            "TELEGRAM_API_ROOT": telegram.api_root(),
            "DISCORD_API_TOKEN": fake_discord::TOKEN,
            "DISCORD_API_URL": discord.url(),
        });
        if spend != json!({}) {
            c["settings"]["spend"] = spend;
        }
        let mut options = TestAppOptions::new(backend)
            .persona_file("tess.json", c)
            .openai(&model)
            .env("TROUPE_MEMORY_SUMMARY_EVERY", "0")
            .env("TROUPE_RATE_API_PER_MIN", "0")
            .env("TROUPE_RATE_USER_PER_MIN", "0");
        for (k, v) in env {
            options = options.env(k, v);
        }
        let app = TestApp::spawn(options).await;
        app.expect(discord.try_wait_for_ready(1, WAIT).await);
        Both {
            app,
            telegram,
            discord,
            model,
        }
    }

    /// Sam writes `text` to Tess on Telegram; her answer.
    async fn telegram(&self, text: &str) -> String {
        let n = self.telegram.sent_messages().len() + 1;
        let sam = tg::user(SAM_TG, "Sam");
        let chat = tg::private_chat(SAM_TG, "Sam");
        let message = if text.starts_with('/') {
            tg::command(chat, sam, text)
        } else {
            tg::text(chat, sam, text)
        };
        self.telegram.push_message(message);
        let sent = self
            .app
            .expect(self.telegram.try_wait_for_sent(n, WAIT).await);
        sent[n - 1].text.clone()
    }

    /// `who` writes `text` to Tess in the Discord DM `channel`; her answer.
    async fn discord(&self, channel: &str, who: &str, text: &str) -> String {
        let n = self.discord.sent_messages().len() + 1;
        self.discord
            .send_message_create(NewMessage::dm(channel, Author::person(who), text));
        let sent = self
            .app
            .expect(self.discord.try_wait_for_sent(n, WAIT).await);
        assert_eq!(sent[n - 1].channel, channel, "{sent:#?}");
        sent[n - 1].content.clone()
    }

    /// The prompt of the latest reply (each step waits for its answer, so the latest
    /// reply request is the one that answered it).
    fn last_reply_prompt(&self) -> String {
        self.model
            .requests()
            .into_iter()
            .rev()
            .find(|r| !is_facts(r))
            .map(|r| r.prompt_text())
            .expect("a reply request")
    }

    async fn telegram_facts(&self) -> Value {
        let path = format!("/api/agents/{AGENT}/rooms/telegram:{SAM_TG}/facts");
        let (status, body) = self.app.get(&path).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        body["facts"].clone()
    }

    async fn people(&self) -> Value {
        let (status, body) = self.app.get(&format!("/api/agents/{AGENT}/people")).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        body["people"].clone()
    }

    /// `/link` on Telegram, `/link CODE` and `/link yes` from Sam's Discord DM.
    async fn link(&self) {
        let given = self.telegram("/link").await;
        let code = code_in(&given);
        let shown = self.discord(SAM_DM, "sam", &format!("/link {code}")).await;
        assert!(
            shown.contains(&format!("telegram account Sam (id {SAM_TG})")),
            "{shown}"
        );
        let linked = self.discord(SAM_DM, "sam", "/link yes").await;
        assert!(linked.starts_with("Linked:"), "{linked}");
    }
}

/// The code in `/link`'s answer ("Your link code is ABCD2345. …").
fn code_in(answer: &str) -> String {
    let code = answer
        .strip_prefix("Your link code is ")
        .and_then(|rest| rest.get(..8))
        .unwrap_or_else(|| panic!("no code in {answer:?}"));
    assert!(code.chars().all(|c| c.is_ascii_alphanumeric()), "{answer}");
    code.to_string()
}

/// A third person who got Sam's code is shown whose account it joins, and nothing is
/// linked unless they confirm; in a group, `/link` gives no code and takes none.
async fn a_third_person_or_a_group_links_nothing(both: &Both) {
    let code = code_in(&both.telegram("/link").await);
    let shown = both.discord(EVE_DM, "eve", &format!("/link {code}")).await;
    assert!(
        shown.contains(&format!("telegram account Sam (id {SAM_TG})")),
        "{shown}"
    );
    assert!(shown.contains("/link yes"), "{shown}");
    assert_eq!(both.people().await, json!([]));
    // In a group, /link gives no code and takes none.
    let n = both.telegram.sent_messages().len() + 1;
    let group = tg::supergroup(-100_700, "Ferry crew");
    both.telegram.push_message(tg::command(
        group,
        tg::user(SAM_TG, "Sam"),
        &format!("/link {code}"),
    ));
    let sent = both
        .app
        .expect(both.telegram.try_wait_for_sent(n, WAIT).await);
    assert!(
        sent[n - 1].text.contains("only in a direct message"),
        "{:?}",
        sent[n - 1]
    );
}

async fn a_fact_told_on_telegram_is_known_on_discord_once_linked(backend: Backend) {
    let both = Both::spawn(
        backend,
        model().await,
        &[("TROUPE_MEMORY_FACTS_EVERY", "1")],
        json!({}),
    )
    .await;
    both.telegram("I keep bees on my roof, you know.").await;
    eventually("the fact learned on Telegram", WAIT, || async {
        both.telegram_facts()
            .await
            .as_array()
            .is_some_and(|f| !f.is_empty())
    })
    .await;
    // On Discord, Sam's account is someone else until linked.
    both.discord(SAM_DM, "sam", "Hello from Discord.").await;
    assert!(
        !both.last_reply_prompt().contains(FACT),
        "{}",
        both.last_reply_prompt()
    );

    a_third_person_or_a_group_links_nothing(&both).await;
    both.link().await;
    let people = both.people().await;
    assert_eq!(people.as_array().map(Vec::len), Some(1), "{people}");
    let accounts = &people[0]["accounts"];
    assert_eq!(accounts.as_array().map(Vec::len), Some(2), "{people}");
    assert!(
        Value::to_string(accounts).contains(&format!("\"userId\":\"{SAM_TG}\"")),
        "{people}"
    );
    // Eve's confirmation now finds nothing: the code was used.
    let eve = both.discord(EVE_DM, "eve", "/link yes").await;
    assert!(eve.starts_with("Nothing to confirm"), "{eve}");

    // Linked: the fact learned on Telegram is in the Discord reply's prompt.
    both.discord(SAM_DM, "sam", "What do you remember about me?")
        .await;
    assert!(
        both.last_reply_prompt().contains(FACT),
        "{}",
        both.last_reply_prompt()
    );

    // /forgetme on Discord forgets it on both.
    let forgot = both.discord(SAM_DM, "sam", "/forgetme").await;
    assert!(forgot.starts_with("Done"), "{forgot}");
    assert_eq!(both.telegram_facts().await, json!([]));
    both.discord(SAM_DM, "sam", "Anything now?").await;
    assert!(
        !both.last_reply_prompt().contains(FACT),
        "{}",
        both.last_reply_prompt()
    );
    both.telegram("And on Telegram?").await;
    assert!(
        !both.last_reply_prompt().contains(FACT),
        "{}",
        both.last_reply_prompt()
    );

    // /unlink: apart again.
    let apart = both.discord(SAM_DM, "sam", "/unlink").await;
    assert!(apart.starts_with("Unlinked:"), "{apart}");
    assert_eq!(both.people().await, json!([]));
}

const USER_NOTICE: &str = "You have talked with me enough for today.";

#[tokio::test]
async fn one_per_user_budget_spans_linked_accounts() {
    let model = model().await;
    // Every call uses exactly 100 tokens; Sam may use 300 a day.
    model.set_usage(80, 20);
    let spend = json!({"userPerDay": "300 tokens", "notices": {"userDay": USER_NOTICE}});
    let both = Both::spawn(
        Backend::Sqlite,
        model,
        &[("TROUPE_MEMORY_FACTS_EVERY", "0")],
        spend,
    )
    .await;
    both.telegram("first question").await;
    both.telegram("second question").await;
    // Unlinked, the Discord account has a budget of its own.
    let answer = both.discord(SAM_DM, "sam", "hello from Discord").await;
    assert!(answer.starts_with("Reply #"), "{answer}");
    assert_eq!(both.model.request_count(), 3);

    both.link().await;
    // Linked: 300 tokens used by the person, on both accounts together.
    let usage = both.telegram("/usage").await;
    assert!(
        usage.contains("you (all your linked accounts) 300 tokens"),
        "{usage}"
    );
    assert!(usage.contains("0 tokens left"), "{usage}");
    let refused = both.discord(SAM_DM, "sam", "one more?").await;
    assert_eq!(refused, USER_NOTICE);
    assert_eq!(
        both.model.request_count(),
        3,
        "no model call past the person's cap"
    );

    // Unlinked, each account has its own day again: Discord used 100 of its 300.
    let apart = both.telegram("/unlink").await;
    assert!(apart.starts_with("Unlinked:"), "{apart}");
    let answer = both.discord(SAM_DM, "sam", "and now?").await;
    assert!(answer.starts_with("Reply #"), "{answer}");
    assert_eq!(both.model.request_count(), 4);
}

/// Approved once, approved everywhere (docs/people.md, docs/access.md): under `pairing` on
/// both platforms, Sam is approved on Telegram. His Discord account, a stranger there, gets
/// a pairing code of its own, yet may still send `/link CODE` and `/link yes`; once linked
/// it is answered, with no approval of its own.
#[tokio::test]
async fn an_approval_holds_for_every_linked_account() {
    let both = Both::spawn(
        Backend::Sqlite,
        model().await,
        &[
            ("TROUPE_MEMORY_FACTS_EVERY", "0"),
            ("TELEGRAM_DM_POLICY", "pairing"),
            ("DISCORD_DM_POLICY", "pairing"),
        ],
        json!({}),
    )
    .await;
    let asked = both.telegram("hello?").await;
    let (ok, out) = pairing(&both.app, &["approve", &pairing_code(&asked)], &[]).await;
    assert!(ok, "{out}");
    let answer = both.telegram("may I?").await;
    assert!(answer.starts_with("Reply #"), "{answer}");
    let calls = both.model.request_count();

    // Unlinked, the Discord account is a stranger: a code, no model call.
    let refused = both.discord(SAM_DM, "sam", "hello from Discord").await;
    pairing_code(&refused);
    assert_eq!(both.model.request_count(), calls);

    // `/link` passes the gate from the account not let in; then it is let in.
    both.link().await;
    let answer = both.discord(SAM_DM, "sam", "and now?").await;
    assert!(answer.starts_with("Reply #"), "{answer}");
    assert_eq!(both.model.request_count(), calls + 1);
}
