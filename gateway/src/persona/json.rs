//! A small JSON parser that remembers where every value and key starts.
//!
//! serde_json reports a position only for syntax errors, but `troupe check` must point at the
//! exact field that is wrong (`alice.json:4:10: bio: …`), so character files are parsed here
//! into a [`Node`] tree first and converted to typed values afterwards.
//!
//! The grammar is strict RFC 8259 JSON, like `JSON.parse` in elizaOS: no comments, no trailing
//! commas, no single quotes. Those mistakes get their own messages, because they are what
//! people type by hand. Lines and columns are 1-based; columns count characters (not bytes),
//! as editors do. A UTF-8 byte order mark is skipped.

use std::path::Path;
use std::sync::Arc;

/// Deeper nesting than this is refused instead of risking the stack on hostile input.
const MAX_DEPTH: usize = 128;

/// Where a value or key starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pos {
    /// The file the node was read from (after `extends`, a tree mixes files).
    pub file: Arc<Path>,
    pub line: usize,
    pub col: usize,
}

#[derive(Debug, Clone)]
pub struct Node {
    pub pos: Pos,
    pub kind: Kind,
    /// For strings, the source text between the quotes (escapes undecoded), so a position
    /// inside the string (a template placeholder) can be mapped back to a column.
    pub src: Option<Box<str>>,
}

#[derive(Debug, Clone)]
pub enum Kind {
    Null,
    Bool(bool),
    /// The number's source text, already checked against the JSON grammar.
    Number(String),
    String(String),
    Array(Vec<Node>),
    Object(Vec<Member>),
}

#[derive(Debug, Clone)]
pub struct Member {
    pub key: String,
    pub key_pos: Pos,
    pub value: Node,
}

/// A syntax error and where it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyntaxError {
    pub line: usize,
    pub col: usize,
    pub message: String,
}

/// A duplicate key: `JSON.parse` keeps the last one, and so do we, but it is worth a warning.
#[derive(Debug, Clone)]
pub struct Duplicate {
    pub key: String,
    pub pos: Pos,
}

impl Node {
    /// What an author would call this kind of value, for "expected …, found …" messages.
    pub fn describe(&self) -> &'static str {
        match &self.kind {
            Kind::Null => "null",
            Kind::Bool(_) => "a boolean",
            Kind::Number(_) => "a number",
            Kind::String(_) => "a string",
            Kind::Array(_) => "a list",
            Kind::Object(_) => "an object",
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match &self.kind {
            Kind::String(s) => Some(s),
            _ => None,
        }
    }

    pub fn members(&self) -> Option<&[Member]> {
        match &self.kind {
            Kind::Object(m) => Some(m),
            _ => None,
        }
    }

    /// The value of `key` in an object node.
    pub fn get(&self, key: &str) -> Option<&Node> {
        self.members()?
            .iter()
            .find(|m| m.key == key)
            .map(|m| &m.value)
    }

    /// The source position of the character at `index` (counted in decoded characters) inside
    /// this string node. Strings cannot span lines in JSON, so only the column moves.
    pub fn pos_in_string(&self, index: usize) -> Pos {
        let mut pos = self.pos.clone();
        let Some(src) = &self.src else { return pos };
        let raw: Vec<char> = src.chars().collect();
        let (mut i, mut decoded) = (0, 0);
        while i < raw.len() && decoded < index {
            i += match (raw[i], raw.get(i + 1)) {
                ('\\', Some('u')) => {
                    // A surrogate pair is two \uXXXX escapes for one character.
                    let hi = raw.get(i + 2..i + 6).map(|h| h.iter().collect::<String>());
                    let hi = hi
                        .and_then(|h| u32::from_str_radix(&h, 16).ok())
                        .unwrap_or(0);
                    if (0xD800..0xDC00).contains(&hi) && raw.get(i + 6) == Some(&'\\') {
                        12
                    } else {
                        6
                    }
                }
                ('\\', _) => 2,
                _ => 1,
            };
            decoded += 1;
        }
        pos.col += 1 + i;
        pos
    }

