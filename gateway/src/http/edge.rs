//! The HTTP edge: which `Host` and `Origin` a request may carry, and the headers every
//! answer gets (issue 30, finding 2). It owns no route; [`guard`] wraps the whole router.
//!
//! - **Host (DNS rebinding).** A page the operator visits can point its own name at
//!   127.0.0.1; the browser then calls troupe as that page's origin, and reads the answers.
//!   Such a request carries the attacker's name in `Host`. Allowed: IP literals (a rebinding
//!   needs a name, and a literal in `Host` is an address the browser really dialled),
//!   `localhost` and names under `.localhost` (browsers resolve them to loopback themselves),
//!   and the names in `TROUPE_ALLOWED_HOSTS`. Vite's dev server made the same choice.
//!   Without `TROUPE_API_TOKEN` this is always checked. With a token, a rebound page cannot
//!   present it (the console keeps it in `sessionStorage`, never in a cookie), so `Host` is
//!   checked only when `TROUPE_ALLOWED_HOSTS` is set: behind a reverse proxy the public name
//!   works as it did. The probes (container health checks dial the container's address or
//!   `localhost`, Kubernetes the pod's) and `/webhooks/…` (the platform calls with the
//!   public name, and its own secret guards the route) are never Host-checked.
//! - **Origin (cross-site requests).** A browser page on another origin may send writes
//!   without a preflight (a form, or a multipart upload). A request whose `Origin` is not
//!   this server's own is refused, reads and writes alike. Its own: the same host and port
//!   as `Host`, or a host listed in `TROUPE_ALLOWED_HOSTS` (a proxy that rewrites `Host`).
//!   `Origin: null` (a sandboxed frame, a file) is never ours. Callers that are not browsers
//!   (curl, the SDKs, the platforms) send no `Origin` and are not affected. As a second
//!   signal, `Sec-Fetch-Site: cross-site` is refused except on a plain navigation (a link to
//!   the console from another site), which cannot read what it opens.
//! - **Headers.** Every answer gets `X-Content-Type-Options: nosniff`, and, unless its
//!   handler chose otherwise (the console's files revalidate), `Cache-Control: no-store`,
//!   `X-Frame-Options: DENY` and `Cross-Origin-Resource-Policy: same-origin`.

use axum::extract::{Request, State};
use axum::http::uri::Authority;
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Uri, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::net::IpAddr;
use std::sync::Arc;

use super::error::ApiError;
use crate::config::{AllowedHosts, Config};

/// Which `Host` and `Origin` values this server takes as its own.
#[derive(Debug, Clone)]
pub struct EdgePolicy {
    /// Whether `Host` is checked at all (see the module doc).
    check_host: bool,
    /// `TROUPE_ALLOWED_HOSTS`.
    allowed: Option<AllowedHosts>,
}

impl EdgePolicy {
    pub fn new(config: &Config) -> Self {
        let allowed = config.edge.allowed_hosts.clone();
        EdgePolicy {
            check_host: config.api_token.is_none() || allowed.is_some(),
            allowed,
        }
    }

