//! Tests for the persona module as a whole: real elizaOS files, one test per class of
//! diagnostic (exact line, column and message), prompts, secrets, `extends` and the watcher.

#![allow(clippy::disallowed_methods)] // tests pick databases and fixtures from the environment

use std::path::{Path, PathBuf};
use std::time::Duration;

use tempfile::TempDir;
use tokio_util::sync::CancellationToken;
use troupe_connectors::Platform;

use super::*;

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    if let Some(parent) = p.parent() {
        std::fs::create_dir_all(parent).unwrap();
    }
    std::fs::write(&p, text).unwrap();
    p
}

fn load_ok(dir: &Path, name: &str, text: &str) -> Loaded {
    let p = write(dir, name, text);
    match load_file(&p) {
        Ok(l) => l,
        Err(d) => panic!("{name} should load: {d:#?}"),
    }
}

/// The diagnostics of a file that must fail, as printed.
fn load_err(dir: &Path, name: &str, text: &str) -> Vec<String> {
    let p = write(dir, name, text);
    match load_file(&p) {
        Ok(l) => panic!("{name} should fail, loaded with warnings {:?}", l.warnings),
        Err(d) => d.iter().map(ToString::to_string).collect(),
    }
}

fn env(pairs: &[(&str, &str)]) -> Env {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

// ---------------------------------------------------------------------------------------
// Real files

/// Where the elizaOS fixtures are: `TROUPE_FIXTURES_DIR`, else `shared/` beside the repo.
#[allow(clippy::disallowed_methods)] // tests may read their own environment
fn fixtures_dir() -> Option<PathBuf> {
    if let Ok(d) = std::env::var("TROUPE_FIXTURES_DIR") {
        return Some(PathBuf::from(d));
    }
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures/characters");
    if p.is_dir() {
        return Some(p);
    }
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!(
            "fixtures not found at {} and TROUPE_FIXTURES_DIR is not set",
            p.display()
        );
    }
    eprintln!(
        "skipping: elizaOS fixtures not found at {} (set TROUPE_FIXTURES_DIR)",
        p.display()
    );
    None
}

#[test]
fn every_elizaos_fixture_loads() {
    let Some(dir) = fixtures_dir() else { return };
    let files = load::persona_files(&dir).unwrap();
    assert!(
        files.len() >= 20,
        "expected the fixtures in {}",
        dir.display()
    );
    let mut v1 = 0;
    for f in &files {
        let l = match load_file(f) {
            Ok(l) => l,
            Err(d) => panic!("{} must load:\n{}", f.display(), lines(&d)),
        };
        let p = &l.persona;
        assert!(!p.name.is_empty());
        assert!(!p.character.bio.is_empty(), "{}", f.display());
        assert!(p.platforms().contains(&Platform::Web));
        // Every fixture composes into a prompt that names the character.
        let history = [HistoryLine {
            author_name: "sam",
            text: "hello there",
        }];
        let prompt = compose(p, &input(Platform::Discord, &history, 7));
        assert!(prompt.user.contains(&p.name), "{}", f.display());
        // Speaker placeholders are filled; other braces in a file's text stay as written
        // (cosmosHelper has `{{mantrachaintestnet2}}` in its examples, as elizaOS leaves it).
        let left = prompt::placeholders(&prompt.user);
        assert!(
            left.iter().all(|(_, n)| !prompt::is_known_placeholder(n)),
            "{}: {left:?}",
            f.display()
        );
        if f.to_string_lossy().contains("v1_") {
            v1 += 1;
            // 1.x examples use `name` and `{{name1}}`.
            assert!(!p.character.message_examples.is_empty());
        }
    }
    assert!(v1 >= 2);
    // A few of the warnings the fixtures are known to raise.
    let check = check_files(
        std::slice::from_ref(&dir),
        &Env::new(),
        &LoadOptions::default(),
    );
    assert!(check.ok(), "{}", lines(&check.diagnostics));
    let all = lines(&check.diagnostics);
    assert!(all.contains("edrizi.json:"), "{all}");
    assert!(
        all.contains("warning: examples: unknown field (did you mean \"messageExamples\"?)"),
        "{all}"
    );
    assert!(
        all.contains("warning: clients[0]: troupe has no twitter connector"),
        "{all}"
    );
    assert!(
        all.contains("warning: clients[0]: troupe has no slack connector"),
        "{all}"
    );
    assert!(all.contains("warning: templates.introduction: troupe does not use a template"));
}

fn lines(d: &[Diagnostic]) -> String {
    d.iter().map(|d| format!("{d}\n")).collect()
}

#[test]
fn v1_fixture_specifics() {
    let Some(dir) = fixtures_dir() else { return };
    let shaw = load_file(&dir.join("v1_eliza-v1.3.1__shaw.json"))
        .unwrap()
        .persona;
    assert_eq!(shaw.model_provider().as_deref(), Some("openai"));
    assert_eq!(shaw.character.message_examples[0][0].speaker, "{{name1}}");
    let p = compose(&shaw, &input(Platform::Web, &[], 1));
    assert!(!p.user.contains("{{name1}}"));
    let eliza = load_file(&dir.join("v0_eliza-starter__eliza.character.json")).unwrap();
    assert_eq!(eliza.persona.id.as_str(), "eliza");
    assert!(eliza.warnings.is_empty(), "{}", lines(&eliza.warnings));
}

#[test]
fn default_persona_loads_without_warnings() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../personas");
    let l = load_file(&dir.join("troupe.json")).unwrap();
    assert!(l.warnings.is_empty(), "{}", lines(&l.warnings));
    let p = &l.persona;
    assert_eq!(p.id.as_str(), "troupe");
    assert_eq!(
        p.platforms(),
        [
            Platform::Discord,
            Platform::Telegram,
            Platform::Farcaster,
            Platform::Web
        ]
    );
    assert!(p.switches(Platform::Discord).respond_only_to_mentions);
    let report = check_files(&[dir], &Env::new(), &LoadOptions::default());
    assert!(
        report.diagnostics.is_empty(),
        "{}",
        lines(&report.diagnostics)
    );
}

// ---------------------------------------------------------------------------------------
// One test per class of diagnostic

#[test]
fn invalid_json_reports_line_and_column() {
    let t = TempDir::new().unwrap();
    let d = load_err(
        t.path(),
        "a.json",
        "{\n  \"name\": \"A\",\n  \"bio\": \"x\",\n}\n",
    );
    let f = t.path().join("a.json");
    assert_eq!(
        d,
        [format!(
            "{}:4:1: (json): trailing comma before `}}`; JSON does not allow a comma after the last field",
            f.display()
        )]
    );
    let d = load_err(
        t.path(),
        "b.json",
        "{\n  \"name\": \"A\"\n  \"bio\": \"x\"\n}\n",
    );
    assert_eq!(
        d,
        [format!(
            "{}:3:3: (json): missing `,` between fields",
            t.path().join("b.json").display()
        )]
    );
}

#[test]
fn wrong_type_points_at_the_value() {
    let t = TempDir::new().unwrap();
    let d = load_err(
        t.path(),
        "alice.json",
        "{\n  \"name\": \"Alice\",\n  \"bio\": 42\n}",
    );
    assert_eq!(
        d,
        [format!(
            "{}:3:10: bio: expected a string or a list of strings, found a number",
            t.path().join("alice.json").display()
        )]
    );
    let d = load_err(
        t.path(),
        "b.json",
        "{\"name\": \"B\", \"bio\": \"x\",\n \"style\": {\"all\": [\"ok\", 3]}}",
    );
    assert!(
        d[0].ends_with(":2:26: style.all[1]: expected a string, found a number"),
        "{d:?}"
    );
    let d = load_err(
        t.path(),
        "c.json",
        "{\"name\": \"C\", \"bio\": \"x\", \"lore\": \"once\"}",
    );
    assert!(
        d[0].ends_with(":1:35: lore: expected a list of strings, found a string (wrap it in [ ])"),
        "{d:?}"
    );
}

