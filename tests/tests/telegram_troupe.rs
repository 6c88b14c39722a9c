//! A troupe on one Telegram bot (issue 46, docs/telegram.md "A troupe on one bot"), end to
//! end: the real `troupe run` with two personas naming the same `TELEGRAM_BOT_TOKEN` and
//! `settings.troupe.telegram.speakAs: "prefix"`, against the fake Bot API. Each answer
//! starts with its persona's name in bold (a `bold` entity, offsets in UTF-16 code units);
//! a reply to a persona's message is that persona's; a persona's name addresses it; one
//! `getUpdates` poller serves both; `troupe check` accepts the pair that opts in and refuses
//! the pair that does not.
//!
//! "No further answer" is never waited out with a timer: a persona records a message it
//! decides on in its room memory in the same step as its answer (or alone when it stays
//! silent), so once every persona remembers a message the answers it caused are counted.
//! Memory upkeep is off, so every model call counted is an answer.

use std::time::Duration;

use serde_json::{Value, json};
use troupe_e2e::fake_telegram::{FakeTelegram, SentMessage, tg};
use troupe_e2e::streams::long_answer;
use troupe_e2e::{Backend, FakeOpenAi, Script, TestApp, TestAppOptions, WAIT, troupe_bin};

const GROUP: i64 = -100_046;
const SAM: i64 = 601;
const PEOPLE: [(&str, &str); 2] = [
    ("Ada", "Ada reads the tides."),
    ("Bob", "Bob ties the knots."),
];
/// The edit pace the tests run with.
const EDIT_MS: u64 = 300;

fn persona(telegram: &FakeTelegram, name: &str, bio: &str) -> Value {
    let mut c = telegram.persona(name, bio);
    c["settings"]["troupe"] = json!({"telegram": {"speakAs": "prefix"}});
    c
}

struct Troupe {
    telegram: FakeTelegram,
    model: FakeOpenAi,
    app: TestApp,
}

impl Troupe {
    async fn start() -> Self {
        let telegram = FakeTelegram::start().await;
        let model = FakeOpenAi::start().await;
        let mut options = TestAppOptions::new(Backend::Sqlite)
            .openai(&model)
            .env("TROUPE_MEMORY_SUMMARY_EVERY", "0")
            .env("TROUPE_MEMORY_FACTS_EVERY", "0")
            .env("TROUPE_STREAM_EDIT_MS", &EDIT_MS.to_string());
        for (name, bio) in PEOPLE {
            let file = format!("{}.json", name.to_lowercase());
            options = options.persona_file(&file, persona(&telegram, name, bio));
        }
        let app = TestApp::spawn(options).await;
        telegram.wait_for_calls("getUpdates", 1, WAIT).await;
        Troupe {
            telegram,
            model,
            app,
        }
    }

    fn said(&self, text: &str) -> Value {
        tg::text(tg::supergroup(GROUP, "Harbour"), tg::user(SAM, "Sam"), text)
    }

    fn say(&self, text: &str) -> i64 {
        self.telegram.push_message(self.said(text))
    }

    /// Sam replies to message `to` of the group (the bot's, as the chat holds it now).
    fn reply(&self, to: i64, text: &str) -> i64 {
        let to = self
            .telegram
            .message(GROUP, to)
            .expect("the message replied to");
        self.telegram
            .push_message(tg::replying_to(self.said(text), to))
    }

    /// Waits until the bot's messages number `n`, the last reading `last` whole.
    async fn sent(&self, n: usize, last: &str) -> Vec<SentMessage> {
        let what = format!("{n} message(s), the last reading `{last}`");
        let waited = self
            .telegram
            .try_wait_for_state(&what, WAIT, |s| {
                s.len() >= n && s.last().is_some_and(|m| m.text == last)
            })
            .await;
        self.app.expect(waited)
    }

    /// Waits until every persona remembers `text` in `chat`: each has decided on it.
    async fn all_remember(&self, chat: i64, text: &str) {
        for (name, _) in PEOPLE {
            let agent = name.to_lowercase();
            let path = format!("/api/agents/{agent}/rooms/telegram:{chat}/memories");
            troupe_e2e::eventually(&format!("`{text}` in {agent}'s memory"), WAIT, || async {
                let (_, body) = self.app.get(&path).await;
                troupe_e2e::json_contains_text(&body["messages"], text)
            })
            .await;
        }
    }
}

/// The bold entity over `Name:` at the start of a message, as the Bot API has it.
fn bold_name(name: &str) -> Vec<Value> {
    let length = format!("{name}:").encode_utf16().count();
    vec![json!({"type": "bold", "offset": 0, "length": length})]
}

/// `m` is `name` saying `text`: `Name: text`, the name in bold, nothing else formatted.
fn spoke(m: &SentMessage, name: &str, text: &str) {
    assert_eq!(m.text, format!("{name}: {text}"), "{m:#?}");
    assert_eq!(m.entities, bold_name(name), "{m:#?}");
    assert_eq!(m.parse_mode, None, "plain text, bold through entities");
    assert_eq!(m.chat_id, GROUP);
}

