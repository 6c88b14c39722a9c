//! `POST /v1/embeddings` and `GET /v1/models[/{id}]` on the fake OpenAI: vectors that are
//! deterministic in the text (a hash spread over the dimensions, normalized), as floats or
//! base64, and the one model the fake serves.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::chat::words;
use super::{
    EmbeddingRequestRecord, Shared, bad_request, check_auth, error_response, header_str,
    openai_error,
};

/// A deterministic, L2-normalized hashed bag of words: the same text always gives the same
/// vector, and texts sharing words are closer. Tests can compute expected vectors with it.
pub fn embedding_for(text: &str, dim: usize) -> Vec<f32> {
    let mut v = vec![0f32; dim.max(1)];
    for word in text
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
    {
        let h = fnv1a(word.to_lowercase().as_bytes());
        let i = (h % v.len() as u64) as usize;
        let sign = if (h >> 63) == 0 { 1.0 } else { -1.0 };
        v[i] += sign;
    }
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        for x in &mut v {
            *x /= norm;
        }
    }
    v
}

pub(super) fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

pub(super) fn base64(bytes: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        out.push(T[(n >> 18) as usize & 63] as char);
        out.push(T[(n >> 12) as usize & 63] as char);
        out.push(if chunk.len() > 1 {
            T[(n >> 6) as usize & 63] as char
        } else {
            '='
        });
        out.push(if chunk.len() > 2 {
            T[n as usize & 63] as char
        } else {
            '='
        });
    }
    out
}

pub(super) async fn embeddings(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let json: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let inputs = inputs(&json);
    shared.lock().embeddings.push(EmbeddingRequestRecord {
        authorization: header_str(&headers, header::AUTHORIZATION),
        body: json.clone(),
        inputs: inputs.clone().unwrap_or_default(),
    });
    if let Some(resp) = check_auth(&shared, &headers) {
        return resp;
    }
    let inputs = match inputs {
        Ok(i) => i,
        Err(e) => return error_response(400, bad_request(e)),
    };
    let Some(model) = json.get("model").and_then(Value::as_str) else {
        return error_response(400, bad_request("you must provide a model parameter"));
    };
    let (dim, as_base64) = match shape(&shared, &json) {
        Ok(shape) => shape,
        Err(e) => return error_response(400, bad_request(&e)),
    };
    let mut tokens = 0;
    let data: Vec<Value> = inputs
        .iter()
        .enumerate()
        .map(|(i, text)| {
            tokens += words(text);
            let v = embedding_for(text, dim);
            let embedding = if as_base64 {
                let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
                json!(base64(&bytes))
            } else {
                json!(v)
            };
            json!({"object": "embedding", "index": i, "embedding": embedding})
        })
        .collect();
    let body = json!({
        "object": "list",
        "data": data,
        "model": model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    });
    (StatusCode::OK, axum::Json(body)).into_response()
}

/// The texts to embed: `input`, a string or a non-empty array.
fn inputs(json: &Value) -> Result<Vec<String>, &'static str> {
    match json.get("input") {
        Some(Value::String(s)) => Ok(vec![s.clone()]),
        Some(Value::Array(items)) if !items.is_empty() => items
            .iter()
            .map(|i| match i {
                Value::String(s) => Ok(s.clone()),
                // Token arrays are allowed by the protocol; hash the numbers as words.
                Value::Array(tokens) => Ok(tokens
                    .iter()
                    .map(Value::to_string)
                    .collect::<Vec<_>>()
                    .join(" ")),
                Value::Number(n) => Ok(n.to_string()),
                _ => Err("'input' items must be strings or token arrays"),
            })
            .collect(),
        _ => Err("'input' is a required property and must be a string or a non-empty array"),
    }
}

/// The vectors asked for: their dimension and whether they go as base64.
fn shape(shared: &Shared, json: &Value) -> Result<(usize, bool), String> {
    let dim = match json.get("dimensions") {
        Some(Value::Number(n)) => match n.as_u64() {
            Some(d) if d >= 1 => d as usize,
            _ => return Err("'dimensions' must be a positive integer".into()),
        },
        _ => shared.config.embedding_dim,
    };
    let as_base64 = match json.get("encoding_format").and_then(Value::as_str) {
        None | Some("float") => false,
        Some("base64") => true,
        Some(other) => {
            return Err(format!(
                "Invalid value: '{other}'. Supported values are: 'float' and 'base64'."
            ));
        }
    };
    Ok((dim, as_base64))
}

pub(super) fn model_object(id: &str) -> Value {
    json!({"id": id, "object": "model", "created": 1_686_935_002, "owned_by": "troupe-e2e"})
}

pub(super) async fn list_models(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    if let Some(resp) = check_auth(&shared, &headers) {
        return resp;
    }
    let body = json!({
        "object": "list",
        "data": [model_object(&shared.config.model), model_object(&shared.config.embedding_model)],
    });
    (StatusCode::OK, axum::Json(body)).into_response()
}

pub(super) async fn get_model(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    if let Some(resp) = check_auth(&shared, &headers) {
        return resp;
    }
    if id == shared.config.model || id == shared.config.embedding_model {
        return (StatusCode::OK, axum::Json(model_object(&id))).into_response();
    }
    error_response(
        404,
        openai_error(
            &format!("The model '{id}' does not exist"),
            "invalid_request_error",
            Some("model_not_found"),
        ),
    )
}
