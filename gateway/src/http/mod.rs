//! The HTTP API: one router, one state, one error type, and the server that runs it.
//!
//! Routes (stable; docs/api.md and docs/security.md list them): `/healthz`, `/readyz`, `/metrics`, and under
//! `/api` the agents, the direct conversation with them, and their rooms and memories.
//! When `TROUPE_API_TOKEN` is set, every route needs `Authorization: Bearer <token>`, reads
//! and `/metrics` included: memories, facts and documents are private. Only `/healthz` and
//! `/readyz` stay open for probes, and `/webhooks/...` check their platform's own secret.
//! Which token reaches what (the operator's, scoped ones) is [`auth`]'s.
//!
//! Every error is JSON `{error, detail}` (see [`error::json_errors`]). Requests to `/api`
//! that write or cost a model call are counted per caller ([`crate::limits::ApiBudget`]).
//! [`serve`] runs the router with a deadline on request headers, a cap on connections and
//! one per address ([`connections`]); [`edge`] refuses a foreign `Host` or `Origin` and adds
//! the security headers.

mod agents;
mod auth;
mod characters;
mod commands;
mod connections;
mod console;
mod edge;
pub mod error;
mod extract;
mod forwarded;
mod health;
mod history;
mod inspect;
mod knowledge;
mod live;
mod media;
mod media_form;
mod openai;
mod pairing;
mod people;
mod platforms;
mod posts;
mod telegram_link;
mod usage;
mod webhooks;

use axum::Router;
use axum::extract::{ConnectInfo, DefaultBodyLimit, Request, State};
use axum::http::{Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post, put};
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::trace::TraceLayer;

use crate::agent::Agents;
use crate::config::{Config, HttpSettings};
use crate::ingress::Ingress;
use crate::knowledge::Knowledge;
use crate::storage::Store;
use auth::{Caller, require_token};
use error::ApiError;

/// What every handler may use, behind one `Arc`: axum clones the state for every extractor
/// and middleware that takes it, several times a request, and a clone of the fields
/// themselves was some two dozen reference counts raised and dropped on both cores (9% of a
/// tokio worker's CPU under 16 HTTP clients, docs/benchmarks.md). Fields read through it as
/// before (`state.store`).
#[derive(Clone)]
pub struct AppState(Arc<Services>);

impl AppState {
    pub fn new(services: Services) -> AppState {
        AppState(Arc::new(services))
    }
}

impl std::ops::Deref for AppState {
    type Target = Services;

    fn deref(&self) -> &Services {
        &self.0
    }
}

/// The services behind `AppState`.
pub struct Services {
    pub config: Arc<Config>,
    pub agents: Agents,
    pub ingress: Ingress,
    pub store: Store,
    /// The running connectors (webhooks, `/readyz`).
    pub connectors: crate::registry::Connectors,
    pub knowledge: Knowledge,
    /// Which receivers this replica leads, for `/readyz`.
    pub elector: crate::leader::Elector,
    /// Requests per caller to `/api` (`TROUPE_RATE_API_PER_MIN`).
    pub budget: crate::limits::ApiBudget,
    /// What each connector's receive loop is doing, for `/readyz`.
    pub receivers: crate::supervise::Receivers,
    /// Post schedules (`posts`).
    pub posts: crate::posts::Posts,
    /// Pairing codes and approvals (`/api/pairing`, issue 44).
    pub access: crate::access::Access,
    /// The platform tokens the console connects (`/api/agents/{agent}/platforms`, issue 47).
    pub secrets: crate::secrets_file::SecretsFile,
    /// Restarts a persona's connectors once its tokens change.
    pub reconnect: crate::connect::Reconnect,
}