#[tokio::test]
async fn two_personas_on_one_bot_each_answer_with_their_bold_name() {
    let t = Troupe::start().await;

    // Ada's name addresses Ada.
    t.model.push_reply("The tide turns at six.");
    let asked = t.say("Ada, when does the tide turn?");
    let m = t.sent(1, "Ada: The tide turns at six.").await;
    spoke(&m[0], "Ada", "The tide turns at six.");
    assert_eq!(m[0].reply_to_message_id(), Some(asked));

    // A reply to Ada's message, naming no one, is Ada's.
    t.model.push_reply("Tomorrow at seven.");
    let asked = t.reply(m[0].message_id, "and tomorrow?");
    let m = t.sent(2, "Ada: Tomorrow at seven.").await;
    spoke(&m[1], "Ada", "Tomorrow at seven.");
    assert_eq!(m[1].reply_to_message_id(), Some(asked));

    // Bob's name addresses Bob.
    t.model.push_reply("A bowline, every time.");
    t.say("which knot for a mooring, Bob?");
    let m = t.sent(3, "Bob: A bowline, every time.").await;
    spoke(&m[2], "Bob", "A bowline, every time.");

    // Nothing more: every persona has decided on the last message, and there were three
    // answers from three model calls. No persona answered another's message (the bot's
    // own messages are never input), and Bob did not answer the reply to Ada.
    t.all_remember(GROUP, "which knot for a mooring, Bob?")
        .await;
    assert_eq!(t.telegram.sent_messages().len(), 3);
    assert_eq!(t.model.requests().len(), 3, "one model call per answer");
    // One getUpdates poller for the two: it starts by removing any webhook, once.
    assert_eq!(t.telegram.calls_to("deleteWebhook").len(), 1);
}

#[tokio::test]
async fn a_mention_of_the_bot_or_a_direct_message_is_answered_by_one_persona() {
    let t = Troupe::start().await;
    t.model.push_reply("Hello from the harbour.");
    t.telegram.push_message(tg::mentioning(
        t.said("@tess_bot anyone there?"),
        t.telegram.bot_username(),
    ));
    t.app.expect(t.telegram.try_wait_for_sent(1, WAIT).await);
    t.all_remember(GROUP, "anyone there?").await;
    let sent = t.telegram.sent_messages();
    assert_eq!(sent.len(), 1, "the arbiter picks one: {sent:#?}");
    let who = PEOPLE
        .iter()
        .map(|(name, _)| *name)
        .find(|name| sent[0].text.starts_with(&format!("{name}: ")))
        .expect("an answer with a persona's name");
    assert_eq!(sent[0].entities, bold_name(who));

    t.model.push_reply("Here, Sam.");
    t.telegram.push_message(tg::text(
        tg::private_chat(SAM, "Sam"),
        tg::user(SAM, "Sam"),
        "hello?",
    ));
    let waited = t
        .telegram
        .try_wait_for_state("an answer in Sam's DM", WAIT, |s| {
            s.iter()
                .any(|m| m.chat_id == SAM && m.text.ends_with(": Here, Sam."))
        })
        .await;
    t.app.expect(waited);
    t.all_remember(SAM, "hello?").await;
    let sent = t.telegram.sent_messages();
    let answers: Vec<&SentMessage> = sent.iter().filter(|m| m.chat_id == SAM).collect();
    assert_eq!(answers.len(), 1, "{answers:#?}");
    assert!(answers[0].text.ends_with(": Here, Sam."), "{answers:#?}");
    assert_eq!(t.model.requests().len(), 2);
}

#[tokio::test]
async fn a_streamed_answer_keeps_the_bold_name_in_every_edit() {
    let t = Troupe::start().await;
    let answer = long_answer(40);
    t.model
        .push(Script::paced(answer.clone(), Duration::from_millis(60)));
    t.say("Bob, tell me about the knots");
    let m = t.sent(1, &format!("Bob: {answer}")).await;
    spoke(&m[0], "Bob", &answer);
    let first = &t.telegram.calls_to("sendMessage")[0].params;
    let first_text = first["text"].as_str().unwrap_or_default();
    assert!(first_text.starts_with("Bob: "), "{first_text}");
    let edits = t.telegram.edits();
    assert!(!edits.is_empty(), "the answer grew by edits");
    for edit in &edits {
        assert!(edit.text.starts_with("Bob: "), "{edit:#?}");
        assert_eq!(edit.entities, bold_name("Bob"), "{edit:#?}");
    }
}

/// `troupe check` on `files` (name, character) written to a fresh directory: its exit
/// code and what it printed.
fn check(files: &[(&str, Value)]) -> (Option<i32>, String) {
    let dir = tempfile::tempdir().unwrap();
    for (name, character) in files {
        std::fs::write(dir.path().join(name), character.to_string()).unwrap();
    }
    let out = std::process::Command::new(troupe_bin())
        .arg("check")
        .args(files.iter().map(|(name, _)| *name))
        .current_dir(dir.path())
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .output()
        .expect("troupe check runs");
    let mut said = String::from_utf8_lossy(&out.stdout).into_owned();
    said.push_str(&String::from_utf8_lossy(&out.stderr));
    (out.status.code(), said)
}

#[test]
fn troupe_check_accepts_the_pair_that_opts_in_and_refuses_the_pair_that_does_not() {
    let character = |name: &str, speak_as: Option<&str>| {
        let mut c = troupe_e2e::persona_json(name, "x");
        c["clients"] = json!(["telegram"]);
        c["settings"]["secrets"] = json!({"TELEGRAM_BOT_TOKEN": "123:same"});
        if let Some(s) = speak_as {
            c["settings"]["troupe"] = json!({"telegram": {"speakAs": s}});
        }
        c
    };
    let (code, said) = check(&[
        ("ada.json", character("Ada", Some("prefix"))),
        ("bob.json", character("Bob", Some("prefix"))),
    ]);
    assert_eq!(code, Some(0), "{said}");

    let (code, said) = check(&[
        ("ada.json", character("Ada", Some("prefix"))),
        ("bob.json", character("Bob", None)),
    ]);
    assert_ne!(code, Some(0), "{said}");
    assert!(
        said.contains("telegram token")
            && said.contains("one bot account can serve one persona")
            && said.contains("settings.troupe.telegram.speakAs: \"prefix\""),
        "{said}"
    );
}
