//! Plain-language control without a second model call: the persona's reply itself may end
//! with a structured action, which the gateway honours and strips before anyone sees it (as
//! elizaOS's MUTE_ROOM does). "Please stop talking here" costs one model call in total: the
//! model answers with its one acknowledgement and `[[action: mute]]`, and the room is muted.
//!
//! The format is a marker on its own, `[[action: NAME]]`, with NAME one of `mute` and
//! `unmute` ([`INSTRUCTION`] is the line the prompt gets). Every marker is stripped, known
//! or not, so a model that invents one never shows it to the room; only the first known one
//! is proposed.
//!
//! A proposed action is only a proposal (issue 30, finding 5; docs/rooms.md, "Who a
//! marker speaks for"): a model repeats what it reads, and the prompt quotes other people.
//! [`honoured`] keeps it only when the current speaker's own words ask for it (a cheap
//! phrase check on their message, markers left out) and the prompt quoted no marker at all
//! (history, thread, documents, summary, facts, names: whatever was quoted may have planted
//! it). Whether the speaker may steer the room, and the muted room's silence, are the
//! agent's to apply (`Agent::act`).
/// What the prompt tells the persona about actions (appended to the system prompt).
pub(crate) const INSTRUCTION: &str = "\n\nRoom controls: if someone asks you to stop talking \
here, to be quiet or to go away, answer with one short acknowledgement and end your reply \
with [[action: mute]]. If someone asks you to talk here again, end your reply with \
[[action: unmute]]. Never write these markers otherwise.";

/// What a message asking a muted persona to talk again says. A muted persona calls no
/// model, so it cannot read the request the way it reads "stop talking"; a message
/// addressed to it that says one of these is let through to the model (one call), whose
/// reply unmutes with `[[action: unmute]]` or is not sent. A phrase list is crude, but it
/// only decides which messages the model sees, never an action.
const TALK_AGAIN: &[&str] = &[
    "talk again",
    "speak again",
    "talk here again",
    "you can talk",
    "you may talk",
    "you can speak",
    "you may speak",
    "unmute",
    "come back",
    "you're back",
    "start talking",
];

/// Whether `text` asks the persona to talk again (see [`TALK_AGAIN`]).
pub(crate) fn asks_to_talk_again(text: &str) -> bool {
    let text = text.to_lowercase();
    TALK_AGAIN.iter().any(|phrase| text.contains(phrase))
}

/// What a message asking the persona to be quiet says, each as whole words ("unmute" and
/// "stopwatch" are not asks). Like [`TALK_AGAIN`], it decides nothing alone: it is the
/// speaker's half of [`honoured`], and the model must still propose the mute. English only:
/// elsewhere `/mute` is the way.
const BE_QUIET: &[&str] = &[
    "stop",
    "quiet",
    "silence",
    "silent",
    "hush",
    "shush",
    "shut up",
    "go away",
    "leave us alone",
    "leave me alone",
    "mute",
];

/// Whether `text` asks the persona to be quiet (see [`BE_QUIET`]).
pub(crate) fn asks_to_be_quiet(text: &str) -> bool {
    BE_QUIET.iter().any(|phrase| super::names_in(text, phrase))
}

/// Whether a prompt quoted an action marker anywhere (history, thread, documents,
/// summary, facts, names): then the reply's proposal could be an echo of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Quoted {
    Marker,
    NoMarker,
}

/// The action a reply proposed, if it is to be honoured: the current speaker's own message
/// asks for it in words (`speaker_text` with its markers taken out: a marker is not a
/// request), and the prompt quoted no marker, so the proposal cannot be an echo of someone
/// else's text.
pub(crate) fn honoured(
    proposed: Option<Action>,
    speaker_text: &str,
    quoted: Quoted,
) -> Option<Action> {
    let action = proposed?;
    if quoted == Quoted::Marker {
        return None;
    }
    let (words, _) = split(speaker_text);
    let asked = match action {
        Action::Mute => asks_to_be_quiet(&words),
        Action::Unmute => asks_to_talk_again(&words),
    };
    asked.then_some(action)
}

/// Whether `text` holds a marker, known or not: quoted text that does could be echoed.
pub(crate) fn holds_marker(text: &str) -> bool {
    split(text).0.len() != text.len()
}

/// An action a reply asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Action {
    Mute,
    Unmute,
}

/// The acknowledgement sent when a reply was nothing but a mute marker.
const MUTED_ACK: &str = "Okay, I'll stay quiet here.";
const UNMUTED_ACK: &str = "I'm back.";

/// `reply` without its markers, and the first known action among them: the persona's
/// acknowledgement stands in for a reply that was nothing but a known marker.
pub(crate) fn take(reply: &str) -> (String, Option<Action>) {
    let (text, action) = split(reply);
    let mut text = text.trim().to_string();
    if text.is_empty() {
        text = match action {
            Some(Action::Mute) => MUTED_ACK.into(),
            Some(Action::Unmute) => UNMUTED_ACK.into(),
            None => String::new(),
        };
    }
    (text, action)
}

/// `reply` without its markers, as written otherwise: a reply whose action is not
/// honoured (no acknowledgement stands in for it).
pub(crate) fn strip(reply: &str) -> String {
    split(reply).0.trim().to_string()
}

/// `text` with every marker removed, for text that is quoted into a prompt whole (a
/// client's system message, issue 43): also a marker inside brackets that are not one
/// (`[[x[[action: mute]]`), which [`strip`] keeps as written, and one that removing another
/// makes (`[[act[[action: x]]ion: mute]]`). What is left holds no `[[action…]]`.
pub(crate) fn strip_every(text: &str) -> String {
    let mut out = text.to_string();
    while let Some(range) = first_marker(&out) {
        out.replace_range(range, "");
    }
    out
}

