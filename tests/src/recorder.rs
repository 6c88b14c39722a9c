//! A server that only records: every request's method, path and `Authorization` header,
//! answered with a 404 in the Bot API's error shape. It stands for an endpoint an attacker
//! controls, so a test can assert which credentials reached it (issue 30): a token in a
//! Bot API path, a bearer key in a header. Waits wake on each request (see [`crate::wait`]).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::wait::{self, Diagnose};

/// One request as the recorder received it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    pub authorization: Option<String>,
}

impl Recorded {
    /// Whether `needle` appears in the path or the `Authorization` header.
    pub fn carries(&self, needle: &str) -> bool {
        self.path.contains(needle)
            || self
                .authorization
                .as_deref()
                .is_some_and(|a| a.contains(needle))
    }
}

struct Shared {
    seen: Mutex<Vec<Recorded>>,
    count: watch::Sender<usize>,
}

/// The running recorder. Dropping it stops it.
pub struct Recorder {
    addr: SocketAddr,
    shared: Arc<Shared>,
    server: JoinHandle<()>,
}

impl Recorder {
    pub async fn start() -> Self {
        let shared = Arc::new(Shared {
            seen: Mutex::new(Vec::new()),
            count: watch::Sender::new(0),
        });
        let app = Router::new().fallback(record).with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the recorder");
        let addr = listener.local_addr().expect("local addr");
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Recorder {
            addr,
            shared,
            server,
        }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every request so far, in order.
    pub fn requests(&self) -> Vec<Recorded> {
        self.shared
            .seen
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Waits for a request that carries `needle` (in its path or `Authorization`).
    pub async fn wait_for_carrying(&self, needle: &str, timeout: Duration) -> Recorded {
        wait::until_or_report(
            self,
            self.shared.count.subscribe(),
            timeout,
            format!("a request carrying {needle:?}"),
            || self.requests().into_iter().find(|r| r.carries(needle)),
        )
        .await
        .unwrap_or_else(|report| panic!("{report}"))
    }
}

impl Diagnose for Recorder {
    fn diagnostics(&self) -> String {
        format!("the recorder saw: {:#?}", self.requests())
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.server.abort();
    }
}

async fn record(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let recorded = Recorded {
        method: request.method().to_string(),
        path: request.uri().path().to_string(),
        authorization: request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string),
    };
    shared
        .seen
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(recorded);
    shared.count.send_modify(|n| *n += 1);
    (
        StatusCode::NOT_FOUND,
        axum::Json(json!({"ok": false, "error_code": 404, "description": "Not Found"})),
    )
        .into_response()
}