    /// The same value as a `serde_json::Value` (kept on the persona as `raw`).
    pub fn to_value(&self) -> serde_json::Value {
        use serde_json::Value;
        match &self.kind {
            Kind::Null => Value::Null,
            Kind::Bool(b) => Value::Bool(*b),
            // The text passed the JSON number grammar, so serde_json accepts it; a value too
            // large for f64 still parses (to infinity it would not, so fall back to null).
            Kind::Number(n) => serde_json::from_str::<serde_json::Number>(n)
                .map(Value::Number)
                .unwrap_or(Value::Null),
            Kind::String(s) => Value::String(s.clone()),
            Kind::Array(items) => Value::Array(items.iter().map(Node::to_value).collect()),
            Kind::Object(members) => Value::Object(
                members
                    .iter()
                    .map(|m| (m.key.clone(), m.value.to_value()))
                    .collect(),
            ),
        }
    }
}

/// Parses `text` (the contents of `file`). Duplicate keys are resolved (last wins) and
/// returned separately so the caller can warn about them.
pub fn parse(text: &str, file: Arc<Path>) -> Result<(Node, Vec<Duplicate>), SyntaxError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut p = Parser {
        chars: text.chars().collect(),
        i: 0,
        line: 1,
        col: 1,
        file,
        dups: Vec::new(),
    };
    p.skip_ws()?;
    if p.peek().is_none() {
        return Err(p.error("the file is empty; a character file is one JSON object `{ … }`"));
    }
    let node = p.value(0)?;
    p.skip_ws()?;
    if let Some(c) = p.peek() {
        return Err(p.error(&format!(
            "unexpected {} after the end of the JSON value (is there an extra `}}` or a missing `,`?)",
            show(c)
        )));
    }
    Ok((node, p.dups))
}

struct Parser {
    chars: Vec<char>,
    i: usize,
    line: usize,
    col: usize,
    file: Arc<Path>,
    dups: Vec<Duplicate>,
}

fn show(c: char) -> String {
    match c {
        '\n' => "end of line".into(),
        c if c.is_control() => format!("control character U+{:04X}", c as u32),
        c => format!("`{c}`"),
    }
}

impl Parser {
    fn peek(&self) -> Option<char> {
        self.chars.get(self.i).copied()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.i += 1;
        if c == '\n' {
            self.line += 1;
            self.col = 1;
        } else {
            self.col += 1;
        }
        Some(c)
    }

    fn pos(&self) -> Pos {
        Pos {
            file: self.file.clone(),
            line: self.line,
            col: self.col,
        }
    }

    fn error(&self, message: &str) -> SyntaxError {
        SyntaxError {
            line: self.line,
            col: self.col,
            message: message.to_string(),
        }
    }

    fn eof(&self, what: &str) -> SyntaxError {
        self.error(&format!("unexpected end of file {what}"))
    }

    fn skip_ws(&mut self) -> Result<(), SyntaxError> {
        while let Some(c) = self.peek() {
            match c {
                ' ' | '\t' | '\n' | '\r' => {
                    self.bump();
                }
                '/' if matches!(self.chars.get(self.i + 1), Some('/') | Some('*')) => {
                    return Err(self.error("comments are not allowed in JSON; remove it"));
                }
                _ => break,
            }
        }
        Ok(())
    }

    fn value(&mut self, depth: usize) -> Result<Node, SyntaxError> {
        if depth > MAX_DEPTH {
            return Err(self.error(&format!("nested deeper than {MAX_DEPTH} levels")));
        }
        let pos = self.pos();
        let start = self.i;
        let mut src = None;
        let kind = match self.peek() {
            None => return Err(self.eof("where a value was expected")),
            Some('{') => self.object(depth)?,
            Some('[') => self.array(depth)?,
            Some('"') => {
                let s = self.string()?;
                src = Some(self.chars[start + 1..self.i - 1].iter().collect());
                Kind::String(s)
            }
            Some('\'') => {
                return Err(self.error("strings must use double quotes `\"`, not single quotes"));
            }
            Some('-' | '0'..='9') => Kind::Number(self.number()?),
            Some(c) if c.is_alphabetic() => {
                let word = self.word();
                match word.as_str() {
                    "true" => Kind::Bool(true),
                    "false" => Kind::Bool(false),
                    "null" => Kind::Null,
                    _ => {
                        // A short word is shown (`yes`, `True`, `undefined`); a long one is
                        // likely not a typo but other content, and the message may reach
                        // whoever checks a draft (issue 30, finding 3).
                        let message = if word.chars().count() <= 12 {
                            format!(
                                "unexpected word `{word}`; text values need double quotes: \"{word}\""
                            )
                        } else {
                            "unexpected unquoted text; text values need double quotes".to_string()
                        };
                        return Err(SyntaxError {
                            line: pos.line,
                            col: pos.col,
                            message,
                        });
                    }
                }
            }
            Some(c) => {
                return Err(self.error(&format!("expected a value, found {}", show(c))));
            }
        };
        Ok(Node { pos, kind, src })
    }