#[test]
fn missing_name() {
    let t = TempDir::new().unwrap();
    let d = load_err(t.path(), "a.json", "{\n  \"bio\": \"x\"\n}");
    assert_eq!(
        d,
        [format!(
            "{}:1:1: name: missing; every character needs a \"name\", e.g. \"name\": \"Alice\"",
            t.path().join("a.json").display()
        )]
    );
}

#[test]
fn empty_name() {
    let t = TempDir::new().unwrap();
    let d = load_err(
        t.path(),
        "a.json",
        "{\n  \"name\": \"  \",\n  \"bio\": \"x\"\n}",
    );
    assert_eq!(
        d,
        [format!(
            "{}:2:11: name: is empty; write the character's name, e.g. \"name\": \"Alice\"",
            t.path().join("a.json").display()
        )]
    );
}

#[test]
fn empty_bio() {
    let t = TempDir::new().unwrap();
    let d = load_err(
        t.path(),
        "a.json",
        "{\n  \"name\": \"A\",\n  \"bio\": [\"\"]\n}",
    );
    assert_eq!(
        d,
        [format!(
            "{}:3:10: bio: is empty; write at least one sentence about who the character is",
            t.path().join("a.json").display()
        )]
    );
}

#[test]
fn unfilled_template_placeholder() {
    let t = TempDir::new().unwrap();
    let text = "{\"name\": \"A\", \"bio\": \"x\",\n \"templates\": {\"messageHandlerTemplate\": \"About {{agentName}}\\n{{agentNmae}}\"}}";
    let d = load_err(t.path(), "a.json", text);
    // Column 42 is the opening quote, `\n` is two source characters: `{{agentNmae}}` at 64.
    assert_eq!(
        d,
        [format!(
            "{}:2:64: templates.messageHandlerTemplate: {{{{agentNmae}}}} is not a placeholder troupe fills (did you mean {{{{agentName}}}}?); see docs/personas.md for the list",
            t.path().join("a.json").display()
        )]
    );
    // elizaOS placeholders troupe has no data for are accepted (and left empty).
    load_ok(
        t.path(),
        "b.json",
        "{\"name\": \"B\", \"bio\": \"x\", \"templates\": {\"messageHandlerTemplate\": \"{{actions}} {{user1}} {{recentMessages}}\"}}",
    );
}

#[test]
fn missing_knowledge_path() {
    let t = TempDir::new().unwrap();
    let text = "{\"name\": \"A\", \"bio\": \"x\",\n \"knowledge\": [\"inline fact\", {\"path\": \"docs/nope.md\"}]}";
    let d = load_err(t.path(), "a.json", text);
    assert_eq!(d.len(), 1, "{d:?}");
    let prefix = format!(
        "{}:2:40: knowledge[1].path: file \"docs/nope.md\" not found (looked next to the \
         character file, in its knowledge/ directory",
        t.path().join("a.json").display(),
    );
    assert!(d[0].starts_with(&prefix), "{}\n{prefix}", d[0]);
    // No absolute path in the message itself.
    let (_, message) = d[0].split_once(" knowledge[1].path: ").unwrap();
    assert!(!message.contains(&*t.path().to_string_lossy()), "{message}");

    // Found next to the file, or in its knowledge/ folder.
    write(t.path(), "docs/yes.md", "hello");
    write(t.path(), "knowledge/k.md", "hello");
    std::fs::create_dir_all(t.path().join("kdir")).unwrap();
    let l = load_ok(
        t.path(),
        "b.json",
        "{\"name\": \"B\", \"bio\": \"x\", \"knowledge\": [\"fact\", {\"path\": \"docs/yes.md\"}, {\"path\": \"k.md\", \"shared\": true}, {\"directory\": \"kdir\"}]}",
    );
    assert_eq!(
        l.persona.knowledge(),
        [
            KnowledgeEntry::Text("fact".into()),
            KnowledgeEntry::File {
                path: t.path().join("docs/yes.md"),
                shared: false
            },
            KnowledgeEntry::File {
                path: t.path().join("knowledge/k.md"),
                shared: true
            },
            KnowledgeEntry::Directory {
                path: t.path().join("kdir"),
                shared: false
            },
        ]
    );
}

/// `../` enough times to climb from `dir` to `/`.
#[cfg(unix)]
fn up_to_root(dir: &Path) -> String {
    let depth = std::fs::canonicalize(dir).unwrap().components().count() - 1;
    "../".repeat(depth)
}

/// A personas directory whose character file points out of it five ways, and a directory
/// outside with what they point at.
#[cfg(unix)]
fn escaping_character(t: &Path) -> (PathBuf, PathBuf) {
    let personas = t.join("personas");
    let outside = t.join("outside");
    write(&outside, "secret.md", "the outside secret");
    write(&outside, "more/other.md", "more");
    write(&personas, "docs/fine.md", "fine");
    std::os::unix::fs::symlink(outside.join("secret.md"), personas.join("docs/link.md")).unwrap();
    std::os::unix::fs::symlink(outside.join("more"), personas.join("linkdir")).unwrap();
    let up = up_to_root(&personas);
    let secret = outside.join("secret.md").display().to_string();
    let text = format!(
        "{{\"name\": \"A\", \"bio\": \"x\", \"knowledge\": [\n\
         \"inline\",\n\
         {{\"path\": \"{up}etc/passwd\"}},\n\
         {{\"path\": \"/etc/passwd\"}},\n\
         {{\"path\": \"{secret}\"}},\n\
         {{\"path\": \"docs/link.md\"}},\n\
         {{\"directory\": \"linkdir\"}},\n\
         {{\"directory\": \"/etc\"}},\n\
         {{\"path\": \"docs/fine.md\"}}\n]}}"
    );
    (write(&personas, "a.json", &text), outside)
}

#[cfg(unix)]
#[test]
fn knowledge_paths_that_leave_the_personas_directory_are_skipped_at_load() {
    let t = TempDir::new().unwrap();
    let (file, _) = escaping_character(t.path());
    let personas = std::fs::canonicalize(file.parent().unwrap()).unwrap();
    let l = load_file(&file).expect("the persona loads without the refused entries");
    assert_eq!(
        l.persona.knowledge(),
        [
            KnowledgeEntry::Text("inline".into()),
            KnowledgeEntry::File {
                path: personas.join("docs/fine.md"),
                shared: false
            },
        ]
    );
    let w: Vec<String> = l.warnings.iter().map(ToString::to_string).collect();
    let at = |line: usize, field: &str| {
        w.iter()
            .find(|d| d.contains(&format!("a.json:{line}:")) && d.contains(field))
            .unwrap_or_else(|| panic!("no warning at line {line} ({field}): {w:#?}"))
            .clone()
    };
    let up = at(3, "warning: knowledge[1].path: file \"");
    assert!(up.contains("climbs out of the personas directory"), "{up}");
    // Where the personas directory is, and where the entry leads, are not shown (issue 30,
    // finding 3).
    let (_, message) = up.split_once("knowledge[1].path: ").unwrap();
    assert!(!message.contains(&personas.display().to_string()), "{up}");
    assert!(up.ends_with("the entry is skipped"), "{up}");
    let abs = at(
        4,
        "warning: knowledge[2].path: file \"/etc/passwd\" is an absolute path",
    );
    assert!(abs.contains("TROUPE_KNOWLEDGE_ALLOW_PATHS"), "{abs}");
    at(5, "knowledge[3].path: file \"");
    let link = at(
        6,
        "knowledge[4].path: file \"docs/link.md\" is reached through a symlink",
    );
    // Where the symlink leads is not shown.
    assert!(!link.contains("secret.md"), "{link}");
    at(
        7,
        "knowledge[5].directory: directory \"linkdir\" is reached through a symlink",
    );
    at(
        8,
        "knowledge[6].directory: directory \"/etc\" is an absolute path",
    );
    assert_eq!(w.len(), 6, "{w:#?}");
}

