//! Chat commands, parsed at the edge into one closed type (docs/rooms.md).
//!
//! Every platform shares this parser: a message whose text starts with `/name` is a command,
//! `/name@bot` is one aimed at a given bot (Telegram's form in groups), and what follows the
//! name is its argument. A Discord slash command arrives structured, and the connector builds
//! the same text (`/mute 10m`) from it. Unknown names become `Command::Unknown`, bad
//! arguments `Command::Invalid`: both are answered, never passed to the model. [`COMMANDS`]
//! is the list each platform registers (Telegram's `setMyCommands`, Discord's application
//! commands), so the menu and the parser cannot disagree.

use std::time::Duration;

/// The longest mute a duration may ask for; `/mute` alone mutes until `/unmute`.
pub const MAX_MUTE: Duration = Duration::from_secs(365 * 24 * 3600);

/// The longest command name looked at; a longer `/word` is not a command.
const MAX_NAME: usize = 32;

/// One command, with its arguments parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    Help,
    /// Stop answering in the room, for `for_` or until `/unmute`.
    Mute {
        for_: Option<Duration>,
    },
    Unmute,
    Follow,
    Unfollow,
    /// This room's memory: recent window and summary.
    Forget,
    /// The sender's facts, in every room of the persona.
    ForgetMe,
    WhoAmI,
    Usage,
    /// The tools the persona may use in this room (issue 33); for the room's admins.
    Tools,
    /// `/link`, `/link CODE` or `/link yes`: link this account with the sender's account on
    /// another platform (issue 44, docs/people.md). `arg` is what follows, trimmed.
    Link {
        arg: Option<String>,
    },
    /// Undo `/link` for this account.
    Unlink,
    /// A known command with arguments it does not take; `problem` says why.
    Invalid {
        name: &'static str,
        problem: String,
    },
    /// A `/word` troupe does not know (lower-cased, at most 32 characters).
    Unknown(String),
}

/// A command as written: the command, and the bot it names (`/mute@tess_bot`), if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandLine {
    pub command: Command,
    /// The `@bot` after the name, without the `@`.
    pub to: Option<String>,
}

/// The commands, with the one-line description each platform's menu shows.
pub const COMMANDS: &[(&str, &str)] = &[
    ("help", "What I can do here"),
    (
        "mute",
        "Stop answering here (optionally for a while: 10m, 2h, 1d)",
    ),
    ("unmute", "Answer here again"),
    (
        "follow",
        "Answer every message here, not only when addressed",
    ),
    ("unfollow", "Answer only when addressed"),
    ("forget", "Forget this room's conversation"),
    ("forgetme", "Forget what I learned about you, everywhere"),
    ("whoami", "Which persona this is and which model it uses"),
    ("usage", "Tokens used today in this room and by you"),
    ("tools", "The tools I may use here (room admins)"),
    (
        "link",
        "Link your accounts on other platforms (in a direct message)",
    ),
    ("unlink", "Undo /link for this account"),
];

/// The longest `/link` argument read: a code is 8 characters.
const MAX_LINK_ARG: usize = 32;

impl Command {
    /// The command's name, as `COMMANDS` lists it (`Unknown` gives its word).
    pub fn name(&self) -> &str {
        match self {
            Command::Help => "help",
            Command::Mute { .. } => "mute",
            Command::Unmute => "unmute",
            Command::Follow => "follow",
            Command::Unfollow => "unfollow",
            Command::Forget => "forget",
            Command::ForgetMe => "forgetme",
            Command::WhoAmI => "whoami",
            Command::Usage => "usage",
            Command::Tools => "tools",
            Command::Link { .. } => "link",
            Command::Unlink => "unlink",
            Command::Invalid { name, .. } => name,
            Command::Unknown(word) => word,
        }
    }

    /// Whether the command changes how the persona behaves in the room or what it keeps
    /// of it: in a group, only people allowed to steer the room may give it.
    pub fn steers_room(&self) -> bool {
        matches!(
            self,
            Command::Mute { .. }
                | Command::Unmute
                | Command::Follow
                | Command::Unfollow
                | Command::Forget
                | Command::Tools
        )
    }
}

/// Parses `text` as a command: `None` when it is not one (it does not start with `/` and a
/// letter). Only the first line is read; surrounding space is ignored.
pub fn parse(text: &str) -> Option<CommandLine> {
    let line = text.trim_start().lines().next()?.trim();
    let rest = line.strip_prefix('/')?;
    let (word, args) = match rest.find(char::is_whitespace) {
        Some(i) => (&rest[..i], rest[i..].trim()),
        None => (rest, ""),
    };
    let (name, to) = match word.split_once('@') {
        Some((name, bot)) => (name, Some(bot)),
        None => (word, None),
    };
    if name.is_empty()
        || name.len() > MAX_NAME
        || !name.starts_with(|c: char| c.is_ascii_alphabetic())
        || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    {
        return None;
    }
    let to = match to {
        Some(bot)
            if !bot.is_empty()
                && bot.len() <= 64
                && bot.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') =>
        {
            Some(bot.to_string())
        }
        Some(_) => return None,
        None => None,
    };
    let name = name.to_ascii_lowercase();
    let no_args = |command: Command, name: &'static str| {
        if args.is_empty() {
            command
        } else {
            Command::Invalid {
                name,
                problem: format!("/{name} takes no arguments"),
            }
        }
    };
    let command = match name.as_str() {
        "help" | "start" => Command::Help,
        "mute" => match args {
            "" => Command::Mute { for_: None },
            d => match parse_duration(d) {
                Ok(for_) => Command::Mute { for_: Some(for_) },
                Err(problem) => Command::Invalid {
                    name: "mute",
                    problem,
                },
            },
        },
        "unmute" => no_args(Command::Unmute, "unmute"),
        "follow" => no_args(Command::Follow, "follow"),
        "unfollow" => no_args(Command::Unfollow, "unfollow"),
        "forget" => no_args(Command::Forget, "forget"),
        "forgetme" => no_args(Command::ForgetMe, "forgetme"),
        "whoami" => no_args(Command::WhoAmI, "whoami"),
        "usage" => no_args(Command::Usage, "usage"),
        "tools" => no_args(Command::Tools, "tools"),
        "link" => match args {
            "" => Command::Link { arg: None },
            a if a.chars().count() <= MAX_LINK_ARG && !a.contains(char::is_whitespace) => {
                Command::Link {
                    arg: Some(a.to_string()),
                }
            }
            _ => Command::Invalid {
                name: "link",
                problem: "/link takes a code, `yes`, or nothing".into(),
            },
        },
        "unlink" => no_args(Command::Unlink, "unlink"),
        _ => Command::Unknown(name),
    };
    Some(CommandLine { command, to })
}

