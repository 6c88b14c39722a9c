//! Prepared prompts: everything [`super::compose`] needs that depends only on the persona
//! (and the platform), worked out once when the character file is loaded and kept with the
//! [`super::Persona`], so that a message only pays for what changes with it.
//!
//! What it owns: the system message; each platform's handler template, split into lines and
//! parsed into text and resolved placeholders ([`Slot`]); the bio and lore with the
//! character's own name filled in; the message examples parsed into text and speaker
//! placeholders; the names example speakers may get; the style directions under their
//! headers; the section titles.
//!
//! What it must not own: anything sampled. elizaOS samples bio, lore, examples, topics and
//! the adjective for each prompt; `prompt::Sampled` still does, drawing from the same
//! random sequence in the same order, so a seed gives the same prompt byte for byte (the
//! test `prompts_are_the_reference_prompts` in `persona::tests` composes every fixture
//! against the uncached composer kept in `persona::reference`).
//!
//! Why at load: a persona is rebuilt whenever its file changes (`watch`, `load`), so the
//! prepared form can never be older than the character it came from; composing scanned
//! every template line for placeholders and re-filled every list at every message (38% of
//! a message's instructions under callgrind, issue 48).

use troupe_connectors::{AgentId, Platform};

use super::character::Character;
use super::prompt::{self, EMPTY_PLACEHOLDERS, placeholders};

/// What a known `{{placeholder}}` stands for, resolved when the template is parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Slot {
    AgentName,
    AgentId,
    SenderName,
    Platform,
    System,
    Bio,
    Lore,
    Topic,
    Topics,
    Adjective,
    MessageDirections,
    PostDirections,
    Examples,
    Posts,
    Knowledge,
    Recent,
    Summary,
    Facts,
    /// An elizaOS placeholder troupe fills with nothing.
    Empty,
    /// `{{user3}}` / `{{name3}}`: the 3rd generated name.
    Speaker(usize),
}

impl Slot {
    /// The slot a placeholder name stands for; `None` for a name troupe does not know
    /// (left as written).
    fn of(name: &str) -> Option<Slot> {
        Some(match name {
            "agentName" => Slot::AgentName,
            "agentId" => Slot::AgentId,
            "senderName" => Slot::SenderName,
            "platform" => Slot::Platform,
            "system" => Slot::System,
            "bio" => Slot::Bio,
            "lore" => Slot::Lore,
            "topic" => Slot::Topic,
            "topics" => Slot::Topics,
            "adjective" => Slot::Adjective,
            "messageDirections" | "directions" => Slot::MessageDirections,
            "postDirections" => Slot::PostDirections,
            "characterMessageExamples" | "examples" => Slot::Examples,
            "characterPostExamples" => Slot::Posts,
            "knowledge" => Slot::Knowledge,
            "recentMessages" => Slot::Recent,
            "summary" => Slot::Summary,
            "facts" => Slot::Facts,
            p if EMPTY_PLACEHOLDERS.contains(&p) => Slot::Empty,
            p => Slot::Speaker(prompt::numbered_speaker(p)?),
        })
    }
}

/// A piece of a parsed text: as written, or a placeholder to fill.
#[derive(Debug, Clone)]
pub(super) enum Piece<S> {
    Text(String),
    Fill(S),
}

/// `text` cut at the placeholders `resolve` knows, the way `prompt::substitute` replaces
/// them: `{{{name}}}` whole, unknown names left in the text as written.
fn parse<S: Copy>(text: &str, resolve: impl Fn(&str) -> Option<S>) -> Vec<Piece<S>> {
    let mut out = Vec::new();
    let mut last = 0;
    for (start, name) in placeholders(text) {
        let Some(fill) = resolve(name) else { continue };
        let Some(close_rel) = text[start..].find("}}") else {
            continue;
        };
        let mut end = start + close_rel + 2;
        if text[start..].starts_with("{{{") && text[end..].starts_with('}') {
            end += 1;
        }
        if start > last {
            out.push(Piece::Text(text[last..start].to_string()));
        }
        out.push(Piece::Fill(fill));
        last = end;
    }
    if last < text.len() {
        out.push(Piece::Text(text[last..].to_string()));
    }
    out
}

/// One line of a template.
#[derive(Debug, Clone)]
struct Line {
    pieces: Vec<Piece<Slot>>,
    /// Left out when every slot came out empty: it has slots and no unknown placeholder
    /// (`prompt::render`'s rule).
    may_vanish: bool,
}

/// A handler template, parsed.
#[derive(Debug, Clone)]
pub(super) struct Template {
    lines: Vec<Line>,
    /// The slots its lines fill, so a message computes only those.
    used: Vec<Slot>,
    /// Whether the template names these anywhere (a placeholder may even span lines).
    pub(super) has_facts: bool,
    pub(super) has_summary: bool,
    pub(super) has_history: bool,
}

impl Template {
    fn new(text: &str) -> Self {
        let names = placeholders(text);
        let has = |n: &str| names.iter().any(|(_, p)| *p == n);
        let mut used = Vec::new();
        let lines = text
            .split('\n')
            .map(|line| {
                let known = parse(line, Slot::of);
                let slots = known.iter().filter_map(|p| match p {
                    Piece::Fill(s) => Some(*s),
                    Piece::Text(_) => None,
                });
                let count = slots.clone().count();
                used.extend(slots);
                Line {
                    may_vanish: count > 0 && count == placeholders(line).len(),
                    pieces: known,
                }
            })
            .collect();
        Template {
            lines,
            used,
            has_facts: has("facts"),
            has_summary: has("summary"),
            has_history: has("recentMessages"),
        }
    }

