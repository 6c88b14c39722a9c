//! The console: the browser page served at `/`, from files embedded in the binary.
//!
//! `gateway/console/` holds plain HTML, CSS and JavaScript modules; there is no build step,
//! no Node and no CDN, so the page works offline and the binary carries it (51 KB).
//! `/` is `index.html`; `/console/{file}` are the other files, by their path under
//! `gateway/console/`. The page itself holds no data: every call it makes goes to `/api`,
//! `/readyz` or `/metrics`, which check the API token as for any other caller; the page
//! asks for the token once and keeps it in the tab's `sessionStorage`.
//!
//! Without `TROUPE_API_TOKEN`, troupe binds loopback only (see `config::http_addr`), and
//! the console also refuses a caller that is not on loopback, in case a proxy in front
//! forwards from elsewhere to that loopback address with the client's address intact.
//! The responses carry a strict Content-Security-Policy: scripts, styles and calls from
//! this origin only.

use axum::Extension;
use axum::Router;
use axum::extract::{ConnectInfo, Path, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use std::net::SocketAddr;

use super::AppState;
use super::error::ApiError;

/// The caller's address, as `serve` records it on every request.
type Peer = Extension<ConnectInfo<SocketAddr>>;

/// One embedded file.
struct Asset {
    path: &'static str,
    body: &'static str,
    content_type: &'static str,
}

macro_rules! assets {
    ($($path:literal => $kind:expr),* $(,)?) => {
        &[$(Asset {
            path: $path,
            body: include_str!(concat!("../../console/", $path)),
            content_type: $kind,
        }),*]
    };
}

const HTML: &str = "text/html; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";
const JS: &str = "text/javascript; charset=utf-8";
const JSON: &str = "application/json";

/// Every file of the console. A file added to `gateway/console/` is served once listed here.
static ASSETS: &[Asset] = assets![
    "index.html" => HTML,
    "console.css" => CSS,
    "js/app.js" => JS,
    "js/api.js" => JS,
    "js/dom.js" => JS,
    "js/route.js" => JS,
    "js/picker.js" => JS,
    "js/diff.js" => JS,
    "js/chart.js" => JS,
    "js/personas.js" => JS,
    "js/chat.js" => JS,
    "js/rooms.js" => JS,
    "js/knowledge.js" => JS,
    "js/posts.js" => JS,
    "js/access.js" => JS,
    "js/platforms.js" => JS,
    "js/characters.js" => JS,
    "js/health.js" => JS,
    "template.json" => JSON,
];

const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                   connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// `/` and `/console/{*file}`.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/", get(index))
        .route("/console/{*file}", get(file))
}

async fn index(state: State<AppState>, peer: Option<Peer>) -> Response {
    serve(&state, peer, "index.html")
}

async fn file(state: State<AppState>, peer: Option<Peer>, Path(file): Path<String>) -> Response {
    serve(&state, peer, &file)
}

fn serve(state: &AppState, peer: Option<Peer>, file: &str) -> Response {
    let peer = peer.map(|Extension(ConnectInfo(p))| p);
    if !may_serve(state.config.api_token.is_some(), peer) {
        return ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            "without TROUPE_API_TOKEN the console is served on loopback only",
        )
        .into_response();
    }
    let Some(asset) = ASSETS.iter().find(|a| a.path == file) else {
        return ApiError::not_found("no such console file").into_response();
    };
    let mut response = asset.body.into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(asset.content_type),
    );
    // Small files on loopback: revalidating each time costs nothing and an upgrade is seen
    // at once.
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    response
}

/// With a token every caller gets the page (its calls are checked); without one, only a
/// caller on loopback, and never one whose address is unknown.
fn may_serve(has_token: bool, peer: Option<SocketAddr>) -> bool {
    has_token || peer.is_some_and(|p| p.ip().is_loopback())
}

#[cfg(test)]
mod tests {
    use super::{ASSETS, may_serve};

    #[test]
    fn without_a_token_only_loopback_is_served() {
        let at = |s: &str| Some(s.parse().unwrap());
        assert!(may_serve(false, at("127.0.0.1:5000")));
        assert!(may_serve(false, at("[::1]:5000")));
        assert!(!may_serve(false, at("10.0.0.7:5000")));
        assert!(!may_serve(false, None));
        assert!(may_serve(true, at("10.0.0.7:5000")));
    }

    #[test]
    fn every_module_the_page_imports_is_served() {
        // A module imported but not listed would 404 in the browser, and the page would
        // stay blank.
        for asset in ASSETS {
            // Static imports (`import … from './x.js'`) and the router's `import('./x.js')`.
            let specs = asset.body.lines().filter_map(|line| {
                let line = line.trim();
                let rest = line
                    .strip_prefix("import ")
                    .or_else(|| line.split_once("import(").map(|(_, r)| r))?;
                rest.split(['"', '\'']).nth(1)
            });
            for spec in specs {
                let target = spec.trim_start_matches("./");
                let dir = asset.path.rsplit_once('/').map(|(d, _)| d).unwrap_or("");
                let full = if dir.is_empty() {
                    target.to_string()
                } else {
                    format!("{dir}/{target}")
                };
                assert!(
                    ASSETS.iter().any(|a| a.path == full),
                    "{} imports {spec}, which is not served",
                    asset.path
                );
            }
        }
    }

    #[test]
    fn every_file_the_html_links_is_served() {
        let html = ASSETS.iter().find(|a| a.path == "index.html").unwrap().body;
        let linked: Vec<&str> = html
            .split("\"/console/")
            .skip(1)
            .filter_map(|rest| rest.split('"').next())
            .collect();
        assert!(linked.len() >= 3, "{linked:?}");
        for file in linked {
            assert!(
                ASSETS.iter().any(|a| a.path == file),
                "{file} is not served"
            );
        }
    }

    #[test]
    fn the_page_loads_its_scripts_from_this_origin_only() {
        for asset in ASSETS {
            assert!(
                !asset.body.contains("https://") || asset.path.ends_with(".js"),
                "{} links to another origin",
                asset.path
            );
            assert!(!asset.body.contains("<script src=\"http"), "{}", asset.path);
        }
    }
}
