//! Plain-language control without a second model call: the persona's reply itself may end
//! with a structured action, which the gateway honours and strips before anyone sees it (as
//! elizaOS's MUTE_ROOM does). "Please stop talking here" costs one model call in total: the
//! model answers with its one acknowledgement and `[[action: mute]]`, and the room is muted.
//!
//! The format is a marker on its own, `[[action: NAME]]`, with NAME one of `mute` and
//! `unmute` ([`INSTRUCTION`] is the line the prompt gets). Every marker is stripped, known
//! or not, so a model that invents one never shows it to the room; only the first known one
//! is honoured.

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

/// An action a reply asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Action {
    Mute,
    Unmute,
}

/// The acknowledgement sent when a reply was nothing but a mute marker.
const MUTED_ACK: &str = "Okay, I'll stay quiet here.";
const UNMUTED_ACK: &str = "I'm back.";

/// `reply` without its markers, and the first known action among them.
pub(crate) fn take(reply: &str) -> (String, Option<Action>) {
    let mut text = String::with_capacity(reply.len());
    let mut action = None;
    let mut rest = reply;
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
            text.push_str(&rest[..start + len + 2]);
            rest = &rest[start + len + 2..];
            continue;
        };
        text.push_str(&rest[..start]);
        let known = match name.trim() {
            "mute" | "mute_room" => Some(Action::Mute),
            "unmute" | "unmute_room" => Some(Action::Unmute),
            _ => None,
        };
        action = action.or(known);
        rest = &rest[start + len + 2..];
    }
    text.push_str(rest);
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

#[cfg(test)]
mod tests {
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
    fn unknown_markers_are_stripped_and_other_brackets_kept() {
        assert_eq!(take("hi [[action: dance]]"), ("hi".to_string(), None));
        assert_eq!(
            take("see [[wiki link]] and [[x"),
            ("see [[wiki link]] and [[x".to_string(), None)
        );
        assert_eq!(take("plain"), ("plain".to_string(), None));
    }
}