pub fn router(state: AppState) -> Router {
    let api = Router::new()
        .route("/agents", get(agents::list))
        .route("/agents/{agent}", get(agents::get))
        .route(
            "/agents/{agent}/messages",
            // Room for one image inline in base64 (http/media.rs).
            post(agents::post_message)
                .layer(DefaultBodyLimit::max(media::body_limit(&state.config))),
        )
        .route("/agents/{agent}/rooms", get(agents::rooms))
        .route(
            "/agents/{agent}/rooms/{room}/memories",
            get(agents::memories),
        )
        .route(
            "/agents/{agent}/rooms/{room}/commands",
            post(commands::post_command),
        )
        .route("/agents/{agent}/usage", get(usage::usage))
        .route("/agents/{agent}/posts", get(posts::list).post(posts::add))
        .route("/agents/{agent}/posts/{id}", delete(posts::remove))
        .route("/agents/{agent}/posts/drafts", get(posts::list_drafts))
        .route("/agents/{agent}/posts/drafts/{id}", put(posts::edit_draft))
        .route(
            "/agents/{agent}/posts/drafts/{id}/approve",
            post(posts::approve_draft),
        )
        .route(
            "/agents/{agent}/posts/drafts/{id}/reject",
            post(posts::reject_draft),
        )
        .route("/pairing", get(pairing::list))
        .route("/pairing/approve", post(pairing::approve))
        .route("/pairing/{platform}/{user}", delete(pairing::revoke))
        .layer(DefaultBodyLimit::max(state.config.limits.max_body_bytes))
        .merge(knowledge_routes(&state))
        .merge(console_api_routes())
        // Checking a draft reads files and parses them: counted like any write (issue 30,
        // finding 3).
        .route("/characters/check", post(characters::check))
        // The token is checked first: a request without it costs nothing and counts nothing.
        .route_layer(middleware::from_fn_with_state(state.clone(), api_budget))
        .route_layer(middleware::from_fn_with_state(state.clone(), require_token));

    Router::new()
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .route(
            "/metrics",
            get(metrics).route_layer(middleware::from_fn_with_state(state.clone(), require_token)),
        )
        .nest("/api", api)
        // Personas as OpenAI-compatible models (issue 35, docs/openai.md).
        .merge(openai::routes(&state))
        .merge(console::routes())
        .route(
            "/webhooks/{platform}/{agent}",
            post(webhooks::receive)
                .layer(DefaultBodyLimit::max(state.config.limits.max_body_bytes)),
        )
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(CatchPanicLayer::custom(
            |_: Box<dyn std::any::Any + Send>| {
                ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal",
                    "the request failed unexpectedly; the gateway's log has the details",
                )
                .into_response()
            },
        ))
        .layer(middleware::from_fn(error::json_errors))
        // Outside the JSON errors, so that every answer gets the security headers.
        .layer(middleware::from_fn_with_state(
            Arc::new(edge::EdgePolicy::new(&state.config)),
            edge::guard,
        ))
        .layer(TraceLayer::new_for_http())
        .with_state(state)
}

/// The knowledge routes. Uploads get their own body limit: every file may be as large as
/// `TROUPE_KNOWLEDGE_MAX_FILE_BYTES`, plus room for the multipart framing.
fn knowledge_routes(state: &AppState) -> Router<AppState> {
    let k = &state.config.knowledge;
    let upload_limit = k
        .max_file_bytes
        .saturating_mul(k.max_files_per_request)
        .saturating_add(64 * 1024);
    Router::new()
        .route(
            "/agents/{agent}/documents",
            post(knowledge::upload)
                .layer(DefaultBodyLimit::max(upload_limit))
                .get(knowledge::list),
        )
        .route("/agents/{agent}/documents/{id}", delete(knowledge::delete))
        .route("/agents/{agent}/knowledge/search", get(knowledge::search))
}

