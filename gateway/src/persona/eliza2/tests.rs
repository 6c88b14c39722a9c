//! elizaOS 2.x character files (issue 46): the real ones from elizaOS's repository, each 2.x
//! field and what troupe does with it, positions of errors in the 2.x shapes, and several
//! Telegram accounts for one persona.

use std::path::{Path, PathBuf};

use tempfile::TempDir;
use troupe_connectors::Platform;

use crate::persona::test_support::env;
use crate::persona::*;
use crate::persona::{load, prompt};

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

fn load_ok(dir: &Path, name: &str, text: &str) -> Loaded {
    match load_file(&write(dir, name, text)) {
        Ok(l) => l,
        Err(d) => panic!("{name} should load: {d:#?}"),
    }
}

fn load_err(dir: &Path, name: &str, text: &str) -> Vec<String> {
    match load_file(&write(dir, name, text)) {
        Ok(l) => panic!("{name} should fail; warnings {:?}", l.warnings),
        Err(d) => d.iter().map(ToString::to_string).collect(),
    }
}

fn warnings(l: &Loaded) -> Vec<String> {
    l.warnings.iter().map(ToString::to_string).collect()
}

/// The 2.x fixtures, kept in the repository (tests/fixtures/eliza2, with SOURCES.md): every
/// clone has them, so nothing skips.
fn eliza2_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/eliza2")
}

fn input<'a>(history: &'a [HistoryLine<'a>]) -> PromptInput<'a> {
    PromptInput {
        platform: Platform::Telegram,
        sender_name: "sam",
        history,
        knowledge: &[],
        seed: 3,
        budget_chars: 100_000,
        summary: None,
        facts: &[],
    }
}

#[test]
fn real_elizaos_2x_files_load_and_compose() {
    let dir = eliza2_dir();
    let files = load::persona_files(&dir).unwrap();
    assert!(files.len() >= 2, "{}", dir.display());
    for f in &files {
        let l = match load_file(f) {
            Ok(l) => l,
            Err(d) => panic!("{} must load: {d:#?}", f.display()),
        };
        let p = &l.persona;
        assert!(l.warnings.is_empty(), "{}: {:?}", f.display(), warnings(&l));
        // Their examples are 2.x groups: every group is read.
        assert!(p.character.message_examples.len() >= 3, "{}", f.display());
        let history = [HistoryLine {
            author_name: "sam",
            text: "hello",
        }];
        let prompt = compose(p, &input(&history));
        assert!(prompt.user.contains(&p.name));
        // 2.x's default character writes its name in its bio as `{{name}}`.
        assert!(!prompt.user.contains("{{name}}"), "{}", prompt.user);
        let left = prompt::placeholders(&prompt.user);
        assert!(
            left.iter().all(|(_, n)| !prompt::is_known_placeholder(n)),
            "{}: {left:?}",
            f.display()
        );
    }
}

/// Every 2.x field troupe reads, in one file.
const V2: &str = r#"{
  "name": "Vera",
  "bio": "Keeps the lighthouse.",
  "system": "You are Vera.",
  "lore": [
    "plain lore still reads",
    {"loreKey": "storm", "vectorText": "storm weather", "content": "Vera rang the bell in the storm of 1911.", "metadata": {"era": "old"}}
  ],
  "messageExamples": [
    {"examples": [
      {"name": "{{user1}}", "content": {"text": "hi", "thought": "a greeting", "providers": ["DOCUMENTS"]}},
      {"name": "{{agentName}}", "content": {"text": "evening.", "actions": ["REPLY"]}}
    ]},
    [{"name": "{{user1}}", "content": {"text": "old shape"}}, {"name": "Vera", "content": {"text": "still fine"}}]
  ],
  "documents": [
    "an inline fact",
    {"item": {"case": "path", "value": "notes.md"}},
    {"item": {"case": "directory", "value": {"path": "docs", "shared": true}}},
    {"path": "notes.md"},
    {"item": {}}
  ],
  "knowledge": ["not read: documents is set"],
  "advancedPlanning": true,
  "advancedMemory": false,
  "settings": {
    "extra": {"FARCASTER_SIGNER_UUID": "signer-from-extra", "TELEGRAM_ALLOWED_CHATS": ["-1001"], "A_KEY": "extra"},
    "A_KEY": "direct",
    "defaultTemperature": 0.4,
    "shouldRespondModel": "small"
  },
  "templates": {},
  "secrets": {}
}"#;

