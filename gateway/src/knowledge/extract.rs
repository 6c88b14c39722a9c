//! Extraction: from an uploaded file's bytes to the plain text that is chunked and indexed.
//!
//! It owns format detection (file name, declared content type, then the bytes themselves)
//! and one reader per format. Binary content is refused here, with the reason, before
//! anything is stored. It knows nothing of chunks, storage or agents.

use std::panic::AssertUnwindSafe;

/// The formats troupe reads. Anything else is refused with 415.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    Text,
    Markdown,
    Html,
    Pdf,
    Json,
    Csv,
    Code,
}

impl Format {
    /// The content type recorded with the document.
    pub(crate) fn content_type(self) -> &'static str {
        match self {
            Format::Text => "text/plain",
            Format::Markdown => "text/markdown",
            Format::Html => "text/html",
            Format::Pdf => "application/pdf",
            Format::Json => "application/json",
            Format::Csv => "text/csv",
            Format::Code => "text/x-source",
        }
    }

    /// The format whose [`Format::content_type`] is `content_type` (the worker's reply
    /// names formats so).
    pub(crate) fn from_content_type(content_type: &str) -> Option<Format> {
        [
            Format::Text,
            Format::Markdown,
            Format::Html,
            Format::Pdf,
            Format::Json,
            Format::Csv,
            Format::Code,
        ]
        .into_iter()
        .find(|f| f.content_type() == content_type)
    }
}

/// Why a file could not be read; the HTTP layer maps these to 415 and 422.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ExtractError {
    /// Not a format troupe reads (binary, an image, an archive…).
    Unsupported(String),
    /// A supported format, but broken or empty.
    Unreadable(String),
}

const SUPPORTED: &str = "troupe reads plain text, Markdown, HTML, PDF, JSON, CSV and source code";

const CODE_EXTENSIONS: &[&str] = &[
    "rs",
    "py",
    "js",
    "mjs",
    "cjs",
    "ts",
    "tsx",
    "jsx",
    "go",
    "java",
    "kt",
    "kts",
    "scala",
    "c",
    "h",
    "cc",
    "cpp",
    "cxx",
    "hpp",
    "hh",
    "cs",
    "rb",
    "php",
    "swift",
    "m",
    "mm",
    "sh",
    "bash",
    "zsh",
    "fish",
    "ps1",
    "sql",
    "toml",
    "yaml",
    "yml",
    "xml",
    "css",
    "scss",
    "sass",
    "less",
    "lua",
    "r",
    "pl",
    "pm",
    "hs",
    "ex",
    "exs",
    "erl",
    "clj",
    "cljs",
    "dart",
    "vue",
    "svelte",
    "ini",
    "cfg",
    "conf",
    "proto",
    "graphql",
    "gql",
    "tf",
    "nix",
    "zig",
    "jl",
    "sol",
    "move",
    "cairo",
    "dockerfile",
    "makefile",
    "gradle",
    "env",
    "properties",
];

const TEXT_EXTENSIONS: &[&str] = &[
    "txt", "text", "log", "rst", "org", "adoc", "asciidoc", "tex",
];

/// Magic numbers of common binary formats, for a refusal that names what was sent.
const BINARY_MAGIC: &[(&[u8], &str)] = &[
    (b"\x89PNG", "a PNG image"),
    (b"\xFF\xD8\xFF", "a JPEG image"),
    (b"GIF8", "a GIF image"),
    (b"RIFF", "a RIFF file (WebP, WAV or AVI)"),
    (
        b"PK\x03\x04",
        "a ZIP archive (Word, Excel and other Office files are ZIP archives: export them as PDF or text)",
    ),
    (b"\x1F\x8B", "a gzip archive"),
    (b"7z\xBC\xAF", "a 7-Zip archive"),
    (b"Rar!", "a RAR archive"),
    (b"\x7FELF", "an executable"),
    (b"ID3", "an MP3 file"),
    (b"OggS", "an Ogg file"),
    (b"\x00\x00\x00", "binary data"),
    (b"SQLite format 3", "an SQLite database"),
    (
        b"\xD0\xCF\x11\xE0",
        "an old Office document (.doc, .xls): export it as PDF or text",
    ),
];