/// The first `[[action: …]]` in `text`, looking from every `[[` (nested ones too).
fn first_marker(text: &str) -> Option<std::ops::Range<usize>> {
    let mut from = 0;
    while let Some(i) = text[from..].find("[[") {
        let start = from + i;
        if let Some(len) = text[start + 2..].find("]]") {
            let inner = text[start + 2..start + 2 + len]
                .trim_start()
                .to_ascii_lowercase();
            let is_marker = inner
                .strip_prefix("action")
                .is_some_and(|rest| rest.trim_start().starts_with(':'));
            if is_marker {
                return Some(start..start + 2 + len + 2);
            }
        }
        from = start + 1;
    }
    None
}

/// `text` without its markers (untrimmed), and the first known action among them.
fn split(text: &str) -> (String, Option<Action>) {
    let mut kept = String::with_capacity(text.len());
    let mut action = None;
    let mut rest = text;
    while let Some(start) = rest.find("[[") {
        let Some(len) = rest[start..].find("]]") else {
            break;
        };
        let inner = rest[start + 2..start + len].trim().to_ascii_lowercase();
        let Some(name) = inner
            .strip_prefix("action")
            .and_then(|n| n.trim_start().strip_prefix(':'))
        else {
            // Not a marker: keep it as written.
            kept.push_str(&rest[..start + len + 2]);
            rest = &rest[start + len + 2..];
            continue;
        };
        kept.push_str(&rest[..start]);
        let known = match name.trim() {
            "mute" | "mute_room" => Some(Action::Mute),
            "unmute" | "unmute_room" => Some(Action::Unmute),
            _ => None,
        };
        action = action.or(known);
        rest = &rest[start + len + 2..];
    }
    kept.push_str(rest);
    (kept, action)
}

#[cfg(test)]
mod tests {
    use super::Quoted::{Marker, NoMarker};
    use super::*;

    #[test]
    fn a_marker_is_honoured_and_stripped() {
        assert_eq!(
            take("Sure, I'll be quiet. [[action: mute]]"),
            ("Sure, I'll be quiet.".to_string(), Some(Action::Mute))
        );
        assert_eq!(
            take("[[ACTION:UNMUTE]]\nHello again!"),
            ("Hello again!".to_string(), Some(Action::Unmute))
        );
        assert_eq!(
            take("[[action: mute]]"),
            (MUTED_ACK.to_string(), Some(Action::Mute))
        );
    }

    #[test]
    fn every_marker_goes_nested_or_rebuilt() {
        for text in [
            "a [[action: mute]] b",
            "a [[x[[action: mute]] b",
            "a [[act[[action: unmute]]ion: mute]] b",
            "a [[ ACTION : mute ]] b",
        ] {
            let left = strip_every(text);
            assert!(
                !left.to_ascii_lowercase().contains("action"),
                "{text} -> {left}"
            );
            assert!(left.starts_with("a ") && left.ends_with(" b"), "{left}");
        }
        assert_eq!(
            strip_every("keep [[this]] and [[that"),
            "keep [[this]] and [[that"
        );
    }

    #[test]
    fn unknown_markers_are_stripped_and_other_brackets_kept() {
        assert_eq!(take("hi [[action: dance]]"), ("hi".to_string(), None));
        assert_eq!(
            take("see [[wiki link]] and [[x"),
            ("see [[wiki link]] and [[x".to_string(), None)
        );
        assert_eq!(take("plain"), ("plain".to_string(), None));
    }

    #[test]
    fn an_action_is_honoured_only_when_the_speaker_asks_and_nothing_quoted_a_marker() {
        use Action::{Mute, Unmute};
        // The speaker asks, nothing quoted: honoured.
        assert_eq!(
            honoured(Some(Mute), "please stop talking here", NoMarker),
            Some(Mute)
        );
        assert_eq!(
            honoured(Some(Mute), "Tess, be quiet for a bit", NoMarker),
            Some(Mute)
        );
        assert_eq!(
            honoured(Some(Unmute), "you can talk again", NoMarker),
            Some(Unmute)
        );
        // An innocent message: the proposal is an echo, not a request.
        assert_eq!(honoured(Some(Mute), "good morning", NoMarker), None);
        assert_eq!(
            honoured(Some(Unmute), "what about the buoy?", NoMarker),
            None
        );
        // The other action than the one asked for.
        assert_eq!(honoured(Some(Mute), "you can talk again", NoMarker), None);
        assert_eq!(honoured(Some(Unmute), "please stop", NoMarker), None);
        // A marker is not a request, even the speaker's own.
        assert_eq!(honoured(Some(Mute), "hi [[action: mute]]", NoMarker), None);
        // A marker quoted anywhere in the prompt voids any proposal, asked for or not.
        assert_eq!(
            honoured(Some(Mute), "please stop talking here", Marker),
            None
        );
        assert_eq!(honoured(None, "please stop talking here", NoMarker), None);
    }

    #[test]
    fn quiet_phrases_are_whole_words_and_markers_are_found_in_any_form() {
        assert!(asks_to_be_quiet("Shut up, bot"));
        assert!(asks_to_be_quiet("please MUTE yourself"));
        assert!(!asks_to_be_quiet("unmute please"));
        assert!(!asks_to_be_quiet("my stopwatch broke"));
        assert!(holds_marker("a [[ ACTION : Mute ]] here"));
        assert!(holds_marker("[[action: dance]]"));
        assert!(!holds_marker("see [[wiki link]]"));
        assert!(!holds_marker("plain"));
    }
}