#[cfg(unix)]
#[test]
fn troupe_check_reports_refused_knowledge_paths_as_errors() {
    let t = TempDir::new().unwrap();
    let (file, _) = escaping_character(t.path());
    let report = check_files(
        std::slice::from_ref(&file),
        &Env::new(),
        &LoadOptions::default(),
    );
    assert!(!report.ok());
    let errors: Vec<String> = report.errors().map(ToString::to_string).collect();
    assert_eq!(errors.len(), 6, "{errors:#?}");
    let want = format!(
        "{}:4:10: knowledge[2].path: file \"/etc/passwd\" is an absolute path",
        file.display()
    );
    assert!(errors.iter().any(|e| e.starts_with(&want)), "{errors:#?}");
    assert!(errors.iter().all(|e| !e.contains("skipped")), "{errors:#?}");
}

#[cfg(unix)]
#[test]
fn an_allowed_root_admits_knowledge_outside_the_personas_directory() {
    let t = TempDir::new().unwrap();
    let (file, outside) = escaping_character(t.path());
    let outside = std::fs::canonicalize(outside).unwrap();
    let options = LoadOptions {
        knowledge_roots: vec![outside.clone()],
    };
    let l = load_file_with(&file, &options).unwrap();
    let paths: Vec<&Path> = l
        .persona
        .knowledge()
        .iter()
        .filter_map(|k| match k {
            KnowledgeEntry::File { path, .. } | KnowledgeEntry::Directory { path, .. } => {
                Some(path.as_path())
            }
            KnowledgeEntry::Text(_) => None,
        })
        .collect();
    // The absolute path, the symlinked file and the symlinked directory under `outside`
    // are in; /etc stays out.
    assert!(
        paths.contains(&outside.join("secret.md").as_path()),
        "{paths:?}"
    );
    assert!(paths.contains(&outside.join("more").as_path()), "{paths:?}");
    assert!(!paths.iter().any(|p| p.starts_with("/etc")), "{paths:?}");
    let report = check_files(std::slice::from_ref(&file), &Env::new(), &options);
    let errors: Vec<String> = report.errors().map(ToString::to_string).collect();
    assert_eq!(errors.len(), 3, "{errors:#?}");
}

#[test]
fn unknown_field_is_a_warning_with_a_suggestion() {
    let t = TempDir::new().unwrap();
    let l = load_ok(
        t.path(),
        "alice.json",
        "{\n  \"name\": \"Alice\",\n  \"biography\": \"x\",\n  \"bio\": \"y\"\n}",
    );
    let w: Vec<String> = l.warnings.iter().map(ToString::to_string).collect();
    assert_eq!(
        w,
        [format!(
            "{}:3:3: warning: biography: unknown field (did you mean \"bio\"?); it is kept but not used",
            t.path().join("alice.json").display()
        )]
    );
    assert_eq!(l.persona.character.extra["biography"], "x");
    assert_eq!(l.persona.raw["biography"], "x");
}

#[test]
fn unsupported_client_is_a_warning() {
    let t = TempDir::new().unwrap();
    let l = load_ok(
        t.path(),
        "a.json",
        "{\"name\": \"A\", \"bio\": \"x\",\n \"clients\": [\"telegram\", \"twitter\"],\n \"plugins\": [\"@elizaos/plugin-slack\"]}",
    );
    let w: Vec<String> = l.warnings.iter().map(ToString::to_string).collect();
    let f = t.path().join("a.json").display().to_string();
    assert_eq!(
        w,
        [
            format!(
                "{f}:2:26: warning: clients[1]: troupe has no twitter connector; this client is ignored (troupe runs discord, telegram, farcaster and direct)"
            ),
            format!(
                "{f}:3:14: warning: plugins[0]: troupe has no slack connector; this plugin is ignored"
            ),
        ]
    );
    assert_eq!(l.persona.platforms(), [Platform::Telegram, Platform::Web]);
}

#[test]
fn duplicate_token_across_files_names_both() {
    let t = TempDir::new().unwrap();
    let a = write(
        t.path(),
        "a.json",
        "{\"name\": \"A\", \"bio\": \"x\",\n \"clients\": [\"telegram\"]}",
    );
    let b = write(
        t.path(),
        "b.json",
        "{\"name\": \"B\", \"bio\": \"x\",\n \"clients\": [\"telegram\"]}",
    );
    let e = env(&[("TELEGRAM_BOT_TOKEN", "123:abc")]);
    let r = check_files(&[a.clone(), b.clone()], &e, &LoadOptions::default());
    assert!(!r.ok());
    let got: Vec<String> = r.diagnostics.iter().map(ToString::to_string).collect();
    assert_eq!(
        got,
        [
            format!(
                "{}:2:13: clients (telegram): telegram token (environment variable TELEGRAM_BOT_TOKEN) is the same as the one {} uses; one bot account can serve one persona: give each its own TELEGRAM_BOT_TOKEN in settings.secrets or CHARACTER.A.TELEGRAM_BOT_TOKEN, or let them share the bot with settings.troupe.telegram.speakAs: \"prefix\" in each (docs/telegram.md)",
                a.display(),
                b.display()
            ),
            format!(
                "{}:2:13: clients (telegram): telegram token (environment variable TELEGRAM_BOT_TOKEN) is the same as the one {} uses; one bot account can serve one persona: give each its own TELEGRAM_BOT_TOKEN in settings.secrets or CHARACTER.B.TELEGRAM_BOT_TOKEN, or let them share the bot with settings.troupe.telegram.speakAs: \"prefix\" in each (docs/telegram.md)",
                b.display(),
                a.display()
            ),
        ]
    );
    // A token of its own for one of them settles it.
    let e2 = env(&[
        ("TELEGRAM_BOT_TOKEN", "123:abc"),
        ("CHARACTER.B.TELEGRAM_BOT_TOKEN", "456:def"),
    ]);
    assert!(check_files(&[a.clone(), b.clone()], &e2, &LoadOptions::default()).ok());

    // The same token written in both files points at the secret.
    let c = write(
        t.path(),
        "c.json",
        "{\"name\": \"C\", \"bio\": \"x\", \"clients\": [\"discord\"],\n \"settings\": {\"secrets\": {\"DISCORD_API_TOKEN\": \"tok\"}}}",
    );
    let d = write(
        t.path(),
        "d.json",
        "{\"name\": \"D\", \"bio\": \"x\", \"plugins\": [\"@elizaos/plugin-discord\"],\n \"secrets\": {\"DISCORD_API_TOKEN\": \"tok\"}}",
    );
    let r = check_files(
        &[c.clone(), d.clone()],
        &Env::new(),
        &LoadOptions::default(),
    );
    let got: Vec<String> = r.errors().map(ToString::to_string).collect();
    assert_eq!(got.len(), 2, "{got:?}");
    assert!(got[0].starts_with(&format!("{}:2:48: settings.secrets.DISCORD_API_TOKEN: discord token (settings.secrets.DISCORD_API_TOKEN) is the same as the one {} uses", c.display(), d.display())), "{}", got[0]);
    assert!(got[1].starts_with(&format!("{}:2:35: secrets.DISCORD_API_TOKEN: discord token (secrets.DISCORD_API_TOKEN) is the same as the one {} uses", d.display(), c.display())), "{}", got[1]);
}