    /// Whether a request may be served, from its method, path and headers.
    fn check(&self, method: &Method, path: &str, headers: &HeaderMap) -> Result<(), Refusal> {
        let check_host = self.check_host && !host_exempt(path);
        let host = match headers.get(header::HOST).map(HostPort::parse_host) {
            Some(None) if check_host => return Err(Refusal::BadHost),
            // Where the name is not checked, a malformed one only matches no origin.
            parsed => parsed.flatten(),
        };
        if check_host {
            // No `Host` at all is not a browser (HTTP/1.1 browsers always send it), so it
            // cannot be a rebound page.
            if let Some(host) = &host
                && !self.is_our_name(&host.host)
            {
                return Err(Refusal::ForeignHost(shown(headers.get(header::HOST))));
            }
        }
        if let Some(raw) = headers.get(header::ORIGIN) {
            let same = HostPort::parse_origin(raw).is_some_and(|origin| {
                host.as_ref().is_some_and(|h| h.same_origin_as(&origin))
                    || self
                        .allowed
                        .as_ref()
                        .is_some_and(|a| a.allows(&origin.host))
            });
            if !same {
                return Err(Refusal::CrossOrigin(shown(Some(raw))));
            }
        }
        let cross_site = headers
            .get(SEC_FETCH_SITE)
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"cross-site"));
        let navigation = matches!(*method, Method::GET | Method::HEAD)
            && headers
                .get(SEC_FETCH_MODE)
                .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"navigate"));
        if cross_site && !navigation {
            return Err(Refusal::CrossSite);
        }
        Ok(())
    }

    /// An IP literal, `localhost` (and names under it), or a name the operator listed.
    fn is_our_name(&self, host: &str) -> bool {
        host.parse::<IpAddr>().is_ok()
            || host == "localhost"
            || host.ends_with(".localhost")
            || self.allowed.as_ref().is_some_and(|a| a.allows(host))
    }
}

const SEC_FETCH_SITE: HeaderName = HeaderName::from_static("sec-fetch-site");
const SEC_FETCH_MODE: HeaderName = HeaderName::from_static("sec-fetch-mode");

/// The probes and the platforms' webhooks answer whatever name they are called by.
fn host_exempt(path: &str) -> bool {
    matches!(path, "/healthz" | "/readyz") || path.starts_with("/webhooks/")
}

/// A host (lower case, without brackets or a trailing dot) and its port, from a `Host`
/// header or an `Origin`.
#[derive(Debug, PartialEq, Eq)]
struct HostPort {
    host: String,
    /// The explicit port; for an origin, its scheme's port when none is written.
    port: Option<u16>,
}

impl HostPort {
    /// `name`, `name:port`, `1.2.3.4:port`, `[::1]:port`. No user info, nothing else.
    fn parse_host(raw: &HeaderValue) -> Option<HostPort> {
        let raw = raw.to_str().ok()?;
        if raw.contains('@') {
            return None;
        }
        let authority: Authority = raw.parse().ok()?;
        Some(HostPort {
            host: normalize(authority.host()),
            port: authority.port_u16(),
        })
    }

    /// `scheme://host[:port]`, as browsers serialize an origin; `null` and anything else
    /// is `None`.
    fn parse_origin(raw: &HeaderValue) -> Option<HostPort> {
        let uri: Uri = raw.to_str().ok()?.parse().ok()?;
        let default_port = match uri.scheme_str()? {
            "http" => 80,
            "https" => 443,
            _ => return None,
        };
        let authority = uri.authority()?;
        if authority.as_str().contains('@') || uri.path().len() > 1 {
            return None;
        }
        Some(HostPort {
            host: normalize(authority.host()),
            port: Some(authority.port_u16().unwrap_or(default_port)),
        })
    }

    /// Whether `origin` is this `Host`: the same name, and the same port (a `Host` without
    /// one is on its scheme's port, which is the origin's when it writes none).
    fn same_origin_as(&self, origin: &HostPort) -> bool {
        self.host == origin.host
            && match self.port {
                Some(port) => origin.port == Some(port),
                None => matches!(origin.port, Some(80 | 443)),
            }
    }
}

/// `[::1]` → `::1`, `Bot.Example.` → `bot.example`.
fn normalize(host: &str) -> String {
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase()
}

/// A header value as it may be shown back in an error: printable, and at most 100 bytes.
fn shown(raw: Option<&HeaderValue>) -> String {
    let text = raw.and_then(|v| v.to_str().ok()).unwrap_or("(not text)");
    let mut end = text.len().min(100);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_string()
}

/// Why a request was refused.
#[derive(Debug, PartialEq, Eq)]
enum Refusal {
    /// `Host` is not one of this server's names; holds the header as sent.
    ForeignHost(String),
    /// `Host` is not a host.
    BadHost,
    /// `Origin` is another site's page; holds the header as sent.
    CrossOrigin(String),
    /// `Sec-Fetch-Site: cross-site` on anything but a navigation.
    CrossSite,
}