    fn word(&mut self) -> String {
        let mut w = String::new();
        while let Some(c) = self.peek() {
            if c.is_alphanumeric() || c == '_' {
                w.push(c);
                self.bump();
            } else {
                break;
            }
        }
        w
    }

    fn object(&mut self, depth: usize) -> Result<Kind, SyntaxError> {
        self.bump(); // '{'
        let mut members: Vec<Member> = Vec::new();
        self.skip_ws()?;
        if self.peek() == Some('}') {
            self.bump();
            return Ok(Kind::Object(members));
        }
        loop {
            self.skip_ws()?;
            let key_pos = self.pos();
            let key = self.field_name(&key_pos)?;
            self.skip_ws()?;
            let value = self.value(depth + 1)?;
            if let Some(old) = members.iter().position(|m| m.key == key) {
                let prev = members.remove(old);
                self.dups.push(Duplicate {
                    key: key.clone(),
                    pos: prev.key_pos,
                });
            }
            members.push(Member {
                key,
                key_pos,
                value,
            });
            self.skip_ws()?;
            match self.peek() {
                Some(',') => {
                    self.bump();
                }
                Some('}') => {
                    self.bump();
                    return Ok(Kind::Object(members));
                }
                Some('"') => {
                    return Err(self.error("missing `,` between fields"));
                }
                Some(c) => {
                    return Err(self.error(&format!(
                        "expected `,` or `}}` after a field, found {}",
                        show(c)
                    )));
                }
                None => return Err(self.eof("inside an object (missing `}`?)")),
            }
        }
    }

    /// A field name in double quotes and the `:` after it, at `key_pos`; the error says
    /// how the field name was miswritten (single quotes, no quotes, a trailing comma).
    fn field_name(&mut self, key_pos: &Pos) -> Result<String, SyntaxError> {
        let key = match self.peek() {
            Some('"') => self.string()?,
            Some('}') => {
                return Err(self.error(
                    "trailing comma before `}`; JSON does not allow a comma after the last field",
                ));
            }
            Some('\'') => {
                return Err(
                    self.error("field names must use double quotes `\"`, not single quotes")
                );
            }
            Some(c) if c.is_alphabetic() || c == '_' => {
                let w = self.word();
                return Err(SyntaxError {
                    line: key_pos.line,
                    col: key_pos.col,
                    message: format!("field names need double quotes: \"{w}\""),
                });
            }
            Some(c) => {
                return Err(self.error(&format!(
                    "expected a field name in double quotes, found {}",
                    show(c)
                )));
            }
            None => return Err(self.eof("inside an object (missing `}`?)")),
        };
        self.skip_ws()?;
        match self.peek() {
            Some(':') => {
                self.bump();
            }
            Some(c) => {
                return Err(self.error(&format!(
                    "expected `:` after the field name \"{key}\", found {}",
                    show(c)
                )));
            }
            None => return Err(self.eof("after a field name")),
        }
        Ok(key)
    }

    fn array(&mut self, depth: usize) -> Result<Kind, SyntaxError> {
        self.bump(); // '['
        let mut items = Vec::new();
        self.skip_ws()?;
        if self.peek() == Some(']') {
            self.bump();
            return Ok(Kind::Array(items));
        }
        loop {
            self.skip_ws()?;
            if self.peek() == Some(']') {
                return Err(self.error(
                    "trailing comma before `]`; JSON does not allow a comma after the last item",
                ));
            }
            items.push(self.value(depth + 1)?);
            self.skip_ws()?;
            match self.peek() {
                Some(',') => {
                    self.bump();
                }
                Some(']') => {
                    self.bump();
                    return Ok(Kind::Array(items));
                }
                Some(c @ ('"' | '{' | '[' | '0'..='9' | '-')) => {
                    let _ = c;
                    return Err(self.error("missing `,` between list items"));
                }
                Some(c) => {
                    return Err(self.error(&format!(
                        "expected `,` or `]` after a list item, found {}",
                        show(c)
                    )));
                }
                None => return Err(self.eof("inside a list (missing `]`?)")),
            }
        }
    }