#[test]
fn personas_that_speak_through_webhooks_may_share_a_discord_bot() {
    let t = TempDir::new().unwrap();
    let file = |name: &str, speak_as: &str| {
        format!(
            "{{\"name\": \"{name}\", \"bio\": \"x\", \"clients\": [\"discord\"],\n \"settings\": {{\"avatar\": \"https://x.test/{name}.png\", \"troupe\": {{\"discord\": {{\"speakAs\": \"{speak_as}\"}}}}}}}}"
        )
    };
    let a = write(t.path(), "a.json", &file("Ada", "webhook"));
    let b = write(t.path(), "b.json", &file("Bob", "webhook"));
    let e = env(&[("DISCORD_API_TOKEN", "tok")]);
    let r = check_files(&[a.clone(), b.clone()], &e, &LoadOptions::default());
    assert!(r.ok(), "{:?}", r.diagnostics);
    assert!(r.loaded.iter().all(|l| l.persona.speaks_through_webhooks()));
    assert_eq!(r.loaded[0].persona.avatar(), Some("https://x.test/Ada.png"));
    // One that does not opt in keeps the error, which says how to share.
    let c = write(t.path(), "c.json", &file("Cy", "bot"));
    let r = check_files(&[a.clone(), c.clone()], &e, &LoadOptions::default());
    let got: Vec<String> = r.errors().map(ToString::to_string).collect();
    assert_eq!(got.len(), 2, "{got:?}");
    assert!(
        got[0].contains("settings.troupe.discord.speakAs"),
        "{}",
        got[0]
    );
    // A name Discord refuses for webhooks is a warning naming the name used instead.
    let d = write(t.path(), "d.json", &file("Discord Dan", "webhook"));
    let r = check_files(&[d], &e, &LoadOptions::default());
    assert!(r.ok());
    let got: Vec<String> = r.diagnostics.iter().map(ToString::to_string).collect();
    assert!(
        got.iter().any(|w| w.contains("warning: name: Discord refuses webhook names containing \"discord\"; on Discord this persona speaks as \"Dan\"")),
        "{got:?}"
    );
    // A bad value is an error at the field.
    let x = write(t.path(), "x.json", &file("Xu", "ghost"));
    let r = check_files(&[x], &e, &LoadOptions::default());
    assert!(!r.ok());
}

#[test]
fn personas_that_speak_with_a_prefix_may_share_a_telegram_bot() {
    let t = TempDir::new().unwrap();
    let file = |name: &str, speak_as: &str| {
        format!(
            "{{\"name\": \"{name}\", \"bio\": \"x\", \"clients\": [\"telegram\"],\n \"settings\": {{\"troupe\": {{\"telegram\": {{\"speakAs\": \"{speak_as}\"}}}}}}}}"
        )
    };
    let a = write(t.path(), "a.json", &file("Ada", "prefix"));
    let b = write(t.path(), "b.json", &file("Bob", "prefix"));
    let e = env(&[("TELEGRAM_BOT_TOKEN", "123:tok")]);
    let r = check_files(&[a.clone(), b.clone()], &e, &LoadOptions::default());
    assert!(r.ok(), "{:?}", r.diagnostics);
    let (ada, bob) = (&r.loaded[0].persona, &r.loaded[1].persona);
    assert!(ada.shares_bot_on(Platform::Telegram) && !ada.speaks_through_webhooks());
    assert!(ada.may_share_bot_with(bob, Platform::Telegram));
    assert!(
        !ada.may_share_bot_with(bob, Platform::Discord),
        "opted in on Telegram only"
    );
    assert_eq!(refuse_shared_bots(&[ada, bob], &e), Ok(()));

    // One that does not opt in keeps the error, which says how to share.
    let c = write(t.path(), "c.json", &file("Cy", "bot"));
    let r = check_files(&[a.clone(), c.clone()], &e, &LoadOptions::default());
    let got: Vec<String> = r.errors().map(ToString::to_string).collect();
    assert_eq!(got.len(), 2, "{got:?}");
    assert!(
        got[0].contains("telegram token")
            && got[0].contains(
                "settings.troupe.telegram.speakAs: \"prefix\" in each (docs/telegram.md)"
            ),
        "{}",
        got[0]
    );
    let (ada, cy) = (&r.loaded[0].persona, &r.loaded[1].persona);
    assert!(!ada.may_share_bot_with(cy, Platform::Telegram));
    let refused = refuse_shared_bots(&[ada, cy], &e).unwrap_err();
    assert!(
        refused.contains("settings.troupe.telegram.speakAs"),
        "{refused}"
    );

    // Discord's value is not Telegram's: an error at the value, naming both choices.
    let x = write(t.path(), "x.json", &file("Xu", "webhook"));
    let r = check_files(std::slice::from_ref(&x), &e, &LoadOptions::default());
    let got: Vec<String> = r.errors().map(ToString::to_string).collect();
    assert_eq!(
        got,
        [format!(
            "{}:2:50: settings.troupe.telegram.speakAs: expected \"prefix\" (personas share one bot and speak with their name in bold in front) or \"bot\" (the default)",
            x.display()
        )]
    );
}

#[test]
fn speak_as_is_read_per_platform() {
    let t = TempDir::new().unwrap();
    let l = load_ok(
        t.path(),
        "a.json",
        "{\"name\": \"A\", \"bio\": \"x\", \"settings\": {\"troupe\": {\"discord\": {\"speakAs\": \"webhook\"}, \"telegram\": {\"speakAs\": \"prefix\"}}}}",
    );
    let settings = &l.persona.character.settings;
    assert_eq!(settings.discord_speak_as, SpeakAs::Webhook);
    assert_eq!(settings.telegram_speak_as, SpeakAs::Prefix);
    let l = load_ok(t.path(), "b.json", "{\"name\": \"B\", \"bio\": \"x\"}");
    assert_eq!(l.persona.character.settings.telegram_speak_as, SpeakAs::Bot);
    // Telegram's value is not Discord's.
    let got = load_err(
        t.path(),
        "c.json",
        "{\"name\": \"C\", \"bio\": \"x\", \"settings\": {\"troupe\": {\"discord\": {\"speakAs\": \"prefix\"}}}}",
    );
    assert!(
        got.iter()
            .any(|e| e.contains("settings.troupe.discord.speakAs: expected \"webhook\"")),
        "{got:?}"
    );
}

#[test]
fn duplicate_id_across_files_names_both() {
    let t = TempDir::new().unwrap();
    let a = write(
        t.path(),
        "a.json",
        "{\"name\": \"Same Name\", \"bio\": \"x\"}",
    );
    let b = write(
        t.path(),
        "b.json",
        "{\"id\": \"same-name\", \"name\": \"Other\", \"bio\": \"x\"}",
    );
    let r = check_files(
        &[t.path().to_path_buf()],
        &Env::new(),
        &LoadOptions::default(),
    );
    let got: Vec<String> = r.diagnostics.iter().map(ToString::to_string).collect();
    assert_eq!(
        got,
        [
            format!(
                "{}:1:10: name: persona id \"same-name\" is also used by {}; ids must be unique (the id comes from the name: rename one, or set an \"id\")",
                a.display(),
                b.display()
            ),
            format!(
                "{}:1:8: id: persona id \"same-name\" is also used by {}; ids must be unique (give each persona its own \"id\")",
                b.display(),
                a.display()
            ),
        ]
    );
    // load_dir refuses the second one.
    let (ok, bad) = load_dir(t.path(), &LoadOptions::default());
    assert_eq!(ok.len(), 1);
    assert_eq!(bad.len(), 1);
}