impl From<Refusal> for ApiError {
    fn from(refusal: Refusal) -> ApiError {
        match refusal {
            Refusal::ForeignHost(host) => ApiError::new(
                StatusCode::FORBIDDEN,
                "forbidden_host",
                format!(
                    "this server does not answer to the name in `Host: {host}` (a page that \
                     points its own name at this address would send it); if the name is \
                     yours, add it to TROUPE_ALLOWED_HOSTS"
                ),
            ),
            Refusal::BadHost => ApiError::new(
                StatusCode::BAD_REQUEST,
                "bad_request",
                "the Host header is not a host name or address",
            ),
            Refusal::CrossOrigin(origin) => ApiError::new(
                StatusCode::FORBIDDEN,
                "cross_origin",
                format!(
                    "requests from pages of another origin (`Origin: {origin}`) are refused: \
                     only this server's own pages (the console) may call it from a browser; \
                     if that origin is yours (a reverse proxy that rewrites Host), add its \
                     host to TROUPE_ALLOWED_HOSTS"
                ),
            ),
            Refusal::CrossSite => ApiError::new(
                StatusCode::FORBIDDEN,
                "cross_origin",
                "requests from another site's pages (`Sec-Fetch-Site: cross-site`) are \
                 refused: only this server's own pages (the console) may call it from a \
                 browser",
            ),
        }
    }
}

/// The layer around the whole router: refuses a foreign `Host` or `Origin` before any
/// route runs, and adds the security headers to every answer, errors included.
pub async fn guard(
    State(policy): State<Arc<EdgePolicy>>,
    request: Request,
    next: Next,
) -> Response {
    let mut response = match policy.check(request.method(), request.uri().path(), request.headers())
    {
        Ok(()) => next.run(request).await,
        Err(refusal) => {
            tracing::debug!(?refusal, path = %request.uri().path(), "refused at the HTTP edge");
            ApiError::from(refusal).into_response()
        }
    };
    secure(response.headers_mut());
    response
}