#[test]
fn every_2x_field_is_read_and_check_says_what_troupe_does() {
    let t = TempDir::new().unwrap();
    write(t.path(), "notes.md", "the lamp");
    std::fs::create_dir_all(t.path().join("docs")).unwrap();
    let l = load_ok(t.path(), "vera.json", V2);
    let c = &l.persona.character;
    assert_eq!(
        c.lore,
        [
            "plain lore still reads",
            "Vera rang the bell in the storm of 1911."
        ]
    );
    assert_eq!(c.message_examples.len(), 2);
    assert_eq!(c.message_examples[0][1].speaker, "{{agentName}}");
    assert_eq!(c.message_examples[0][1].action.as_deref(), Some("REPLY"));
    assert_eq!(c.knowledge.len(), 4, "{:?}", c.knowledge);
    assert_eq!(
        c.knowledge[0],
        KnowledgeEntry::Text("an inline fact".into())
    );
    assert!(
        matches!(&c.knowledge[1], KnowledgeEntry::File { path, shared: false } if path.ends_with("notes.md"))
    );
    assert!(
        matches!(&c.knowledge[2], KnowledgeEntry::Directory { path, shared: true } if path.ends_with("docs"))
    );
    assert_eq!(c.advanced_planning, Some(true));
    assert_eq!(c.advanced_memory, Some(false));
    // `settings.extra` reads as `settings`; what `settings` says itself wins.
    let p = &l.persona;
    let e = env(&[]);
    assert_eq!(p.secret("A_KEY", &e).as_deref(), Some("direct"));
    // 2.x's renamed Farcaster signer is found under troupe's name.
    assert_eq!(
        p.secret("FARCASTER_NEYNAR_SIGNER_UUID", &e).as_deref(),
        Some("signer-from-extra")
    );
    let rules = crate::access::rules::Rules::of(p, &e);
    assert_eq!(
        rules.telegram.rooms.as_deref(),
        Some(&["-1001".to_string()][..])
    );
    let w = warnings(&l).join("\n");
    for said in [
        "warning: knowledge: not read: `documents` is set",
        "warning: advancedPlanning: accepted; troupe does not run elizaOS's planner",
        "warning: advancedMemory: accepted; troupe always keeps its own memory",
    ] {
        assert!(w.contains(said), "{said}\n{w}");
    }
    assert_eq!(l.warnings.len(), 3, "{w}");
}

#[test]
fn knowledge_is_the_alias_of_documents_in_both_shapes() {
    let t = TempDir::new().unwrap();
    write(t.path(), "a.md", "a");
    let l = load_ok(
        t.path(),
        "k.json",
        r#"{"name": "K", "bio": "b", "documents": [],
            "knowledge": [{"item": {"case": "path", "value": "a.md"}}, {"path": "a.md"}, "fact"]}"#,
    );
    assert_eq!(l.persona.character.knowledge.len(), 3);
    assert!(l.warnings.is_empty(), "{:?}", warnings(&l));
}

#[test]
fn errors_in_2x_shapes_keep_their_line_and_column() {
    let t = TempDir::new().unwrap();
    let file = |n: &str| t.path().join(n).display().to_string();
    let d = load_err(
        t.path(),
        "a.json",
        "{\"name\": \"A\", \"bio\": \"b\",\n \"messageExamples\": [{\"examples\": 5}]}",
    );
    assert_eq!(
        d,
        [format!(
            "{}:2:35: messageExamples[0].examples: expected a list of messages, found a number",
            file("a.json")
        )]
    );
    let d = load_err(
        t.path(),
        "b.json",
        "{\"name\": \"B\", \"bio\": \"b\",\n \"documents\": [{\"item\": {\"case\": \"path\", \"value\": \"gone.md\"}}]}",
    );
    assert!(
        d[0].starts_with(&format!(
            "{}:2:51: documents[0].item.value: file \"gone.md\" not found",
            file("b.json")
        )),
        "{d:?}"
    );
    let d = load_err(
        t.path(),
        "c.json",
        "{\"name\": \"C\", \"bio\": \"b\",\n \"lore\": [{\"loreKey\": \"k\"}],\n \"advancedMemory\": \"yes\"}",
    );
    assert_eq!(
        d,
        [
            format!(
                "{}:2:11: lore[0]: a lore entry needs its \"content\": the text the character knows",
                file("c.json")
            ),
            format!(
                "{}:3:20: advancedMemory: expected true or false, found a string",
                file("c.json")
            ),
        ]
    );
    let d = load_err(
        t.path(),
        "d.json",
        "{\"name\": \"D\", \"bio\": \"b\",\n \"messageExamples\": [{\"example\": []}]}",
    );
    assert!(
        d.iter().any(|l| l.starts_with(&format!(
            "{}:2:22: messageExamples[0]: expected a conversation",
            file("d.json")
        ))),
        "{d:?}"
    );
}

