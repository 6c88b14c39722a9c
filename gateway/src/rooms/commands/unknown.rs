//! A command troupe does not know, or a known one with arguments it does not take: a short
//! answer that points to `/help`, never a model call.

use super::Answer;

pub(super) fn unknown(word: &str) -> Answer {
    Answer::text(format!("I don't know /{word}. /help lists what I can do."))
}

pub(super) fn invalid(problem: &str) -> Answer {
    Answer::text(format!("{problem}. /help lists what I can do."))
}