fn extension(name: &str) -> Option<String> {
    let file = name.rsplit(['/', '\\']).next().unwrap_or(name);
    let lower = file.to_ascii_lowercase();
    if lower == "dockerfile" || lower == "makefile" {
        return Some(lower);
    }
    file.rsplit_once('.')
        .filter(|(stem, _)| !stem.is_empty())
        .map(|(_, ext)| ext.to_ascii_lowercase())
}

/// Whether a chat attachment is worth fetching: a text-like type or a known text extension.
pub(crate) fn likely_text(name: &str, mime: Option<&str>) -> bool {
    let mime = mime.map(|m| {
        m.split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase()
    });
    if let Some(m) = mime.as_deref()
        && (m.starts_with("text/")
            || matches!(
                m,
                "application/json" | "application/pdf" | "application/x-ndjson" | "application/xml"
            ))
    {
        return true;
    }
    extension(name).is_some_and(|ext| {
        matches!(
            ext.as_str(),
            "md" | "markdown" | "html" | "htm" | "pdf" | "json" | "jsonl" | "csv" | "tsv"
        ) || TEXT_EXTENSIONS.contains(&ext.as_str())
            || CODE_EXTENSIONS.contains(&ext.as_str())
    })
}

/// Decides the format from the name, the declared type and the bytes; refuses binary.
pub(crate) fn detect(
    name: &str,
    content_type: Option<&str>,
    bytes: &[u8],
) -> Result<Format, ExtractError> {
    if bytes.starts_with(b"%PDF-") {
        return Ok(Format::Pdf);
    }
    if let Some((_, what)) = BINARY_MAGIC.iter().find(|(m, _)| bytes.starts_with(m)) {
        return Err(ExtractError::Unsupported(format!(
            "`{name}` is {what}; {SUPPORTED}"
        )));
    }
    let head = &bytes[..bytes.len().min(8192)];
    if head.contains(&0) {
        return Err(ExtractError::Unsupported(format!(
            "`{name}` is binary data (it contains NUL bytes); {SUPPORTED}"
        )));
    }
    let by_extension = extension(name).and_then(|ext| match ext.as_str() {
        "md" | "markdown" | "mdx" | "mkd" => Some(Format::Markdown),
        "html" | "htm" | "xhtml" => Some(Format::Html),
        "pdf" => Some(Format::Pdf),
        "json" | "jsonl" | "ndjson" => Some(Format::Json),
        "csv" | "tsv" => Some(Format::Csv),
        e if TEXT_EXTENSIONS.contains(&e) => Some(Format::Text),
        e if CODE_EXTENSIONS.contains(&e) => Some(Format::Code),
        _ => None,
    });
    let mime = content_type
        .map(|c| {
            c.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase()
        })
        .filter(|c| !c.is_empty());
    let by_type = mime.as_deref().and_then(|m| match m {
        "text/markdown" | "text/x-markdown" => Some(Format::Markdown),
        "text/html" | "application/xhtml+xml" => Some(Format::Html),
        "application/pdf" => Some(Format::Pdf),
        "application/json" | "application/x-ndjson" => Some(Format::Json),
        "text/csv" | "text/tab-separated-values" => Some(Format::Csv),
        _ => None,
    });
    if by_extension.is_none()
        && by_type.is_none()
        && let Some(m) = mime.as_deref()
        && (m.starts_with("image/") || m.starts_with("audio/") || m.starts_with("video/"))
    {
        return Err(ExtractError::Unsupported(format!(
            "`{name}` is declared as {m}; {SUPPORTED}"
        )));
    }
    match by_extension.or(by_type) {
        Some(Format::Pdf) => Err(ExtractError::Unreadable(format!(
            "`{name}` is named or declared as a PDF but does not start with %PDF-"
        ))),
        Some(format) => Ok(format),
        None => sniff(name, bytes),
    }
}