/// The routes the console adds (docs/api.md, "Console"): prompt context, facts by id,
/// platform setup, and the character files.
fn console_api_routes() -> Router<AppState> {
    Router::new()
        .route(
            "/agents/{agent}/rooms/{room}/messages/{message}/why",
            get(inspect::why),
        )
        .route(
            "/agents/{agent}/rooms/{room}/history/{id}/images/{n}",
            get(history::image),
        )
        .route("/agents/{agent}/rooms/{room}/facts", get(inspect::facts))
        .route("/agents/{agent}/facts/{id}", delete(inspect::delete_fact))
        .route("/agents/{agent}/people", get(people::list))
        .route("/agents/{agent}/setup", get(inspect::setup))
        // Connecting a platform (issue 47): the operator's only (`auth::scoped_access`).
        .route("/agents/{agent}/platforms", get(platforms::list))
        .route(
            "/agents/{agent}/platforms/{platform}",
            put(platforms::connect).delete(platforms::disconnect),
        )
        .route("/characters", get(characters::list))
        .route(
            "/characters/{file}",
            get(characters::read).put(characters::save),
        )
}

async fn metrics(State(state): State<AppState>) -> Response {
    crate::metrics::bus_depth(state.ingress.bus().depth());
    health::metrics().await.into_response()
}

async fn not_found() -> ApiError {
    ApiError::not_found("no such route; see docs/api.md for the routes")
}

async fn method_not_allowed() -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        "this route does not take that method",
    )
}

/// Counts requests that write or cost a model call (everything but GET and HEAD) against
/// the caller's budget, before any handler runs, so nothing over it is journaled. Reads are
/// not counted: probes and dashboards poll them, and they cost no model call.
///
/// The caller is a scoped token by its name, wherever it calls from; anyone else by their
/// address: the peer's, or behind a proxy of `TROUPE_TRUSTED_PROXIES` the one its
/// `X-Forwarded-For`/`Forwarded` names ([`forwarded::client_ip`]).
async fn api_budget(State(state): State<AppState>, request: Request, next: Next) -> Response {
    if matches!(*request.method(), Method::GET | Method::HEAD) {
        return next.run(request).await;
    }
    let caller = match request.extensions().get::<Caller>() {
        Some(Caller::Scoped(token)) => crate::limits::ApiCaller::Token(token.name.clone()),
        _ => {
            let Some(ConnectInfo(peer)) = request
                .extensions()
                .get::<ConnectInfo<SocketAddr>>()
                .copied()
            else {
                return next.run(request).await;
            };
            let trusted = &state.config.api_callers.trusted_proxies;
            crate::limits::ApiCaller::Addr(forwarded::client_ip(
                peer.ip(),
                request.headers(),
                trusted,
            ))
        }
    };
    let who = caller.noun();
    match state.budget.check(caller) {
        Ok(()) => next.run(request).await,
        Err(wait) => {
            let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
            ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limited",
                format!(
                    "{who} has made too many API requests (TROUPE_RATE_API_PER_MIN); \
                     try again in {secs} s"
                ),
            )
            .retry_after(secs)
            .into_response()
        }
    }
}

/// Refuses a message of the HTTP API once the API's rooms together have spent their share
/// of the persona's budgets (`TROUPE_SPEND_API_SHARE`, docs/spend.md): 429, before it is
/// journaled, while the platforms' users keep the rest. The agent checks the same share
/// again before its model call, for messages that raced past this check.
pub(crate) async fn api_share_left(agent: &crate::agent::Agent) -> Result<(), ApiError> {
    use crate::spend::BudgetScope;
    let Some(meter) = agent.meter() else {
        return Ok(());
    };
    let scope = match meter.api_spent().await {
        Ok(None) => return Ok(()),
        Ok(Some(scope)) => scope,
        Err(e) => {
            return Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "storage_unavailable",
                format!("cannot read the persona's spend ({e}); post it again in a few seconds"),
            )
            .retry_after(5));
        }
    };
    let (window, until) = match scope {
        BudgetScope::ApiMonth => ("this month's", "next month"),
        _ => ("today's", "tomorrow (UTC)"),
    };
    let error = ApiError::new(
        StatusCode::TOO_MANY_REQUESTS,
        "budget_exhausted",
        format!(
            "the HTTP API has used its share (TROUPE_SPEND_API_SHARE) of {window} budget of \
             the persona `{}`; its chat platforms keep the rest. Try again {until}",
            agent.id
        ),
    );
    Err(match scope {
        BudgetScope::ApiMonth => error,
        _ => error.retry_after(secs_to_utc_midnight()),
    })
}