/// The security headers (see the module doc); those a handler set are kept.
pub fn secure(headers: &mut HeaderMap) {
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    for (name, value) in [
        (header::CACHE_CONTROL, "no-store"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (
            HeaderName::from_static("cross-origin-resource-policy"),
            "same-origin",
        ),
    ] {
        headers
            .entry(name)
            .or_insert_with(|| HeaderValue::from_static(value));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(token: bool, allowed: Option<&str>) -> EdgePolicy {
        EdgePolicy {
            check_host: !token || allowed.is_some(),
            allowed: allowed.map(|a| AllowedHosts::parse(a).unwrap()),
        }
    }

    fn check(
        policy: &EdgePolicy,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
    ) -> Result<(), Refusal> {
        let mut map = HeaderMap::new();
        for (k, v) in headers {
            map.insert(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        policy.check(&method, path, &map)
    }

    #[test]
    fn our_names_pass_and_a_rebound_name_does_not() {
        let p = policy(false, None);
        for host in [
            "127.0.0.1:3000",
            "localhost:3000",
            "LOCALHOST.",
            "app.localhost:3000",
            "[::1]:3000",
            "10.0.0.7",
            "[fe80::1]",
        ] {
            assert_eq!(
                check(&p, Method::GET, "/api/agents", &[("host", host)]),
                Ok(()),
                "{host}"
            );
        }
        for host in [
            "evil.example:3000",
            "localhost.evil.example",
            "127.0.0.1.nip.io",
        ] {
            assert!(
                matches!(
                    check(&p, Method::GET, "/api/agents", &[("host", host)]),
                    Err(Refusal::ForeignHost(_))
                ),
                "{host}"
            );
        }
        assert_eq!(
            check(&p, Method::GET, "/api/agents", &[("host", "a@127.0.0.1")]),
            Err(Refusal::BadHost)
        );
        // No Host at all is not a browser.
        assert_eq!(check(&p, Method::GET, "/api/agents", &[]), Ok(()));
    }

    #[test]
    fn listed_names_pass_and_a_token_alone_turns_the_host_check_off() {
        let listed = policy(true, Some("bot.example.org"));
        let host = [("host", "bot.example.org")];
        assert_eq!(check(&listed, Method::GET, "/", &host), Ok(()));
        let other = [("host", "evil.example")];
        assert!(check(&listed, Method::GET, "/", &other).is_err());
        assert_eq!(check(&policy(true, None), Method::GET, "/", &other), Ok(()));
    }

    #[test]
    fn probes_and_webhooks_answer_any_name() {
        let p = policy(false, None);
        let host = [("host", "troupe-7f9c:3000")];
        for path in ["/healthz", "/readyz", "/webhooks/telegram/ada"] {
            assert_eq!(check(&p, Method::GET, path, &host), Ok(()), "{path}");
        }
        assert!(check(&p, Method::GET, "/metrics", &host).is_err());
    }

    #[test]
    fn only_this_servers_own_origin_passes() {
        let p = policy(false, Some("bot.example.org"));
        let ok = |host: &str, origin: &str| {
            check(
                &p,
                Method::POST,
                "/api/agents/ada/messages",
                &[("host", host), ("origin", origin)],
            )
        };
        assert_eq!(ok("127.0.0.1:3000", "http://127.0.0.1:3000"), Ok(()));
        assert_eq!(ok("[::1]:3000", "http://[::1]:3000"), Ok(()));
        assert_eq!(ok("Localhost:3000", "http://localhost:3000"), Ok(()));
        // TLS at a proxy that forwards Host without a port.
        assert_eq!(ok("bot.example.org", "https://bot.example.org"), Ok(()));
        // A proxy that rewrites Host to its upstream: the listed name is ours.
        assert_eq!(ok("127.0.0.1:3000", "https://bot.example.org"), Ok(()));
        for (host, origin) in [
            ("127.0.0.1:3000", "http://evil.example:3000"),
            ("localhost:3000", "http://localhost:8080"),
            ("localhost:3000", "http://127.0.0.1:3000"),
            ("127.0.0.1:3000", "null"),
            ("127.0.0.1:3000", "file://"),
            ("127.0.0.1:3000", "http://127.0.0.1:3000@evil.example"),
        ] {
            assert!(
                matches!(ok(host, origin), Err(Refusal::CrossOrigin(_))),
                "{host} {origin}"
            );
        }
    }

    #[test]
    fn cross_site_fetches_are_refused_but_a_link_to_the_console_opens() {
        let p = policy(true, None);
        let site = |method: Method, mode: &str| {
            check(
                &p,
                method,
                "/",
                &[("sec-fetch-site", "cross-site"), ("sec-fetch-mode", mode)],
            )
        };
        assert_eq!(site(Method::GET, "navigate"), Ok(()));
        assert_eq!(site(Method::POST, "navigate"), Err(Refusal::CrossSite));
        assert_eq!(site(Method::GET, "cors"), Err(Refusal::CrossSite));
        assert_eq!(site(Method::GET, "no-cors"), Err(Refusal::CrossSite));
    }

    #[test]
    fn headers_are_added_without_overriding_a_handlers_choice() {
        let mut headers = HeaderMap::new();
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        secure(&mut headers);
        assert_eq!(headers[header::CACHE_CONTROL], "no-cache");
        assert_eq!(headers[header::X_CONTENT_TYPE_OPTIONS], "nosniff");
        assert_eq!(headers[header::X_FRAME_OPTIONS], "DENY");
        let mut empty = HeaderMap::new();
        secure(&mut empty);
        assert_eq!(empty[header::CACHE_CONTROL], "no-store");
    }

    #[test]
    fn an_echoed_header_is_bounded() {
        let long = HeaderValue::from_str(&"a".repeat(500)).unwrap();
        assert_eq!(shown(Some(&long)).len(), 100);
    }
}