const ACCOUNTS: &str = r#"{
  "name": "Tess",
  "bio": "Answers on two bots.",
  "plugins": ["@elizaos/plugin-telegram"],
  "settings": {
    "telegram": {
      "shouldIgnoreBotMessages": true,
      "botToken": "111:shared",
      "accounts": {
        "support": {"botToken": "222:support", "allowedChats": ["-100200", -100201]},
        "sales": {"allowedChats": []},
        "off": {"botToken": "333:off", "enabled": false},
        "default": {}
      }
    }
  }
}"#;

#[test]
fn telegram_accounts_resolve_as_elizaos_does() {
    let t = TempDir::new().unwrap();
    let l = load_ok(t.path(), "tess.json", ACCOUNTS);
    let p = &l.persona;
    assert!(l.warnings.is_empty(), "{:?}", warnings(&l));
    let e = env(&[("TELEGRAM_BOT_TOKEN", "999:env")]);
    let specs = p.telegram_accounts(&e).unwrap();
    let got: Vec<(&str, &str)> = specs
        .iter()
        .map(|s| (s.id.as_str(), s.token.as_str()))
        .collect();
    // Sorted by id; `off` is off; `sales` inherits settings.telegram.botToken; `default`
    // takes TELEGRAM_BOT_TOKEN as the file's (`settings.telegram.botToken`) first.
    assert_eq!(
        got,
        [
            ("default", "111:shared"),
            ("sales", "111:shared"),
            ("support", "222:support")
        ]
    );
    assert_eq!(
        specs[2].allowed_chats.as_deref(),
        Some(&["-100200".to_string(), "-100201".to_string()][..])
    );
    assert_eq!(specs[0].tag(), None);
    assert_eq!(specs[2].tag().as_deref(), Some("support"));
    assert_eq!(p.account_allowed_chats(Some("support")).unwrap().len(), 2);
    // Two accounts on one token: `troupe check` says so.
    let report = check_files(&[t.path().join("tess.json")], &e, &LoadOptions::default());
    let out: Vec<String> = report.diagnostics.iter().map(ToString::to_string).collect();
    assert!(
        out.iter()
            .any(|l| l.contains("\"default\" and \"sales\" have the same botToken")),
        "{out:?}"
    );
    // A file without accounts runs its one bot, as before.
    let one = load_ok(
        t.path(),
        "one.json",
        r#"{"name": "O", "bio": "b", "clients": ["telegram"]}"#,
    );
    assert!(one.persona.telegram_accounts(&e).is_none());
}

#[test]
fn a_bad_account_is_reported_where_it_is_written() {
    let t = TempDir::new().unwrap();
    let d = load_err(
        t.path(),
        "a.json",
        "{\"name\": \"A\", \"bio\": \"b\", \"settings\": {\"telegram\": {\"accounts\": {\n \"no/slash\": {}, \"ok\": {\"allowedChats\": [true]}}}}}",
    );
    let file = t.path().join("a.json").display().to_string();
    assert_eq!(
        d,
        [
            format!(
                "{file}:2:2: settings.telegram.accounts.no/slash: an account id is 1 to 64 letters, digits, `_` or `-` (it names the account's rooms)"
            ),
            format!(
                "{file}:2:42: settings.telegram.accounts.ok.allowedChats[0]: expected a chat id, found a boolean"
            ),
        ]
    );
}