/// Seconds until the next UTC day, when a day's budgets start again.
pub(crate) fn secs_to_utc_midnight() -> u64 {
    let into_day = (crate::clock::now_ms() / 1000).rem_euclid(86_400);
    (86_400 - into_day) as u64
}

/// Serves `router` on `listener` until `stop` is cancelled, then lets the requests in hand
/// finish. HTTP/1.1 only (with keep-alive): no platform or client of the API needs
/// HTTP/2 over plain TCP, and HTTP/1 gives the header deadline below.
///
/// - A client has `header_timeout` to send each request's headers, and as long again to
///   start the next request on a kept-alive connection; then the connection is closed.
///   A slow or half-sent request cannot hold a connection.
/// - A request body may pause at most `body_timeout` between two pieces; then reading it
///   fails (the request gets a 400) and the connection closes.
/// - At most `max_connections` connections are served at once, and at most
///   `per_address` from one address (the next gets 429 and is closed). Past the cap, the
///   probes still get through on a lane of their own, where anything else gets 503; past
///   that lane too, connections wait in the listen queue ([`connections`]).
pub async fn serve(
    listener: TcpListener,
    router: Router,
    settings: &HttpSettings,
    per_address: usize,
    stop: CancellationToken,
) -> std::io::Result<()> {
    let slots = connections::Slots::new(settings.max_connections, per_address);
    let tracker = tokio_util::task::TaskTracker::new();
    let closing = CancellationToken::new();
    while let Some((stream, peer, slot)) = next_connection(&listener, &slots, &stop).await {
        let connection = Connection {
            peer,
            slot,
            router: router.clone(),
            settings: settings.clone(),
        };
        tracker.spawn(connection.serve(stream, closing.clone()));
    }
    drop(listener);
    closing.cancel();
    tracker.close();
    tracker.wait().await;
    Ok(())
}

/// The next connection to serve, with its slot: a slot is reserved before `accept`, so
/// that past the cap connections wait in the listen queue. A connection over its
/// address's share is answered 429 and closed here; a failed accept is skipped. `None`
/// once `stop` is cancelled.
async fn next_connection(
    listener: &TcpListener,
    slots: &connections::Slots,
    stop: &CancellationToken,
) -> Option<(tokio::net::TcpStream, SocketAddr, connections::Slot)> {
    loop {
        let reserved = tokio::select! {
            _ = stop.cancelled() => return None,
            reserved = slots.reserve() => reserved?,
        };
        let (stream, peer) = tokio::select! {
            _ = stop.cancelled() => return None,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    accept_failed(e).await;
                    continue;
                }
            },
        };
        match slots.admit(reserved, peer.ip()) {
            Ok(slot) => return Some((stream, peer, slot)),
            Err(connections::TooMany) => {
                // Nothing of the request is read: the answer is written if the socket
                // takes it at once, and the connection closes either way.
                let _ = stream.try_write(&connections::too_many_response());
                tracing::debug!(%peer, "refused a connection: TROUPE_HTTP_MAX_CONNECTIONS_PER_IP");
            }
        }
    }
}

/// One admitted connection: who it is from, the slot it holds until it closes, and what
/// serves it.
struct Connection {
    peer: SocketAddr,
    slot: connections::Slot,
    router: Router,
    settings: HttpSettings,
}