    /// Whether any line fills `slot`.
    pub(super) fn uses(&self, slot: Slot) -> bool {
        self.used.contains(&slot)
    }

    /// The template filled, as `prompt::render` fills it: a line whose slots all came out
    /// empty is left out, so is a blank line after a blank line, and trailing blank lines.
    pub(super) fn render<'v>(&self, value: impl Fn(Slot) -> &'v str) -> String {
        let mut out = String::new();
        let mut starts: Vec<usize> = Vec::new();
        let mut last_blank = true;
        for line in &self.lines {
            let vanishes = line.may_vanish
                && line.pieces.iter().all(|p| match p {
                    Piece::Fill(s) => value(*s).is_empty(),
                    Piece::Text(_) => true,
                });
            if vanishes {
                continue;
            }
            let before = out.len();
            if !starts.is_empty() {
                out.push('\n');
            }
            let start = out.len();
            for piece in &line.pieces {
                match piece {
                    Piece::Text(t) => out.push_str(t),
                    Piece::Fill(s) => out.push_str(value(*s)),
                }
            }
            let blank = out[start..].trim().is_empty();
            if blank && last_blank {
                out.truncate(before);
                continue;
            }
            last_blank = blank;
            starts.push(start);
        }
        while let Some(&start) = starts.last() {
            if !out[start..].trim().is_empty() {
                break;
            }
            starts.pop();
            out.truncate(start.saturating_sub(1));
        }
        out
    }
}

/// Who a placeholder in a message example names.
#[derive(Debug, Clone, Copy)]
pub(super) enum Who {
    /// `{{agentName}}`: the persona.
    Agent,
    /// `{{user3}}` / `{{name3}}`: the 3rd name drawn for the conversation.
    Speaker(usize),
}

/// A message example's line, parsed: its speaker and text with their placeholders, then
/// the action.
#[derive(Debug, Clone)]
pub(super) struct ExampleLine {
    pub(super) speaker: Vec<Piece<Who>>,
    pub(super) text: Vec<Piece<Who>>,
    /// ` (action: X)`, or empty.
    pub(super) action: String,
}

/// Appends `pieces` to `out`: speaker `n` named `names[n - 1]` ("Someone" past the end),
/// the persona `agent`.
pub(super) fn fill_names(out: &mut String, pieces: &[Piece<Who>], names: &[&str], agent: &str) {
    for piece in pieces {
        match piece {
            Piece::Text(t) => out.push_str(t),
            Piece::Fill(Who::Agent) => out.push_str(agent),
            Piece::Fill(Who::Speaker(n)) => {
                out.push_str(names.get(n - 1).copied().unwrap_or("Someone"));
            }
        }
    }
}

/// Everything about a persona's prompt that no message changes.
#[derive(Debug, Clone)]
pub(crate) struct Prepared {
    /// `prompt::system_prompt`.
    pub(super) system: String,
    /// The character's own `system`, for `{{system}}`.
    pub(super) raw_system: String,
    pub(super) agent_id: String,
    /// The handler template of each platform, in `Platform::ALL` order.
    templates: Vec<Template>,
    /// Bio and lore entries with `{{name}}` / `{{agentName}}` filled.
    pub(super) bio: Vec<String>,
    pub(super) lore: Vec<String>,
    pub(super) examples: Vec<Vec<ExampleLine>>,
    /// The names example speakers may get: all but the persona's own.
    pub(super) names: Vec<&'static str>,
    pub(super) message_directions: String,
    pub(super) post_directions: String,
    pub(super) examples_title: String,
    pub(super) posts_title: String,
}

impl Prepared {
    pub(crate) fn new(id: &AgentId, character: &Character) -> Self {
        let c = character;
        let name = c.name.as_str();
        let own_name = |s: &String| {
            prompt::substitute(s, &|p| {
                matches!(p, "name" | "agentName").then(|| name.to_string())
            })
        };
        let speakers = |s: &str| {
            parse(s, |p| match prompt::numbered_speaker(p) {
                Some(n) => Some(Who::Speaker(n)),
                None => (p == "agentName").then_some(Who::Agent),
            })
        };
        let directions = |title: String, extra: &[String]| {
            let all: Vec<&str> = c
                .style
                .all
                .iter()
                .chain(extra)
                .map(String::as_str)
                .collect();
            prompt::header(&title, &all.join("\n"))
        };
        Prepared {
            system: prompt::system_prompt_of(name, c),
            raw_system: c.system.clone().unwrap_or_default(),
            agent_id: id.to_string(),
            templates: Platform::ALL
                .iter()
                .map(|p| Template::new(prompt::template_of(c, *p)))
                .collect(),
            bio: c.bio.iter().map(own_name).collect(),
            lore: c.lore.iter().map(own_name).collect(),
            examples: c
                .message_examples
                .iter()
                .map(|conv| {
                    conv.iter()
                        .map(|m| ExampleLine {
                            speaker: speakers(&m.speaker),
                            text: speakers(&m.text),
                            action: m
                                .action
                                .as_ref()
                                .map(|a| format!(" (action: {a})"))
                                .unwrap_or_default(),
                        })
                        .collect()
                })
                .collect(),
            names: prompt::name_pool(name),
            message_directions: directions(
                format!("# Message Directions for {name}"),
                &c.style.chat,
            ),
            post_directions: directions(format!("# Post Directions for {name}"), &c.style.post),
            examples_title: format!("# Example Conversations for {name}"),
            posts_title: format!("# Example Posts for {name}"),
        }
    }

    /// The handler template for `platform`.
    pub(super) fn template(&self, platform: Platform) -> &Template {
        let at = Platform::ALL.iter().position(|p| *p == platform);
        &self.templates[at.unwrap_or(0)]
    }
}
