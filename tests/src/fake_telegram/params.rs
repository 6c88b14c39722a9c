//! How a Bot API call's parameters arrive at the fake Telegram: a JSON body, a form
//! (`application/x-www-form-urlencoded`), a multipart body (files), or the query string;
//! all read into one map, a form value parsed as JSON where it is JSON, as the Bot API does.

use axum::body::Bytes;
use axum::extract::{FromRequest, Multipart, Request};
use axum::http::header;
use serde_json::{Map, Value, json};

/// A form or multipart value: JSON when it holds an object or array, else the string.
pub(super) fn form_value(text: String) -> Value {
    let trimmed = text.trim_start();
    if (trimmed.starts_with('{') || trimmed.starts_with('['))
        && let Ok(v) = serde_json::from_str::<Value>(&text)
    {
        return v;
    }
    Value::String(text)
}

/// The request's parameters: the query string, then the body (JSON, form or multipart).
pub(super) async fn read_params(request: Request) -> Result<Map<String, Value>, String> {
    let mut params = Map::new();
    if let Some(query) = request.uri().query() {
        for (k, v) in url::form_urlencoded::parse(query.as_bytes()) {
            params.insert(k.into_owned(), form_value(v.into_owned()));
        }
    }
    let content_type = request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_ascii_lowercase();
    if content_type.starts_with("multipart/form-data") {
        let mut multipart = Multipart::from_request(request, &())
            .await
            .map_err(|e| format!("bad multipart body: {e}"))?;
        while let Some(field) = multipart
            .next_field()
            .await
            .map_err(|e| format!("bad multipart field: {e}"))?
        {
            let Some(name) = field.name().map(str::to_string) else {
                continue;
            };
            if field.file_name().is_some() {
                let bytes = field.bytes().await.map_err(|e| e.to_string())?;
                // The bytes too, for a test to compare (a voice note is small).
                let content =
                    base64::Engine::encode(&base64::engine::general_purpose::STANDARD, &bytes);
                params.insert(
                    name,
                    json!({"uploaded_bytes": bytes.len(), "base64": content}),
                );
            } else {
                let text = field.text().await.map_err(|e| e.to_string())?;
                params.insert(name, form_value(text));
            }
        }
        return Ok(params);
    }
    let body = Bytes::from_request(request, &())
        .await
        .map_err(|e| format!("cannot read the body: {e}"))?;
    if body.is_empty() {
        return Ok(params);
    }
    if content_type.starts_with("application/x-www-form-urlencoded") {
        // `+` is a space and `%XX` a byte. Bytes that are not UTF-8 become U+FFFD (the
        // url crate's choice) instead of failing the request; no client sends them.
        for (k, v) in url::form_urlencoded::parse(&body) {
            params.insert(k.into_owned(), form_value(v.into_owned()));
        }
        return Ok(params);
    }
    match serde_json::from_slice::<Value>(&body) {
        Ok(Value::Object(map)) => {
            params.extend(map);
            Ok(params)
        }
        Ok(_) => Err("the JSON body is not an object".into()),
        Err(e) => Err(format!("the body is not JSON: {e}")),
    }
}