#[test]
fn extends_cycle_is_an_error() {
    let t = TempDir::new().unwrap();
    write(
        t.path(),
        "base/b.json",
        "{\"extends\": [\"../a.json\"], \"lore\": [\"l\"]}",
    );
    let d = load_err(
        t.path(),
        "a.json",
        "{\"name\": \"A\", \"bio\": \"x\",\n \"extends\": [\"base/b.json\"]}",
    );
    assert_eq!(
        d,
        [format!(
            "{}:1:14: extends[0]: extends cycle: a.json → b.json → a.json",
            t.path().join("base/b.json").display()
        )]
    );
    let d = load_err(
        t.path(),
        "c.json",
        "{\"name\": \"C\", \"bio\": \"x\", \"extends\": [\"nope.json\"]}",
    );
    assert!(
        d[0].contains(":1:39: extends[0]: parent file \"nope.json\" was not found"),
        "{d:?}"
    );
}

// ---------------------------------------------------------------------------------------
// Prompts

fn input<'a>(platform: Platform, history: &'a [HistoryLine<'a>], seed: u64) -> PromptInput<'a> {
    PromptInput {
        platform,
        sender_name: "sam",
        history,
        knowledge: &[],
        seed,
        budget_chars: 100_000,
        summary: None,
        facts: &[],
    }
}

const RICH: &str = r#"{
  "name": "Ziggy",
  "system": "You are Ziggy.",
  "bio": ["b1 alpha", "b2 beta", "b3 gamma", "b4 delta", "b5 epsilon", "b6 zeta"],
  "lore": ["l1", "l2", "l3", "l4", "l5", "l6", "l7", "l8", "l9", "l10", "l11", "l12"],
  "topics": ["t1", "t2", "t3", "t4", "t5", "t6", "t7"],
  "adjectives": ["a1", "a2", "a3", "a4"],
  "style": {"all": ["be short"], "chat": ["be kind"], "post": ["no hashtags"]},
  "messageExamples": [
    [{"user": "{{user1}}", "content": {"text": "hi {{user2}}"}}, {"user": "Ziggy", "content": {"text": "e1", "action": "WAVE"}}],
    [{"user": "{{user1}}", "content": {"text": "q2"}}, {"user": "Ziggy", "content": {"text": "e2"}}],
    [{"user": "{{user1}}", "content": {"text": "q3"}}, {"user": "Ziggy", "content": {"text": "e3"}}],
    [{"user": "{{user1}}", "content": {"text": "q4"}}, {"user": "Ziggy", "content": {"text": "e4"}}],
    [{"user": "{{user1}}", "content": {"text": "q5"}}, {"user": "Ziggy", "content": {"text": "e5"}}],
    [{"user": "{{user1}}", "content": {"text": "q6"}}, {"user": "Ziggy", "content": {"text": "e6"}}],
    [{"user": "{{user1}}", "content": {"text": "q7"}}, {"user": "Ziggy", "content": {"text": "e7"}}]
  ]
}"#;

#[test]
fn default_template_follows_elizaos_sampling() {
    let t = TempDir::new().unwrap();
    let p = load_ok(t.path(), "z.json", RICH).persona;
    let history = [
        HistoryLine {
            author_name: "sam",
            text: "hello",
        },
        HistoryLine {
            author_name: "Ziggy",
            text: "hey",
        },
        HistoryLine {
            author_name: "sam",
            text: "how are you?",
        },
    ];
    let knowledge = [KnowledgeItem {
        source: "handbook.md",
        text: "The office opens at 9.",
    }];
    let mut i = input(Platform::Telegram, &history, 42);
    i.knowledge = &knowledge;
    let prompt = compose(&p, &i);
    assert_eq!(prompt.system, "You are Ziggy.");
    let u = &prompt.user;
    let count = |prefix: &str, n: usize| {
        (1..=n)
            .filter(|k| u.contains(&format!("{prefix}{k}")))
            .count()
    };
    // 3 of 6 bio entries, 10 of 12 lore, 5 of 7 examples, 5 of 7 topics, one adjective.
    assert_eq!(
        ["alpha", "beta", "gamma", "delta", "epsilon", "zeta"]
            .iter()
            .filter(|b| u.contains(*b))
            .count(),
        3
    );
    assert_eq!(
        u.lines()
            .filter(|l| l.starts_with('l') && l[1..].parse::<u32>().is_ok())
            .count(),
        10
    );
    assert_eq!(count("Ziggy: e", 7), 5);
    assert_eq!((1..=7).filter(|k| u.contains(&format!("t{k}"))).count(), 5);
    assert!(u.contains("Ziggy is interested in t"));
    assert_eq!(count("Tone for this reply: a", 4), 1);
    assert!(u.contains("# Message Directions for Ziggy\nbe short\nbe kind"));
    assert!(!u.contains("no hashtags"));
    assert!(u.contains("# Knowledge\nFrom handbook.md:\nThe office opens at 9."));
    assert!(u.contains("# Conversation Messages\nsam: hello\nZiggy: hey\nsam: how are you?"));
    assert!(u.contains("telegram conversation, replying to sam"));
    // Example speakers get generated names; placeholders never reach the model.
    assert!(!u.contains("{{"), "{u}");
    if u.contains("Ziggy: e1") {
        assert!(u.contains("(action: WAVE)"));
    }
}

#[test]
fn sampling_is_deterministic_for_a_seed() {
    let t = TempDir::new().unwrap();
    let p = load_ok(t.path(), "z.json", RICH).persona;
    let a = compose(&p, &input(Platform::Discord, &[], 7));
    let b = compose(&p, &input(Platform::Discord, &[], 7));
    assert_eq!(a, b);
    let differs = (8..20).any(|s| compose(&p, &input(Platform::Discord, &[], s)) != a);
    assert!(differs, "other seeds should sample differently");
}

#[test]
fn templates_override_and_platform_variants_win() {
    let t = TempDir::new().unwrap();
    let p = load_ok(
        t.path(),
        "a.json",
        r#"{"name": "Al", "bio": "A bio.", "templates": {
            "messageHandlerTemplate": "GENERIC {{agentName}} / {{bio}} / {{senderName}}\n{{recentMessages}}",
            "discordMessageHandlerTemplate": "DISCORD {{agentName}} on {{platform}}"
        }}"#,
    )
    .persona;
    let h = [HistoryLine {
        author_name: "sam",
        text: "yo",
    }];
    let web = compose(&p, &input(Platform::Web, &h, 1));
    assert_eq!(
        web.user,
        "GENERIC Al / A bio. / sam\n# Conversation Messages\nsam: yo"
    );
    let telegram = compose(&p, &input(Platform::Telegram, &h, 1));
    assert_eq!(telegram.user, web.user);
    let discord = compose(&p, &input(Platform::Discord, &h, 1));
    assert_eq!(discord.user, "DISCORD Al on discord");
    // No `system` in the file: a default line naming the character.
    assert!(web.system.starts_with("You are Al."));
}