impl Connection {
    /// Serves the connection over HTTP/1.1 with the header deadline (shorter on the probes'
    /// lane) until it closes. Once `closing` is cancelled the connection finishes the
    /// request in hand, then closes.
    async fn serve(self, stream: tokio::net::TcpStream, closing: CancellationToken) {
        use connections::Lane;
        use hyper_util::rt::{TokioIo, TokioTimer};
        let _ = stream.set_nodelay(true);
        let lane = self.slot.lane();
        let header_timeout = match lane {
            Lane::General => self.settings.header_timeout,
            Lane::Probes => self
                .settings
                .header_timeout
                .min(connections::PROBE_HEADER_TIMEOUT),
        };
        let (router, peer, body_timeout) = (self.router, self.peer, self.settings.body_timeout);
        let service = tower::service_fn(move |request| {
            handle(router.clone(), lane, peer, body_timeout, request)
        });
        let mut builder = hyper::server::conn::http1::Builder::new();
        builder
            .timer(TokioTimer::new())
            .header_read_timeout(header_timeout)
            // A lane slot serves one probe, then is free for the next.
            .keep_alive(lane == Lane::General);
        let service = hyper_util::service::TowerToHyperService::new(service);
        let conn = builder.serve_connection(TokioIo::new(stream), service);
        let mut conn = std::pin::pin!(conn);
        let result = tokio::select! {
            result = conn.as_mut() => result,
            _ = closing.cancelled() => {
                conn.as_mut().graceful_shutdown();
                conn.await
            }
        };
        if let Err(e) = result {
            tracing::debug!(error = %e, "connection closed with an error");
        }
        drop(self.slot);
    }
}

/// One request of a connection: on the probes' lane anything but a probe gets 503; else
/// the router, with the peer's address for the handlers and the body under the idle
/// deadline.
async fn handle(
    router: Router,
    lane: connections::Lane,
    peer: SocketAddr,
    body_timeout: std::time::Duration,
    request: axum::http::Request<hyper::body::Incoming>,
) -> Result<Response, std::convert::Infallible> {
    use tower::ServiceExt;
    if lane == connections::Lane::Probes
        && !connections::is_probe(request.method(), request.uri().path())
    {
        return Ok(connections::busy());
    }
    let mut request = request.map(|body| axum::body::Body::new(IdleBody::new(body, body_timeout)));
    request.extensions_mut().insert(ConnectInfo(peer));
    router.oneshot(request).await
}

/// A request body that fails once the client has sent nothing for `idle`: a body trickled
/// or never finished cannot hold a connection and a handler for ever. Large uploads on slow
/// links are fine: only pauses count.
struct IdleBody {
    inner: hyper::body::Incoming,
    idle: std::time::Duration,
    pause: Option<std::pin::Pin<Box<tokio::time::Sleep>>>,
}

impl IdleBody {
    fn new(inner: hyper::body::Incoming, idle: std::time::Duration) -> Self {
        IdleBody {
            inner,
            idle,
            pause: None,
        }
    }
}

/// Why an [`IdleBody`] failed.
#[derive(Debug, thiserror::Error)]
enum BodyError {
    #[error("the client stopped sending the request body (TROUPE_HTTP_BODY_TIMEOUT_SECS)")]
    Stalled,
    #[error(transparent)]
    Read(#[from] hyper::Error),
}

impl http_body::Body for IdleBody {
    type Data = bytes::Bytes;
    type Error = BodyError;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<bytes::Bytes>, BodyError>>> {
        use std::future::Future;
        use std::task::Poll;
        let this = self.get_mut();
        match std::pin::Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(frame) => {
                this.pause = None;
                Poll::Ready(frame.map(|r| r.map_err(BodyError::from)))
            }
            Poll::Pending => {
                let idle = this.idle;
                let pause = this
                    .pause
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(idle)));
                match pause.as_mut().poll(cx) {
                    Poll::Ready(()) => Poll::Ready(Some(Err(BodyError::Stalled))),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// An accept error: a connection that failed before it was accepted is skipped; running
/// out of file descriptors is logged and waited out, so the loop does not spin.
async fn accept_failed(e: std::io::Error) {
    use std::io::ErrorKind;
    if matches!(
        e.kind(),
        ErrorKind::ConnectionRefused | ErrorKind::ConnectionAborted | ErrorKind::ConnectionReset
    ) {
        return;
    }
    tracing::error!(error = %e, "cannot accept a connection; retrying in a second");
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
}