/// No name or type to go by: HTML and JSON by their first characters, else UTF-8 text.
fn sniff(name: &str, bytes: &[u8]) -> Result<Format, ExtractError> {
    let text = std::str::from_utf8(bytes).map_err(|_| {
        ExtractError::Unsupported(format!("`{name}` is not UTF-8 text; {SUPPORTED}"))
    })?;
    let start = text.trim_start_matches('\u{feff}').trim_start();
    let lower: String = start
        .chars()
        .take(15)
        .collect::<String>()
        .to_ascii_lowercase();
    if lower.starts_with("<!doctype html") || lower.starts_with("<html") {
        return Ok(Format::Html);
    }
    if (start.starts_with('{') || start.starts_with('['))
        && serde_json::from_str::<serde_json::Value>(start).is_ok()
    {
        return Ok(Format::Json);
    }
    Ok(Format::Text)
}

/// The document's text. PDF parsing may panic on odd files; that becomes `Unreadable`.
pub(crate) fn extract(format: Format, name: &str, bytes: &[u8]) -> Result<String, ExtractError> {
    let text = match format {
        Format::Pdf => pdf(name, bytes)?,
        Format::Html => html(name, bytes)?,
        Format::Json => json(name, utf8(name, bytes)?)?,
        Format::Csv => csv_rows(name, bytes)?,
        Format::Text | Format::Markdown | Format::Code => utf8(name, bytes)?.to_string(),
    };
    let text = text.replace("\r\n", "\n");
    if text.trim().is_empty() {
        return Err(ExtractError::Unreadable(format!(
            "`{name}` holds no text to index"
        )));
    }
    Ok(text)
}

fn utf8<'a>(name: &str, bytes: &'a [u8]) -> Result<&'a str, ExtractError> {
    let text = std::str::from_utf8(bytes).map_err(|e| {
        ExtractError::Unsupported(format!(
            "`{name}` is not UTF-8 text (invalid byte at offset {}); {SUPPORTED}",
            e.valid_up_to()
        ))
    })?;
    Ok(text.trim_start_matches('\u{feff}'))
}

fn pdf(name: &str, bytes: &[u8]) -> Result<String, ExtractError> {
    // pdf-extract panics on some malformed or exotic PDFs rather than returning an error.
    match std::panic::catch_unwind(AssertUnwindSafe(|| {
        pdf_extract::extract_text_from_mem(bytes)
    })) {
        Ok(Ok(text)) => Ok(text),
        Ok(Err(e)) => Err(ExtractError::Unreadable(format!(
            "`{name}` could not be read as a PDF: {e}"
        ))),
        Err(_) => Err(ExtractError::Unreadable(format!(
            "`{name}` could not be read as a PDF (the parser gave up on it); export it as text"
        ))),
    }
}

fn html(name: &str, bytes: &[u8]) -> Result<String, ExtractError> {
    // Rendered as light Markdown (`# Heading`), which the Markdown splitter cuts at; wide
    // lines, since wrapping would only put newlines inside sentences.
    html2text::config::plain()
        .string_from_read(bytes, 10_000)
        .map_err(|e| ExtractError::Unreadable(format!("`{name}` could not be read as HTML: {e}")))
}

/// JSON as `path: value` lines, so a chunk keeps the keys that give its values meaning.
/// A file that is not one JSON value is read as JSON Lines.
fn json(name: &str, text: &str) -> Result<String, ExtractError> {
    let mut out = String::new();
    match serde_json::from_str::<serde_json::Value>(text) {
        Ok(value) => flatten("", &value, &mut out),
        Err(whole) => {
            for (i, line) in text.lines().enumerate() {
                if line.trim().is_empty() {
                    continue;
                }
                let value: serde_json::Value = serde_json::from_str(line).map_err(|_| {
                    ExtractError::Unreadable(format!(
                        "`{name}` is not valid JSON: {whole} (nor JSON Lines: line {} is not JSON)",
                        i + 1
                    ))
                })?;
                flatten(&format!("[{i}]"), &value, &mut out);
            }
        }
    }
    Ok(out)
}

fn flatten(path: &str, value: &serde_json::Value, out: &mut String) {
    use serde_json::Value;
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                flatten(&p, v, out);
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                flatten(&format!("{path}[{i}]"), v, out);
            }
        }
        Value::Null => {}
        Value::String(s) => push_line(out, path, s),
        other => push_line(out, path, &other.to_string()),
    }
}