#[test]
fn long_history_is_trimmed_oldest_first() {
    let t = TempDir::new().unwrap();
    let p = load_ok(t.path(), "z.json", RICH).persona;
    let texts: Vec<String> = (0..300)
        .map(|i| format!("message number {i:03} {}", "x".repeat(80)))
        .collect();
    let history: Vec<HistoryLine> = texts
        .iter()
        .map(|t| HistoryLine {
            author_name: "sam",
            text: t,
        })
        .collect();
    let mut i = input(Platform::Discord, &history, 3);
    let full = compose(&p, &i);
    let persona_only = compose(&p, &input(Platform::Discord, &history[299..], 3));
    let size = |p: &Prompt| p.system.chars().count() + p.user.chars().count();
    i.budget_chars = size(&persona_only) + 20 * 100;
    let cut = compose(&p, &i);
    assert!(
        size(&cut) <= i.budget_chars,
        "{} > {}",
        size(&cut),
        i.budget_chars
    );
    assert!(size(&cut) < size(&full));
    // The persona parts are all there, and the latest message.
    assert_eq!(cut.system, full.system);
    let persona_part = |p: &Prompt| {
        p.user
            .split("# Conversation Messages")
            .next()
            .unwrap()
            .to_string()
    };
    assert_eq!(persona_part(&cut), persona_part(&full));
    assert!(cut.user.contains("message number 299"));
    assert!(!cut.user.contains("message number 000"));
    // What is kept is the newest run, without gaps.
    let kept: Vec<usize> = (0..300)
        .filter(|n| cut.user.contains(&format!("message number {n:03}")))
        .collect();
    assert!(kept.len() >= 15 && kept.len() <= 20, "{}", kept.len());
    assert_eq!(kept, ((300 - kept.len())..300).collect::<Vec<_>>());

    // Over budget with the persona alone: samples are trimmed, the latest message stays.
    i.budget_chars = 400;
    let tiny = compose(&p, &i);
    assert!(tiny.user.contains("message number 299"));
    assert!(!tiny.user.contains("message number 298"));
    assert!(!tiny.user.contains("# Example Conversations"));
    assert!(tiny.user.contains("# About Ziggy"));
    assert!(size(&tiny) < size(&persona_only));
}

#[test]
fn secrets_stay_per_persona() {
    let t = TempDir::new().unwrap();
    let alice = load_ok(
        t.path(),
        "alice.json",
        r#"{"name": "Alice", "bio": "x", "settings": {"secrets": {"OPENAI_API_KEY": "alice-key", "EMPTY": ""}}}"#,
    )
    .persona;
    let bob = load_ok(
        t.path(),
        "bob.json",
        r#"{"name": "Bob Smith", "bio": "x", "secrets": {"OPENAI_API_KEY": "bob-file-key"}, "settings": {"secrets": {"OPENAI_API_KEY": "bob-v0-key"}, "MY_SETTING": "s"}}"#,
    )
    .persona;
    let carol = load_ok(t.path(), "carol.json", r#"{"name": "Carol", "bio": "x"}"#).persona;
    let e = env(&[
        ("OPENAI_API_KEY", "global"),
        ("EMPTY", "from-env"),
        ("CHARACTER.BOB_SMITH.ANTHROPIC_API_KEY", "bob-env-key"),
        ("CHARACTER.ALICE.OPENAI_API_KEY", "alice-env-key"),
    ]);
    assert_eq!(
        alice.secret("OPENAI_API_KEY", &e).as_deref(),
        Some("alice-env-key")
    );
    assert_eq!(
        bob.secret("OPENAI_API_KEY", &e).as_deref(),
        Some("bob-file-key")
    );
    assert_eq!(
        bob.secret("ANTHROPIC_API_KEY", &e).as_deref(),
        Some("bob-env-key")
    );
    assert_eq!(bob.secret("MY_SETTING", &e).as_deref(), Some("s"));
    assert_eq!(
        carol.secret("OPENAI_API_KEY", &e).as_deref(),
        Some("global")
    );
    assert_eq!(carol.secret("ANTHROPIC_API_KEY", &e), None);
    // An empty secret in the file counts as unset.
    assert_eq!(alice.secret("EMPTY", &e).as_deref(), Some("from-env"));
    // Without the CHARACTER variable, the file's secret beats the process environment.
    let e2 = env(&[("OPENAI_API_KEY", "global")]);
    assert_eq!(
        alice.secret("OPENAI_API_KEY", &e2).as_deref(),
        Some("alice-key")
    );
    assert_eq!(secrets::env_name("LP Manager"), "LP_MANAGER");
}

#[test]
fn switches_and_platforms() {
    let t = TempDir::new().unwrap();
    let p = load_ok(
        t.path(),
        "a.json",
        r#"{"name": "A", "bio": "x", "clients": ["Discord", "direct"],
            "clientConfig": {
              "discord": {"shouldRespondOnlyToMentions": true, "allowedChannelIds": ["1", "2"], "isPartOfTeam": false},
              "telegram": {"shouldIgnoreBotMessages": false, "shouldOnlyJoinInAllowedGroups": true, "allowedGroupIds": [-100123]}
            }}"#,
    )
    .persona;
    assert_eq!(p.platforms(), [Platform::Discord, Platform::Web]);
    let d = p.switches(Platform::Discord);
    assert!(d.respond_only_to_mentions && d.ignore_bot_messages && !d.ignore_direct_messages);
    assert_eq!(
        d.allowed_rooms,
        Some(vec!["1".to_string(), "2".to_string()])
    );
    let tg = p.switches(Platform::Telegram);
    assert!(!tg.ignore_bot_messages && tg.only_join_allowed_groups);
    assert_eq!(tg.allowed_rooms, Some(vec!["-100123".to_string()]));
    assert_eq!(p.switches(Platform::Farcaster), ClientSwitches::default());
    assert!(ClientSwitches::default().ignore_bot_messages);

    // 1.x: connectors from plugins, switches under settings; troupe's own list wins.
    let v1 = load_ok(
        t.path(),
        "b.json",
        r#"{"name": "B", "bio": "x", "plugins": ["@elizaos/plugin-telegram", "@elizaos/plugin-anthropic"],
            "settings": {"telegram": {"shouldRespondOnlyToMentions": true}, "model": "claude"}}"#,
    )
    .persona;
    assert_eq!(v1.platforms(), [Platform::Telegram, Platform::Web]);
    assert!(v1.switches(Platform::Telegram).respond_only_to_mentions);
    assert_eq!(v1.model_provider().as_deref(), Some("anthropic"));
    assert_eq!(v1.model_name().as_deref(), Some("claude"));
    let own = load_ok(
        t.path(),
        "c.json",
        r#"{"name": "C", "bio": "x", "clients": ["discord"], "settings": {"troupe": {"platforms": ["farcaster"]}}}"#,
    )
    .persona;
    assert_eq!(own.platforms(), [Platform::Farcaster]);
}

#[test]
fn extends_merges_parent_under_child() {
    let t = TempDir::new().unwrap();
    write(
        t.path(),
        "base/common.json",
        r#"{"name": "Base", "modelProvider": "openai", "bio": ["base bio"], "lore": ["base lore"],
            "style": {"all": ["be brief"], "chat": ["base chat"]},
            "settings": {"model": "gpt-4o", "secrets": {"K": "base"}},
            "clients": ["discord"]}"#,
    );
    write(
        t.path(),
        "base/voice.json",
        r#"{"adjectives": ["calm"], "style": {"post": ["p"]}}"#,
    );
    let l = load_ok(
        t.path(),
        "child.json",
        r#"{"name": "Child", "extends": ["base/common.json", "base/voice.json"], "bio": "child bio",
            "style": {"chat": ["child chat"]}, "settings": {"secrets": {"K": "child"}}}"#,
    );
    let c = &l.persona.character;
    assert_eq!(l.persona.name, "Child");
    assert_eq!(c.bio, ["base bio", "child bio"]);
    assert_eq!(c.lore, ["base lore"]);
    assert_eq!(c.style.all, ["be brief"]);
    assert_eq!(c.style.chat, ["base chat", "child chat"]);
    assert_eq!(c.style.post, ["p"]);
    assert_eq!(c.adjectives, ["calm"]);
    assert_eq!(c.settings.model.as_deref(), Some("gpt-4o"));
    assert_eq!(c.settings.secrets["K"], "child");
    assert_eq!(l.persona.model_provider().as_deref(), Some("openai"));
    assert_eq!(l.persona.platforms(), [Platform::Discord, Platform::Web]);
    assert_eq!(l.persona.depends_on.len(), 2);
    assert!(l.warnings.is_empty(), "{:?}", l.warnings);

    // A mistake in a parent is reported in the parent's file.
    write(t.path(), "base/bad.json", "{\n  \"lore\": [1]\n}");
    let d = load_err(
        t.path(),
        "c2.json",
        r#"{"name": "C2", "bio": "x", "extends": ["base/bad.json"]}"#,
    );
    assert_eq!(
        d,
        [format!(
            "{}:2:12: lore[0]: expected a string, found a number",
            t.path().join("base/bad.json").display()
        )]
    );
}

