//! The table's own rules and its rendering (issue 45, item 3): keys follow the names, a
//! setting that points somewhere states its policy, what a character may give troupe.toml
//! may give too; README.md's settings tables and docs/security.md's settings rows are the
//! table's rendering, rewritten with `UPDATE_DOCS=1 cargo test -p troupe --lib
//! config::table`. That the code reads exactly the settings the README lists is checked
//! from the source by `tests/tests/settings.rs`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use super::{SETTINGS, Scope, Setting};
use crate::config::Config;
use crate::persona::Env;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the gateway crate lives in the repository")
        .to_path_buf()
}

// ---------------------------------------------------------------------------------------
// The declaration's own rules

/// The troupe.toml key of a variable: lower case, without `TROUPE_`; a table keeps its name.
fn toml_key(name: &str) -> String {
    name.trim_start_matches('[')
        .trim_end_matches(']')
        .strip_prefix("TROUPE_")
        .unwrap_or(name.trim_start_matches('[').trim_end_matches(']'))
        .to_lowercase()
}

#[test]
fn keys_are_the_names_in_lower_case_without_the_prefix() {
    for s in SETTINGS {
        if let Some(key) = s.key {
            assert_eq!(key, toml_key(s.name), "{}'s troupe.toml key", s.name);
        }
    }
    let names: Vec<&str> = SETTINGS.iter().flat_map(Setting::names).collect();
    let unique: BTreeSet<&str> = names.iter().copied().collect();
    assert_eq!(names.len(), unique.len(), "a name is declared twice");
}

#[test]
fn a_setting_that_points_somewhere_states_its_policy() {
    for s in SETTINGS {
        assert!(
            !s.kind.points() || s.security.is_some(),
            "{} is a {:?}: give it `security \"…\"`, its row in docs/security.md",
            s.name,
            s.kind
        );
    }
}

/// Issue 45, item 3: what a character may give, troupe.toml may give too.
#[test]
fn every_setting_a_character_may_give_has_a_toml_key() {
    for s in SETTINGS.iter().filter(|s| s.scope == Scope::Persona) {
        assert!(
            s.key.is_some(),
            "{} may be set in a character but not in troupe.toml",
            s.name
        );
    }
}

/// The settings read by name take their troupe.toml value through the environment
/// snapshot: the file's value is there, and the environment's wins over it.
#[test]
fn a_toml_key_of_a_setting_read_by_name_reaches_the_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    for s in SETTINGS.iter().filter(|s| s.key.is_some() && !s.typed) {
        let key = s.key.unwrap();
        let path = dir.path().join(format!("{key}.toml"));
        // A URL is a valid value of every one of them (`HF_ENDPOINT` is checked).
        std::fs::write(&path, format!("{key} = \"http://file.example\"\n")).unwrap();
        let config = |from_env: bool| {
            let mut env: Env = [("TROUPE_CONFIG".to_string(), path.display().to_string())]
                .into_iter()
                .collect();
            if from_env {
                env.insert(s.name.to_string(), "http://env.example".into());
            }
            Config::from_env(env).unwrap_or_else(|e| panic!("{}: {e}", s.name))
        };
        let in_file = config(false);
        assert_eq!(
            in_file.env.get(s.name).map(String::as_str),
            Some("http://file.example")
        );
        let both = config(true);
        assert_eq!(
            both.env.get(s.name).map(String::as_str),
            Some("http://env.example")
        );
    }
    // Numbers and booleans are kept as the environment would hold them.
    let path = dir.path().join("scalars.toml");
    std::fs::write(&path, "farcaster_fid = 42\nenable_post = true\n").unwrap();
    let env: Env = [("TROUPE_CONFIG".to_string(), path.display().to_string())]
        .into_iter()
        .collect();
    let c = Config::from_env(env).unwrap();
    assert_eq!(c.env.get("FARCASTER_FID").map(String::as_str), Some("42"));
    assert_eq!(c.env.get("ENABLE_POST").map(String::as_str), Some("true"));
    std::fs::write(&path, "farcaster_fid = [1]\n").unwrap();
    let env: Env = [("TROUPE_CONFIG".to_string(), path.display().to_string())]
        .into_iter()
        .collect();
    let err = Config::from_env(env).unwrap_err().to_string();
    assert!(err.contains("farcaster_fid"), "{err}");
}

// ---------------------------------------------------------------------------------------
// The docs: the table's rendering

/// One cell of a Markdown table: its text, which must not break the row.
fn cell(text: &str, setting: &Setting) -> String {
    let unescaped = text
        .char_indices()
        .any(|(i, c)| c == '|' && !text[..i].ends_with('\\'));
    assert!(
        !unescaped,
        "{}: a `|` in a table cell must be `\\|`: {text}",
        setting.name
    );
    text.to_string()
}