fn push_line(out: &mut String, path: &str, value: &str) {
    if path.is_empty() {
        out.push_str(value);
    } else {
        out.push_str(path);
        out.push_str(": ");
        out.push_str(value);
    }
    out.push('\n');
}

/// CSV (or TSV) as one line per row, each value named by its column header.
fn csv_rows(name: &str, bytes: &[u8]) -> Result<String, ExtractError> {
    let text = utf8(name, bytes)?;
    let first = text.lines().next().unwrap_or("");
    let delimiter = if first.matches('\t').count() > first.matches(',').count() {
        b'\t'
    } else {
        b','
    };
    let mut reader = csv::ReaderBuilder::new()
        .delimiter(delimiter)
        .flexible(true)
        .from_reader(text.as_bytes());
    let headers: Vec<String> = reader
        .headers()
        .map_err(|e| ExtractError::Unreadable(format!("`{name}` is not valid CSV: {e}")))?
        .iter()
        .map(str::to_string)
        .collect();
    let mut out = String::new();
    for record in reader.records() {
        let record = record
            .map_err(|e| ExtractError::Unreadable(format!("`{name}` is not valid CSV: {e}")))?;
        let fields: Vec<String> = record
            .iter()
            .enumerate()
            .filter(|(_, v)| !v.trim().is_empty())
            .map(|(i, v)| match headers.get(i).filter(|h| !h.is_empty()) {
                Some(h) => format!("{h}: {v}"),
                None => v.to_string(),
            })
            .collect();
        if !fields.is_empty() {
            out.push_str(&fields.join("; "));
            out.push('\n');
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(name: &str, ct: Option<&str>, bytes: &[u8]) -> Result<String, ExtractError> {
        let format = detect(name, ct, bytes)?;
        extract(format, name, bytes)
    }

    #[test]
    fn formats_are_detected_by_name_type_and_content() {
        assert_eq!(detect("a.md", None, b"# T").unwrap(), Format::Markdown);
        assert_eq!(detect("a.HTML", None, b"<p>x").unwrap(), Format::Html);
        assert_eq!(detect("x", Some("text/csv"), b"a,b").unwrap(), Format::Csv);
        assert_eq!(
            detect("main.rs", None, b"fn main() {}").unwrap(),
            Format::Code
        );
        assert_eq!(detect("Dockerfile", None, b"FROM x").unwrap(), Format::Code);
        assert_eq!(detect("upload", None, b"%PDF-1.7").unwrap(), Format::Pdf);
        assert_eq!(
            detect("upload", None, b"<!DOCTYPE html><p>x").unwrap(),
            Format::Html
        );
        assert_eq!(
            detect("upload", None, b" {\"a\": 1}").unwrap(),
            Format::Json
        );
        assert_eq!(detect("notes", None, b"plain words").unwrap(), Format::Text);
    }

    #[test]
    fn binary_is_refused_with_what_it_is() {
        let png = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR";
        match detect("cat.png", Some("image/png"), png) {
            Err(ExtractError::Unsupported(why)) => {
                assert!(
                    why.contains("cat.png") && why.contains("PNG image"),
                    "{why}"
                )
            }
            other => panic!("{other:?}"),
        }
        match detect("blob.bin", None, b"abc\0def") {
            Err(ExtractError::Unsupported(why)) => assert!(why.contains("binary"), "{why}"),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            detect("x", None, &[0xff, 0xfe, 0x41, 0x42, 0x43]),
            Err(ExtractError::Unsupported(_))
        ));
        assert!(matches!(
            detect("report.docx", None, b"PK\x03\x04rest"),
            Err(ExtractError::Unsupported(_))
        ));
        assert!(matches!(
            detect("fake.pdf", None, b"not a pdf"),
            Err(ExtractError::Unreadable(_))
        ));
    }

    #[test]
    fn html_becomes_text_without_markup_or_scripts() {
        let text = read(
            "page.html",
            None,
            b"<html><head><style>p{color:red}</style><script>var secret=1;</script></head>\
              <body><h1>Hours</h1><p>The office opens at <b>nine</b>.</p></body></html>",
        )
        .unwrap();
        // Headings stay Markdown headings, so the Markdown splitter cuts at them.
        assert!(
            text.contains("# Hours") && text.contains("The office opens at"),
            "{text}"
        );
        assert!(!text.contains('<') && !text.contains("secret"), "{text}");
    }

    #[test]
    fn json_keeps_its_keys() {
        let text = read(
            "a.json",
            None,
            br#"{"shop": {"hours": "9-5", "days": ["mon", "tue"]}}"#,
        )
        .unwrap();
        assert_eq!(
            text,
            "shop.hours: 9-5\nshop.days[0]: mon\nshop.days[1]: tue\n"
        );
        let lines = read("a.jsonl", None, b"{\"a\": 1}\n{\"a\": 2}\n").unwrap();
        assert_eq!(lines, "[0].a: 1\n[1].a: 2\n");
        assert!(matches!(
            read("bad.json", None, b"{\"a\": "),
            Err(ExtractError::Unreadable(_))
        ));
    }

    #[test]
    fn csv_rows_name_their_columns() {
        let text = read("p.csv", None, b"name,price\n\"Lamp, brass\",12\nRope,\n").unwrap();
        assert_eq!(text, "name: Lamp, brass; price: 12\nname: Rope\n");
        let tsv = read("p.tsv", None, b"a\tb\n1\t2\n").unwrap();
        assert_eq!(tsv, "a: 1; b: 2\n");
    }

    /// A one-page PDF showing `text` in Helvetica, with a correct cross-reference table.
    fn tiny_pdf(text: &str) -> Vec<u8> {
        let stream = format!("BT /F1 12 Tf 72 720 Td ({text}) Tj ET");
        let objects = [
            "<< /Type /Catalog /Pages 2 0 R >>".to_string(),
            "<< /Type /Pages /Kids [3 0 R] /Count 1 >>".to_string(),
            "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] \
             /Resources << /Font << /F1 5 0 R >> >> /Contents 4 0 R >>"
                .to_string(),
            format!(
                "<< /Length {} >>\nstream\n{stream}\nendstream",
                stream.len()
            ),
            "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>".to_string(),
        ];
        let mut pdf = b"%PDF-1.4\n".to_vec();
        let mut offsets = Vec::new();
        for (i, body) in objects.iter().enumerate() {
            offsets.push(pdf.len());
            pdf.extend_from_slice(format!("{} 0 obj\n{body}\nendobj\n", i + 1).as_bytes());
        }
        let xref = pdf.len();
        pdf.extend_from_slice(
            format!("xref\n0 {}\n0000000000 65535 f \n", objects.len() + 1).as_bytes(),
        );
        for o in offsets {
            pdf.extend_from_slice(format!("{o:010} 00000 n \n").as_bytes());
        }
        pdf.extend_from_slice(
            format!(
                "trailer\n<< /Size {} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n",
                objects.len() + 1
            )
            .as_bytes(),
        );
        pdf
    }

    #[test]
    fn a_pdf_gives_its_text() {
        let pdf = tiny_pdf("The ferry leaves at noon");
        let text = read("timetable.pdf", Some("application/pdf"), &pdf).unwrap();
        assert!(text.contains("ferry leaves at noon"), "{text:?}");
    }

    #[test]
    fn a_broken_pdf_is_an_error_not_a_panic() {
        let err = read("broken.pdf", None, b"%PDF-1.4\n1 0 obj garbage").unwrap_err();
        assert!(matches!(err, ExtractError::Unreadable(_)), "{err:?}");
    }

    #[test]
    fn empty_text_is_unreadable() {
        assert!(matches!(
            read("e.txt", None, b"  \n "),
            Err(ExtractError::Unreadable(_))
        ));
        // A byte-order mark and CRLF line ends are not part of the text.
        assert_eq!(
            read("w.txt", None, "\u{feff}a\r\nb".as_bytes()).unwrap(),
            "a\nb"
        );
    }
}