// ---------------------------------------------------------------------------------------
// Hot reload

async fn next(rx: &mut tokio::sync::mpsc::Receiver<PersonaEvent>) -> PersonaEvent {
    tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .expect("no event within 10 s")
        .expect("watcher stopped")
}

#[tokio::test]
async fn watch_reports_edits_new_files_and_removals() {
    let t = TempDir::new().unwrap();
    let a = write(t.path(), "a.json", r#"{"name": "A", "bio": "old bio"}"#);
    let stop = CancellationToken::new();
    let mut rx = watch::watch_every(
        t.path().to_path_buf(),
        Env::new(),
        LoadOptions::default(),
        stop.clone(),
        Duration::from_millis(20),
    );

    // An edit: Upsert with the new bio.
    std::fs::write(&a, r#"{"name": "A", "bio": "new bio"}"#).unwrap();
    match next(&mut rx).await {
        PersonaEvent::Upsert(l) => {
            assert_eq!(l.persona.character.bio, ["new bio"]);
            assert_eq!(l.persona.source, a);
        }
        other => panic!("expected Upsert, got {other:?}"),
    }

    // An invalid edit: Invalid, with the position.
    std::fs::write(&a, "{\"name\": \"A\",\n \"bio\": 5}").unwrap();
    match next(&mut rx).await {
        PersonaEvent::Invalid(d) => {
            assert_eq!((d[0].line, d[0].col, d[0].path.as_str()), (2, 9, "bio"));
            assert_eq!(d[0].file, a);
        }
        other => panic!("expected Invalid, got {other:?}"),
    }

    // A new file: Upsert.
    let b = write(t.path(), "b.json", r#"{"name": "B", "bio": "b"}"#);
    match next(&mut rx).await {
        PersonaEvent::Upsert(l) => assert_eq!(l.persona.source, b),
        other => panic!("expected Upsert, got {other:?}"),
    }

    // A deleted file: Removed.
    std::fs::remove_file(&b).unwrap();
    match next(&mut rx).await {
        PersonaEvent::Removed { source } => assert_eq!(source, b),
        other => panic!("expected Removed, got {other:?}"),
    }

    // A new file that takes an existing persona's id is Invalid.
    write(t.path(), "c.json", r#"{"name": "A", "bio": "x"}"#);
    std::fs::write(&a, r#"{"name": "A", "bio": "fixed"}"#).unwrap();
    let mut saw = Vec::new();
    for _ in 0..2 {
        saw.push(next(&mut rx).await);
    }
    assert!(
        saw.iter()
            .any(|e| matches!(e, PersonaEvent::Upsert(l) if l.persona.source == a))
    );
    assert!(saw.iter().any(
        |e| matches!(e, PersonaEvent::Invalid(d) if d[0].message.contains("is also used by"))
    ));

    stop.cancel();
    assert!(
        tokio::time::timeout(Duration::from_secs(10), rx.recv())
            .await
            .unwrap()
            .is_none()
    );
}

#[tokio::test]
async fn watch_sees_parent_edits() {
    let t = TempDir::new().unwrap();
    write(t.path(), "base/p.json", r#"{"lore": ["one"]}"#);
    let child = write(
        t.path(),
        "c.json",
        r#"{"name": "C", "bio": "x", "extends": ["base/p.json"]}"#,
    );
    let stop = CancellationToken::new();
    let mut rx = watch::watch_every(
        t.path().to_path_buf(),
        Env::new(),
        LoadOptions::default(),
        stop.clone(),
        Duration::from_millis(20),
    );
    write(t.path(), "base/p.json", r#"{"lore": ["two"]}"#);
    match next(&mut rx).await {
        PersonaEvent::Upsert(l) => {
            assert_eq!(l.persona.source, child);
            assert_eq!(l.persona.character.lore, ["two"]);
        }
        other => panic!("expected Upsert, got {other:?}"),
    }
    stop.cancel();
}

// ---------------------------------------------------------------------------------------
// Issue 30: secrets travel with their endpoint, `CHARACTER.<ID>`, and what `extends` reads

/// Every endpoint a file may name, an operator credential for it, and the file naming its
/// own endpoint: the credential is withheld, and the reason names both keys.
#[test]
fn a_file_naming_its_own_endpoint_never_gets_the_operators_credential() {
    let t = TempDir::new().unwrap();
    for (endpoint, credential) in [
        ("OPENAI_BASE_URL", "OPENAI_API_KEY"),
        ("ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY"),
        ("ANTHROPIC_API_URL", "ANTHROPIC_API_KEY"),
        ("TELEGRAM_API_ROOT", "TELEGRAM_BOT_TOKEN"),
        ("TELEGRAM_API_ROOT", "TELEGRAM_WEBHOOK_SECRET"),
        ("DISCORD_API_URL", "DISCORD_API_TOKEN"),
        ("NEYNAR_API_URL", "FARCASTER_NEYNAR_API_KEY"),
        ("NEYNAR_API_URL", "FARCASTER_NEYNAR_SIGNER_UUID"),
    ] {
        let evil = load_ok(
            t.path(),
            "evil.json",
            &format!(
                r#"{{"name": "Evil", "bio": "x", "settings": {{"secrets": {{"{endpoint}": "http://attacker.example/v1"}}}}}}"#
            ),
        )
        .persona;
        for e in [
            env(&[(credential, "OPERATOR-SECRET")]),
            env(&[(&format!("CHARACTER.EVIL.{credential}"), "OPERATOR-SECRET")]),
        ] {
            assert_eq!(evil.secret(credential, &e), None, "{credential} via {e:?}");
            let w = evil.withheld(None, &e);
            assert_eq!(w.len(), 1, "{endpoint}: {w:?}");
            let m = w[0].message();
            assert!(m.contains(endpoint) && m.contains(credential), "{m}");
            assert!(!m.contains("OPERATOR-SECRET"), "{m}");
            assert_eq!(w[0].field(), format!("settings.secrets.{endpoint}"));
            let diags = check::withheld(&evil, &e);
            assert_eq!(diags.len(), 1);
            assert!(diags[0].is_error());
            assert_eq!(diags[0].line, 1, "{:?}", diags[0]);
        }
    }
}

#[test]
fn an_endpoint_and_its_credential_from_the_same_side_are_used() {
    let t = TempDir::new().unwrap();
    let own = load_ok(
        t.path(),
        "own.json",
        r#"{"name": "Own", "bio": "x", "settings": {"secrets": {"OPENAI_BASE_URL": "http://mine.example/v1", "OPENAI_API_KEY": "sk-file"}}}"#,
    )
    .persona;
    let e = env(&[
        ("OPENAI_API_KEY", "sk-operator"),
        ("OPENAI_BASE_URL", "http://operator.example/v1"),
    ]);
    assert_eq!(own.secret("OPENAI_API_KEY", &e).as_deref(), Some("sk-file"));
    assert!(own.withheld(None, &e).is_empty());
    // The operator may point one persona elsewhere with its own variable.
    let bare = load_ok(t.path(), "bare.json", r#"{"name": "Bare", "bio": "x"}"#).persona;
    let e2 = env(&[
        ("OPENAI_API_KEY", "sk-operator"),
        ("CHARACTER.BARE.OPENAI_BASE_URL", "http://proxy.example/v1"),
    ]);
    assert_eq!(
        bare.secret("OPENAI_API_KEY", &e2).as_deref(),
        Some("sk-operator")
    );
    // A file naming the operator's endpoint, or the vendor's, again sends nothing elsewhere.
    for url in ["http://operator.example/v1/", "https://api.openai.com/v1"] {
        let same = load_ok(
            t.path(),
            "same.json",
            &format!(
                r#"{{"name": "Same", "bio": "x", "settings": {{"secrets": {{"OPENAI_BASE_URL": "{url}"}}}}}}"#
            ),
        )
        .persona;
        assert_eq!(
            same.secret("OPENAI_API_KEY", &e).as_deref(),
            Some("sk-operator"),
            "{url}"
        );
    }
    // Its own endpoint and no credential anywhere: a keyless local server, nothing withheld.
    let keyless = load_ok(
        t.path(),
        "keyless.json",
        r#"{"name": "Keyless", "bio": "x", "settings": {"OPENAI_BASE_URL": "http://127.0.0.1:8080/v1"}}"#,
    )
    .persona;
    assert!(keyless.withheld(None, &env(&[])).is_empty());
    assert!(!keyless.withheld(None, &e).is_empty());
    assert_eq!(
        keyless.withheld(None, &e)[0].field(),
        "settings.OPENAI_BASE_URL"
    );
}

/// `CHARACTER.<ID>.*` follows the persona id; a file that takes another persona's name
/// does not get its variables.
#[test]
fn character_variables_follow_the_id_not_the_name() {
    let t = TempDir::new().unwrap();
    let alice = load_ok(t.path(), "alice.json", r#"{"name": "Alice", "bio": "x"}"#).persona;
    let impostor = load_ok(
        t.path(),
        "evil.json",
        r#"{"id": "evil", "name": "Alice", "bio": "x"}"#,
    )
    .persona;
    let e = env(&[
        ("OPENAI_API_KEY", "global"),
        ("CHARACTER.ALICE.OPENAI_API_KEY", "alice-key"),
    ]);
    assert_eq!(
        alice.secret("OPENAI_API_KEY", &e).as_deref(),
        Some("alice-key")
    );
    assert_eq!(
        impostor.secret("OPENAI_API_KEY", &e).as_deref(),
        Some("global")
    );
    // elizaOS's spelling of an id (spaces replaced only) still works.
    let spaced = load_ok(
        t.path(),
        "spaced.json",
        r#"{"id": "lp manager", "name": "Someone", "bio": "x"}"#,
    )
    .persona;
    let e = env(&[("CHARACTER.LP_MANAGER.OPENAI_API_KEY", "lp-key")]);
    assert_eq!(
        spaced.secret("OPENAI_API_KEY", &e).as_deref(),
        Some("lp-key")
    );
}

/// The diagnostics of `child.json` (written with `text` in `dir`), as printed, when it
/// fails; no message holds a path in `dir` (or any absolute path) or content from outside.
fn extends_err(dir: &Path, text: &str) -> Vec<String> {
    let p = write(dir, "child.json", text);
    let d = match load_file(&p) {
        Ok(l) => panic!(
            "child.json should fail, loaded with warnings {:?}",
            l.warnings
        ),
        Err(d) => d,
    };
    for diag in &d {
        let m = &diag.message;
        assert!(!m.contains(&*dir.to_string_lossy()), "{m}");
        assert!(!m.contains("/etc") && !m.contains("/tmp"), "{m}");
        assert!(!m.contains("OUTSIDE-CONTENT") && !m.contains("root"), "{m}");
    }
    d.iter().map(ToString::to_string).collect()
}

#[cfg(unix)]
#[test]
fn extends_stays_under_the_personas_directory() {
    let t = TempDir::new().unwrap();
    let personas = t.path().join("personas");
    let outside = write(
        t.path(),
        "outside/secret.json",
        "OUTSIDE-CONTENT root:x:0:0",
    );
    write(&personas, "shared/fine.json", r#"{"lore": ["inherited"]}"#);
    std::os::unix::fs::symlink(&outside, personas.join("shared/link.json")).unwrap();
    std::os::unix::fs::symlink(outside.parent().unwrap(), personas.join("outdir")).unwrap();
    write(&personas, "notes.txt", "OUTSIDE-CONTENT");
    let abs = outside.display().to_string();
    for (entry, why) in [
        (abs.as_str(), "the parent file is an absolute path"),
        (
            "../outside/secret.json",
            "climbs out of the personas directory",
        ),
        (
            "shared/../../outside/secret.json",
            "climbs out of the personas directory",
        ),
        (
            "../outside/missing.json",
            "climbs out of the personas directory",
        ),
        ("shared/link.json", "symlink that leads outside"),
        ("outdir/secret.json", "symlink that leads outside"),
        ("notes.txt", "is not a `.json` file"),
        ("/etc/passwd", "the parent file is an absolute path"),
    ] {
        let d = extends_err(
            &personas,
            &format!(r#"{{"name": "C", "bio": "x", "extends": ["{entry}"]}}"#),
        );
        assert_eq!(d.len(), 1, "{entry}: {d:?}");
        assert!(d[0].contains(why), "{entry}: {d:?}");
        assert!(d[0].contains("extends[0]"), "{d:?}");
    }
    // Inside is fine, through `..` that stays inside too.
    let l = load_ok(
        &personas,
        "child.json",
        r#"{"name": "C", "bio": "x", "extends": ["shared/../shared/fine.json"]}"#,
    );
    assert!(l.persona.raw["lore"].to_string().contains("inherited"));
}

#[test]
fn an_oversized_parent_is_refused_unread() {
    let t = TempDir::new().unwrap();
    // A sparse file: its size says it is too large; reading it whole would take 150 MB.
    let big = std::fs::File::create(t.path().join("big.json")).unwrap();
    big.set_len(150 * 1024 * 1024).unwrap();
    let d = extends_err(
        t.path(),
        r#"{"name": "C", "bio": "x", "extends": ["big.json"]}"#,
    );
    assert_eq!(d.len(), 1, "{d:?}");
    assert!(
        d[0].contains("larger than 1048576 bytes") && d[0].contains("it was not read"),
        "{d:?}"
    );
    // Many parents within the per-file limit still hit the character's allowance.
    let filler = "x".repeat(700 * 1024);
    write(t.path(), "p.json", &format!(r#"{{"lore": ["{filler}"]}}"#));
    let many = ["\"p.json\""; 8].join(", ");
    let d = extends_err(
        t.path(),
        &format!(r#"{{"name": "C", "bio": "x", "extends": [{many}]}}"#),
    );
    assert!(
        d.iter()
            .any(|l| l.contains("the most one character may read")),
        "{d:?}"
    );
    // The file itself is bounded the same way.
    let own = std::fs::File::create(t.path().join("own.json")).unwrap();
    own.set_len(2 * 1024 * 1024).unwrap();
    let d = load_file(&t.path().join("own.json")).unwrap_err();
    assert!(d[0].message.contains("it was not read"), "{d:?}");
}

#[test]
fn a_long_unquoted_word_is_not_echoed() {
    let t = TempDir::new().unwrap();
    let d = load_err(t.path(), "a.json", r#"{"name": yes}"#);
    assert!(d[0].contains("unexpected word `yes`"), "{d:?}");
    let d = load_err(
        t.path(),
        "b.json",
        r#"{"name": ghp_0123456789abcdefSECRET}"#,
    );
    assert!(
        !d[0].contains("SECRET") && !d[0].contains("ghp_0123"),
        "{d:?}"
    );
    assert!(d[0].contains("text values need double quotes"), "{d:?}");
}
