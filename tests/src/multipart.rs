//! Hand-built `multipart/form-data` bodies for the documents route
//! (`POST /api/agents/{agent}/documents`), written out byte for byte as a browser sends
//! them, so that a test controls the order of the fields and may send any bytes as a file
//! (hostile ones too). [`TestApp::upload`](crate::TestApp::upload) posts them.

/// One field of an upload.
#[derive(Debug, Clone, Copy)]
pub enum Part<'a> {
    /// The `roomId` field: the room the files are for.
    Room(&'a str),
    /// A `file` field: its file name, content type and bytes.
    File(&'a str, &'a str, &'a [u8]),
    /// Any text field: its name and value (`text` on `POST /messages`).
    Text(&'a str, &'a str),
    /// An `image` field of `POST /messages`: its file name, content type and bytes.
    Image(&'a str, &'a str, &'a [u8]),
}

/// The boundary between the fields; no test file holds it.
const BOUNDARY: &str = "troupe-e2e-4c2a9b";

/// The body of `parts`, in the order given.
pub fn body(parts: &[Part<'_>]) -> Vec<u8> {
    let mut body: Vec<u8> = Vec::new();
    for part in parts {
        match part {
            Part::Room(room) => body.extend_from_slice(
                format!(
                    "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"roomId\"\r\n\r\n{room}\r\n"
                )
                .as_bytes(),
            ),
            Part::Text(name, value) => body.extend_from_slice(
                format!(
                    "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n"
                )
                .as_bytes(),
            ),
            Part::File(name, content_type, bytes) => file(&mut body, "file", name, content_type, bytes),
            Part::Image(name, content_type, bytes) => {
                file(&mut body, "image", name, content_type, bytes)
            }
        }
    }
    body.extend_from_slice(format!("--{BOUNDARY}--\r\n").as_bytes());
    body
}

/// One file field: its head, its bytes.
fn file(body: &mut Vec<u8>, field: &str, name: &str, content_type: &str, bytes: &[u8]) {
    body.extend_from_slice(
        format!(
            "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"{field}\"; \
             filename=\"{name}\"\r\nContent-Type: {content_type}\r\n\r\n"
        )
        .as_bytes(),
    );
    body.extend_from_slice(bytes);
    body.extend_from_slice(b"\r\n");
}

/// The `Content-Type` of a body made by [`body`].
pub fn content_type() -> String {
    format!("multipart/form-data; boundary={BOUNDARY}")
}

/// `request` carrying `parts` as its multipart body.
pub fn attach(request: reqwest::RequestBuilder, parts: &[Part<'_>]) -> reqwest::RequestBuilder {
    request
        .header(
            reqwest::header::CONTENT_TYPE,
            format!("multipart/form-data; boundary={BOUNDARY}"),
        )
        .body(body(parts))
}