/// README.md's table of the settings of one scope.
fn readme_table(scope: Scope) -> String {
    let mut out =
        String::from("| variable | troupe.toml | default | meaning |\n|---|---|---|---|\n");
    for s in SETTINGS.iter().filter(|s| s.scope == scope) {
        let names = if s.is_variable() {
            s.names()
                .map(|n| format!("`{n}`"))
                .collect::<Vec<_>>()
                .join(" / ")
        } else {
            "—".to_string()
        };
        let key = match (s.key, s.is_variable()) {
            (Some(_), false) => format!("`{}`", s.name),
            (Some(key), true) => format!("`{key}`"),
            (None, _) => "—".to_string(),
        };
        out.push_str(&format!(
            "| {names} | {key} | {} | {} |\n",
            cell(s.default, s),
            cell(&s.meaning(), s)
        ));
    }
    out
}

/// docs/security.md's rows for the settings that state a policy.
fn security_table() -> String {
    let mut out =
        String::from("| setting | who may set it | where it may point |\n|---|---|---|\n");
    for s in SETTINGS {
        let Some(policy) = s.security else { continue };
        let names: Vec<String> = s.names().map(|n| format!("`{n}`")).collect();
        let who = match s.scope {
            Scope::Gateway => "operator",
            Scope::Persona => "operator; author too",
        };
        let policy: String = policy.split_whitespace().collect::<Vec<_>>().join(" ");
        out.push_str(&format!(
            "| {} | {who} | {} |\n",
            names.join(", "),
            cell(&policy, s)
        ));
    }
    out
}

/// The text between `<!-- NAME -->` and `<!-- /NAME -->` in a document.
fn generated_region(doc: &str, file: &str, name: &str) -> (usize, usize) {
    let open = format!("<!-- {name} -->\n");
    let close = format!("<!-- /{name} -->");
    let start = doc
        .find(&open)
        .unwrap_or_else(|| panic!("{file} has no `{}` line", open.trim()))
        + open.len();
    let end = start
        + doc[start..]
            .find(&close)
            .unwrap_or_else(|| panic!("{file} has no `{close}` line"));
    (start, end)
}

/// Checks (or, with `UPDATE_DOCS=1`, rewrites) the generated regions of one document.
fn check_generated(file: &str, regions: &[(&str, String)]) {
    let path = repo().join(file);
    let mut doc = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {file}: {e}"));
    let mut wrong = Vec::new();
    for (name, wanted) in regions {
        let (start, end) = generated_region(&doc, file, name);
        if doc[start..end] != *wanted {
            wrong.push(format!(
                "{file}, `{name}`:\n{}",
                diff(&doc[start..end], wanted)
            ));
            doc.replace_range(start..end, wanted);
        }
    }
    #[allow(clippy::disallowed_methods)] // a switch of this test, not a setting of troupe's
    let update = std::env::var("UPDATE_DOCS").is_ok_and(|v| v == "1");
    if update && !wrong.is_empty() {
        std::fs::write(&path, doc).unwrap_or_else(|e| panic!("write {file}: {e}"));
        return;
    }
    assert!(
        wrong.is_empty(),
        "{}\nThe settings tables are made from gateway/src/config/table.rs: edit it, then run \
         `UPDATE_DOCS=1 cargo test -p troupe --lib config::table` to rewrite the docs.",
        wrong.join("\n")
    );
}

/// The lines one text has and the other lacks, as `-`/`+` lines.
fn diff(have: &str, want: &str) -> String {
    let have_lines: BTreeSet<&str> = have.lines().collect();
    let want_lines: BTreeSet<&str> = want.lines().collect();
    let mut out = Vec::new();
    for line in have.lines().filter(|l| !want_lines.contains(l)) {
        out.push(format!("- {line}"));
    }
    for line in want.lines().filter(|l| !have_lines.contains(l)) {
        out.push(format!("+ {line}"));
    }
    if out.is_empty() {
        out.push("  (the same lines, in another order)".into());
    }
    out.join("\n")
}

#[test]
fn the_readme_tables_are_the_table() {
    check_generated(
        "README.md",
        &[
            ("settings:gateway", readme_table(Scope::Gateway)),
            ("settings:persona", readme_table(Scope::Persona)),
        ],
    );
}

#[test]
fn the_security_rows_are_the_table() {
    check_generated(
        "docs/security.md",
        &[("settings:security", security_table())],
    );
}

#[test]
fn toml_keys_are_derived_from_names() {
    assert_eq!(toml_key("TROUPE_HTTP_ADDR"), "http_addr");
    assert_eq!(toml_key("OTEL_SERVICE_NAME"), "otel_service_name");
    assert_eq!(toml_key("[prices]"), "prices");
}

#[test]
fn an_unknown_troupe_variable_is_named() {
    let env: Env = [
        ("TROUPE_HISTROY_LIMIT", "8"),
        ("TROUPE_HISTORY_LIMIT", "8"),
        ("TROUPE_TEST_NATS_URL", "nats://x"),
        ("RUST_LOG", "info"),
        ("HOME", "/root"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let c = Config::from_env(env).unwrap();
    assert_eq!(c.unknown_variables(), ["TROUPE_HISTROY_LIMIT"]);
}