/// A mute's length: a number with a unit, `s`, `m`, `h` or `d` (`90s`, `10m`, `2h`, `1d`),
/// or a bare number of minutes; at most [`MAX_MUTE`].
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let bad = || {
        format!(
            "`{}` is not a duration: use a number with s, m, h or d, such as 10m or 2h",
            text.chars().take(20).collect::<String>()
        )
    };
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let n: u64 = digits.parse().map_err(|_| bad())?;
    let secs = match unit.trim() {
        "s" | "sec" | "secs" => 1,
        "" | "m" | "min" | "mins" => 60,
        "h" | "hour" | "hours" => 3600,
        "d" | "day" | "days" => 86_400,
        _ => return Err(bad()),
    };
    let total = Duration::from_secs(n.saturating_mul(secs));
    if total.is_zero() {
        return Err("a mute must last at least one second".into());
    }
    if total > MAX_MUTE {
        return Err("a mute lasts at most 365 days; /mute alone mutes until /unmute".into());
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmd(text: &str) -> Option<Command> {
        parse(text).map(|l| l.command)
    }

    #[test]
    fn commands_parse_with_their_arguments() {
        assert_eq!(cmd("/help"), Some(Command::Help));
        assert_eq!(cmd("  /MUTE  "), Some(Command::Mute { for_: None }));
        assert_eq!(
            cmd("/mute 10m"),
            Some(Command::Mute {
                for_: Some(Duration::from_secs(600))
            })
        );
        assert_eq!(
            cmd("/mute 2h"),
            Some(Command::Mute {
                for_: Some(Duration::from_secs(7200))
            })
        );
        assert_eq!(cmd("/forgetme"), Some(Command::ForgetMe));
        assert_eq!(cmd("/whoami\nmore text"), Some(Command::WhoAmI));
    }

    #[test]
    fn link_takes_a_code_yes_or_nothing() {
        assert_eq!(cmd("/link"), Some(Command::Link { arg: None }));
        assert_eq!(
            cmd("/link  ab3d5fgh "),
            Some(Command::Link {
                arg: Some("ab3d5fgh".into())
            })
        );
        assert_eq!(
            cmd("/link yes"),
            Some(Command::Link {
                arg: Some("yes".into())
            })
        );
        for text in ["/link a b", &format!("/link {}", "x".repeat(40))] {
            assert!(
                matches!(cmd(text), Some(Command::Invalid { name: "link", .. })),
                "{text:?}"
            );
        }
        assert_eq!(cmd("/unlink"), Some(Command::Unlink));
    }

    #[test]
    fn a_bot_name_after_the_command_is_kept() {
        let line = parse("/mute@tess_bot 5m").unwrap();
        assert_eq!(line.to.as_deref(), Some("tess_bot"));
        assert_eq!(
            line.command,
            Command::Mute {
                for_: Some(Duration::from_secs(300))
            }
        );
        assert_eq!(parse("/mute@").map(|l| l.to), None);
    }

    #[test]
    fn not_commands() {
        for text in [
            "hello", "", "/", "/ mute", "/123", "a /mute", "/mute-x", "//x",
        ] {
            assert_eq!(cmd(text), None, "{text:?}");
        }
        assert_eq!(cmd(&format!("/{}", "a".repeat(40))), None);
    }

    #[test]
    fn unknown_and_invalid_are_answered_not_dropped() {
        assert_eq!(cmd("/dance"), Some(Command::Unknown("dance".into())));
        assert!(matches!(
            cmd("/mute forever"),
            Some(Command::Invalid { name: "mute", .. })
        ));
        assert!(matches!(
            cmd("/mute 0m"),
            Some(Command::Invalid { name: "mute", .. })
        ));
        assert!(matches!(
            cmd("/mute 99999d"),
            Some(Command::Invalid { name: "mute", .. })
        ));
        assert!(matches!(
            cmd("/follow please"),
            Some(Command::Invalid { name: "follow", .. })
        ));
        assert!(matches!(
            cmd(&format!("/mute {}", "9".repeat(40))),
            Some(Command::Invalid { name: "mute", .. })
        ));
    }

    #[test]
    fn the_menu_lists_every_command_the_parser_knows() {
        for (name, _) in COMMANDS {
            let parsed = cmd(&format!("/{name}")).unwrap();
            assert_eq!(parsed.name(), *name);
            assert!(!matches!(parsed, Command::Unknown(_)));
        }
    }
}