    fn string(&mut self) -> Result<String, SyntaxError> {
        let start = self.pos();
        self.bump(); // '"'
        let mut s = String::new();
        loop {
            let Some(c) = self.peek() else {
                return Err(SyntaxError {
                    line: start.line,
                    col: start.col,
                    message: "this string is never closed (missing `\"`)".into(),
                });
            };
            match c {
                '"' => {
                    self.bump();
                    return Ok(s);
                }
                '\\' => {
                    self.bump();
                    s.push(self.escape()?);
                }
                '\n' => {
                    return Err(self.error(
                        "line break inside a string; write it as \\n, or close the string with `\"`",
                    ));
                }
                c if (c as u32) < 0x20 => {
                    return Err(self.error(&format!(
                        "{} inside a string; escape it (\\t, \\u00XX)",
                        show(c)
                    )));
                }
                c => {
                    self.bump();
                    s.push(c);
                }
            }
        }
    }

    fn escape(&mut self) -> Result<char, SyntaxError> {
        let Some(c) = self.peek() else {
            return Err(self.eof("inside a string escape"));
        };
        let out = match c {
            '"' => '"',
            '\\' => '\\',
            '/' => '/',
            'b' => '\u{8}',
            'f' => '\u{c}',
            'n' => '\n',
            'r' => '\r',
            't' => '\t',
            'u' => {
                self.bump();
                let hi = self.hex4()?;
                if (0xD800..0xDC00).contains(&hi) {
                    // A surrogate pair: the low half must follow as another \uXXXX.
                    if self.peek() == Some('\\') && self.chars.get(self.i + 1) == Some(&'u') {
                        self.bump();
                        self.bump();
                        let lo = self.hex4()?;
                        if (0xDC00..0xE000).contains(&lo) {
                            let code = 0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00);
                            return Ok(char::from_u32(code).unwrap_or('\u{fffd}'));
                        }
                    }
                    return Ok('\u{fffd}');
                }
                return Ok(char::from_u32(hi).unwrap_or('\u{fffd}'));
            }
            other => {
                return Err(self.error(&format!(
                    "invalid escape `\\{other}`; use \\\\ for a backslash"
                )));
            }
        };
        self.bump();
        Ok(out)
    }

    fn hex4(&mut self) -> Result<u32, SyntaxError> {
        let mut v = 0u32;
        for _ in 0..4 {
            let d = self
                .peek()
                .and_then(|c| c.to_digit(16))
                .ok_or_else(|| self.error("expected 4 hex digits after \\u"))?;
            self.bump();
            v = v * 16 + d;
        }
        Ok(v)
    }

    fn number(&mut self) -> Result<String, SyntaxError> {
        let mut s = String::new();
        let digits = |p: &mut Parser, s: &mut String| -> usize {
            let mut n = 0;
            while let Some(c @ '0'..='9') = p.peek() {
                s.push(c);
                p.bump();
                n += 1;
            }
            n
        };
        if self.peek() == Some('-') {
            s.push('-');
            self.bump();
        }
        match self.peek() {
            Some('0') => {
                s.push('0');
                self.bump();
                if matches!(self.peek(), Some('0'..='9')) {
                    return Err(self.error("numbers must not have leading zeros"));
                }
            }
            Some('1'..='9') => {
                digits(self, &mut s);
            }
            _ => return Err(self.error("expected a digit")),
        }
        if self.peek() == Some('.') {
            s.push('.');
            self.bump();
            if digits(self, &mut s) == 0 {
                return Err(self.error("expected a digit after the decimal point"));
            }
        }
        if let Some(e @ ('e' | 'E')) = self.peek() {
            s.push(e);
            self.bump();
            if let Some(sign @ ('+' | '-')) = self.peek() {
                s.push(sign);
                self.bump();
            }
            if digits(self, &mut s) == 0 {
                return Err(self.error("expected a digit in the exponent"));
            }
        }
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(text: &str) -> Result<Node, SyntaxError> {
        parse(text, Arc::from(Path::new("t.json"))).map(|(n, _)| n)
    }

    fn member<'a>(n: &'a Node, key: &str) -> &'a Member {
        n.members().unwrap().iter().find(|m| m.key == key).unwrap()
    }

    fn err(text: &str) -> (usize, usize, String) {
        let e = p(text).expect_err("should fail");
        (e.line, e.col, e.message)
    }

    #[test]
    fn values_and_positions() {
        let n = p("{\n  \"a\": [1, -2.5e3, true, null],\n  \"b\": \"x\\u00e9\\n\"\n}").unwrap();
        assert_eq!((n.pos.line, n.pos.col), (1, 1));
        let a = member(&n, "a");
        assert_eq!((a.key_pos.line, a.key_pos.col), (2, 3));
        assert_eq!((a.value.pos.line, a.value.pos.col), (2, 8));
        let b = n.get("b").unwrap();
        assert_eq!(b.as_str(), Some("xé\n"));
        assert_eq!((b.pos.line, b.pos.col), (3, 8));
        assert_eq!(
            n.to_value(),
            serde_json::json!({"a": [1, -2.5e3, true, null], "b": "xé\n"})
        );
    }

    #[test]
    fn columns_count_characters_not_bytes() {
        let n = p("{\"é\": \"ü\", \"k\": 1}").unwrap();
        let k = member(&n, "k");
        assert_eq!(k.key_pos.col, 12);
    }

    #[test]
    fn surrogate_pairs_and_bom() {
        let n = p("\u{feff}\"\\ud83d\\ude00\"").unwrap();
        assert_eq!(n.as_str(), Some("😀"));
    }

    #[test]
    fn positions_inside_strings() {
        let n = p("{\"t\": \"a\\n\\u00e9{{x}}\"}").unwrap();
        let t = n.get("t").unwrap();
        let at = t.as_str().unwrap().find("{{").unwrap();
        let idx = t.as_str().unwrap()[..at].chars().count();
        // {"t": "a\n\u00e9{{x}}"} : the quote is at column 7, `{{` at column 17.
        assert_eq!(t.pos_in_string(idx).col, 17);
    }

    #[test]
    fn duplicate_keys_keep_the_last() {
        let (n, d) = parse("{\"a\": 1, \"a\": 2}", Arc::from(Path::new("t"))).unwrap();
        assert_eq!(n.to_value(), serde_json::json!({"a": 2}));
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].pos.col, 2);
    }

    #[test]
    fn syntax_errors_point_at_the_problem() {
        assert_eq!(err("{\"a\": 1,\n}").0, 2);
        assert!(err("{\"a\": 1,\n}").2.contains("trailing comma"));
        assert_eq!(err("[1, 2,]").1, 7);
        assert!(err("{\"a\" 1}").2.contains("expected `:`"));
        assert_eq!(err("{\"a\": 1 \"b\": 2}").1, 9);
        assert!(err("{\"a\": 1 \"b\": 2}").2.contains("missing `,`"));
        assert!(err("{a: 1}").2.contains("double quotes"));
        assert!(err("{\"a\": 'x'}").2.contains("single quotes"));
        assert!(err("{\"a\": \"x}").2.contains("never closed"));
        assert!(err("{\"a\": 1} x").2.contains("after the end"));
        assert!(err("// hi\n{}").2.contains("comments"));
        assert!(err("{\"a\": 01}").2.contains("leading zeros"));
        assert!(err("{\"a\": \"\\x\"}").2.contains("invalid escape"));
        assert!(err("").2.contains("empty"));
        assert!(err("{\"a\": [1, 2").2.contains("end of file"));
        assert!(err("{\"a\": yes}").2.contains("unexpected word `yes`"));
        assert_eq!(err("{\"a\": yes}").1, 7);
    }

    #[test]
    fn deep_nesting_is_refused() {
        let text = "[".repeat(500);
        assert!(err(&text).2.contains("nested deeper"));
    }
}
