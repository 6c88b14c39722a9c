//! Outbound fetches of URLs that a stranger chose: chat attachments, Farcaster embeds.
//!
//! This module owns every such fetch, so that a message cannot make troupe reach what only
//! troupe can reach (its own API, the cloud metadata service, the operator's LAN). A URL is
//! fetched only when:
//! - its scheme is `http` or `https`;
//! - every address it is fetched from is public (see [`blocked`]) or allowed by an entry of
//!   `TROUPE_FETCH_ALLOW`. Names are resolved here, checked, and the connection is pinned to
//!   the checked addresses, so a second DNS answer cannot point it elsewhere (no rebinding);
//! - each redirect (at most `TROUPE_FETCH_MAX_REDIRECTS`) passes the same checks again;
//! - the whole fetch, redirects included, ends within `TROUPE_FETCH_TIMEOUT_SECS`, and the
//!   body, streamed, stays under the caller's cap.
//!
//! Proxies from the environment are not used: a proxy would connect wherever it is told,
//! after the checks. Errors and log lines name the host only, never the URL: platform file
//! URLs carry tokens in their path or query.
//!
//! It must not fetch operator-configured URLs (model APIs, platform APIs): those go through
//! their own clients.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use reqwest::Url;
use reqwest::header::{CONTENT_LENGTH, LOCATION};

/// Why a URL was not fetched. The text names the host, never the whole URL.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error("the link is not a valid URL")]
    BadUrl,
    #[error("the link's scheme `{0}` is not fetched (only http and https are)")]
    Scheme(String),
    #[error("the link has no host")]
    NoHost,
    #[error(
        "refused to fetch from {host}: {addr} is a {kind} address (list trusted internal \
         sources in TROUPE_FETCH_ALLOW)"
    )]
    Blocked {
        host: String,
        addr: IpAddr,
        kind: &'static str,
    },
    #[error("the name {host} could not be resolved ({reason})")]
    Resolve { host: String, reason: String },
    #[error("the name {host} resolves to no address")]
    NoAddress { host: String },
    #[error("more than {0} redirects (TROUPE_FETCH_MAX_REDIRECTS)")]
    TooManyRedirects(u32),
    #[error("{host} answered a redirect without a usable Location")]
    BadRedirect { host: String },
    #[error("{host} answered {status}")]
    Status {
        host: String,
        status: reqwest::StatusCode,
    },
    #[error("it is over {cap} bytes (for attachments: TROUPE_KNOWLEDGE_MAX_ATTACHMENT_BYTES)")]
    TooLarge { cap: usize },
    #[error("fetching from {host} took longer than {timeout:?} (TROUPE_FETCH_TIMEOUT_SECS)")]
    Timeout { host: String, timeout: Duration },
    #[error("fetching from {host} failed ({source})")]
    Transport {
        host: String,
        #[source]
        source: reqwest::Error,
    },
}

/// One entry of `TROUPE_FETCH_ALLOW`: a host name, an address or a network, each with an
/// optional port (`files.internal`, `files.internal:8080`, `10.1.2.3`, `10.1.2.3:9000`,
/// `[fd00::1]:80`, `10.0.0.0/8`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AllowRule {
    /// Every address this name resolves to is allowed (for URLs that name it).
    Host { name: String, port: Option<u16> },
    /// Addresses in `addr/prefix` are allowed, whatever name led to them.
    Net {
        addr: IpAddr,
        prefix: u8,
        port: Option<u16>,
    },
}

impl std::str::FromStr for AllowRule {
    type Err = String;

    fn from_str(raw: &str) -> Result<Self, String> {
        let s = raw.trim();
        if s.is_empty() {
            return Err("an entry is empty".into());
        }
        if s.contains("://") {
            return Err(format!(
                "`{s}` is not a host, host:port or CIDR (no scheme or path)"
            ));
        }
        let port = |p: &str| {
            p.parse::<u16>()
                .map_err(|_| format!("`{s}`: `{p}` is not a port"))
        };
        // A network: `addr/prefix`.
        if let Some((addr, prefix)) = s.split_once('/') {
            let addr: IpAddr = addr
                .parse()
                .map_err(|_| format!("`{s}`: `{addr}` is not an IP address"))?;
            let max = if addr.is_ipv4() { 32 } else { 128 };
            let prefix: u8 = prefix
                .parse()
                .ok()
                .filter(|p| *p <= max)
                .ok_or_else(|| format!("`{s}`: the prefix must be 0 to {max}"))?;
            return Ok(AllowRule::Net {
                addr,
                prefix,
                port: None,
            });
        }
        // `[v6]` or `[v6]:port`.
        if let Some(rest) = s.strip_prefix('[') {
            let (addr, tail) = rest
                .split_once(']')
                .ok_or_else(|| format!("`{s}`: a `[` without its `]`"))?;
            let addr: Ipv6Addr = addr
                .parse()
                .map_err(|_| format!("`{s}`: `{addr}` is not an IPv6 address"))?;
            let port = match tail {
                "" => None,
                t => {
                    Some(port(t.strip_prefix(':').ok_or_else(|| {
                        format!("`{s}`: expected `:port` after `]`")
                    })?)?)
                }
            };
            return Ok(AllowRule::Net {
                addr: IpAddr::V6(addr),
                prefix: 128,
                port,
            });
        }
        if let Ok(addr) = s.parse::<IpAddr>() {
            let prefix = if addr.is_ipv4() { 32 } else { 128 };
            return Ok(AllowRule::Net {
                addr,
                prefix,
                port: None,
            });
        }
        let (host, port) = match s.rsplit_once(':') {
            Some((h, p)) => (h, Some(port(p)?)),
            None => (s, None),
        };
        if let Ok(addr) = host.parse::<Ipv4Addr>() {
            return Ok(AllowRule::Net {
                addr: IpAddr::V4(addr),
                prefix: 32,
                port,
            });
        }
        let name = host.trim_end_matches('.').to_ascii_lowercase();
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_'))
        {
            return Err(format!("`{s}` is not a host name"));
        }
        Ok(AllowRule::Host { name, port })
    }
}

impl AllowRule {
    fn allows_name(&self, host: &str, at: u16) -> bool {
        matches!(self, AllowRule::Host { name, port } if name == host && port.is_none_or(|p| p == at))
    }

    fn allows_addr(&self, ip: IpAddr, at: u16) -> bool {
        let AllowRule::Net { addr, prefix, port } = self else {
            return false;
        };
        if port.is_some_and(|p| p != at) {
            return false;
        }
        let ip = canonical(ip);
        match (canonical(*addr), ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(*prefix)).unwrap_or(0);
                u32::from(net) & mask == u32::from(ip) & mask
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let mask = u128::MAX.checked_shl(128 - u32::from(*prefix)).unwrap_or(0);
                u128::from(net) & mask == u128::from(ip) & mask
            }
            _ => false,
        }
    }
}

/// Parses `TROUPE_FETCH_ALLOW`: entries separated by commas or white space.
pub fn parse_allow(raw: &str) -> Result<Vec<AllowRule>, String> {
    raw.split(|c: char| c == ',' || c.is_whitespace())
        .filter(|s| !s.is_empty())
        .map(str::parse)
        .collect()
}

/// An IPv4-mapped (`::ffff:a.b.c.d`) or IPv4-translated (`::ffff:0:a.b.c.d`) IPv6 address
/// is the IPv4 address it carries.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match carried_v4(v6) {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        },
        v4 => v4,
    }
}

/// The IPv4 address an IPv6 address stands for on the host's own stack or a stateless
/// translator in front of it: IPv4-mapped `::ffff:0:0/96` (RFC 4291), and IPv4-translated
/// `::ffff:0:0:0/96` (SIIT, RFC 2765, finding 12 of issue 30), which a translator on the
/// path delivers to that IPv4 address as surely as a mapped one.
fn carried_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    match ip.segments() {
        [0, 0, 0, 0, 0xffff, 0, hi, lo] => {
            Some(Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo)))
        }
        _ => ip.to_ipv4_mapped(),
    }
}

/// Why an address is not fetched from without an allow entry, or `None` for a public one.
/// Loopback, private (RFC 1918, unique local), shared (CGNAT), link-local (where the cloud
/// metadata services live: 169.254.169.254, fd00:ec2::254), multicast, unspecified,
/// broadcast, reserved, documentation and benchmarking ranges; IPv6 forms that carry an
/// IPv4 address (mapped, translated, compatible, well-known NAT64, 6to4) are judged by that
/// address. The local-use NAT64 prefix `64:ff9b:1::/48` (RFC 8215) is refused whole: its
/// translator is the operator's own, and where the IPv4 address sits in it depends on a
/// prefix length only that network knows (RFC 6052), so what it reaches cannot be read
/// from the address; an operator who uses one allows it with `TROUPE_FETCH_ALLOW`.
pub fn blocked(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => blocked_v4(v4),
        IpAddr::V6(v6) => blocked_v6(v6),
    }
}

fn blocked_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, c, _] = ip.octets();
    Some(match (a, b, c) {
        _ if ip.is_unspecified() => "unspecified",
        _ if ip.is_broadcast() => "broadcast",
        (0, _, _) => "\"this network\" (0.0.0.0/8)",
        (127, _, _) => "loopback",
        (10, _, _) | (172, 16..=31, _) | (192, 168, _) => "private",
        (100, 64..=127, _) => "shared (CGNAT)",
        (169, 254, _) => "link-local (cloud metadata)",
        (192, 0, 0) => "IETF protocol",
        (192, 0, 2) | (198, 51, 100) | (203, 0, 113) => "documentation",
        (198, 18..=19, _) => "benchmarking",
        (224..=239, _, _) => "multicast",
        (240..=255, _, _) => "reserved",
        _ => return None,
    })
}

fn blocked_v6(ip: Ipv6Addr) -> Option<&'static str> {
    if let Some(v4) = carried_v4(ip) {
        return blocked_v4(v4);
    }
    let seg = ip.segments();
    let embedded_v4 = |hi: u16, lo: u16| Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo));
    Some(match seg {
        _ if ip.is_unspecified() => "unspecified",
        _ if ip.is_loopback() => "loopback",
        [0, 0, 0, 0, 0, 0, hi, lo] => return blocked_v4(embedded_v4(hi, lo)).or(Some("reserved")),
        [0x64, 0xff9b, 0, 0, 0, 0, hi, lo] => return blocked_v4(embedded_v4(hi, lo)),
        [0x64, 0xff9b, 1, ..] => "local-use NAT64 (RFC 8215)",
        [0x2002, hi, lo, ..] => return blocked_v4(embedded_v4(hi, lo)),
        [s, ..] if s & 0xfe00 == 0xfc00 => "unique local (private)",
        [s, ..] if s & 0xffc0 == 0xfe80 => "link-local",
        [s, ..] if s & 0xffc0 == 0xfec0 => "site-local",
        [s, ..] if s & 0xff00 == 0xff00 => "multicast",
        [0x2001, 0xdb8, ..] => "documentation",
        [0x100, 0, 0, 0, ..] => "discard-only",
        _ => return None,
    })
}

/// What troupe fetches when a message links or attaches a file. Read from the environment
/// by `config` (the only module that reads it); defined here, below it, because it is this
/// module's policy.
#[derive(Debug, Clone)]
pub struct FetchSettings {
    /// `TROUPE_FETCH_ALLOW`, empty by default: internal sources that may be fetched although
    /// they are loopback, private or link-local. Entries, separated by commas: `host`,
    /// `host:port`, an address, `address:port` (`[v6]:port`) or a CIDR network.
    pub allow: Vec<AllowRule>,
    /// `TROUPE_FETCH_TIMEOUT_SECS`, default 15: one fetch, redirects included.
    pub timeout: Duration,
    /// `TROUPE_FETCH_MAX_REDIRECTS`, default 3: redirects followed, each checked again.
    pub max_redirects: u32,
}

impl Default for FetchSettings {
    fn default() -> Self {
        FetchSettings {
            allow: Vec::new(),
            timeout: Duration::from_secs(15),
            max_redirects: 3,
        }
    }
}

/// The outbound fetch policy: cheap to clone.
#[derive(Clone)]
pub struct Fetcher {
    settings: Arc<FetchSettings>,
}

impl Fetcher {
    pub fn new(settings: &FetchSettings) -> Self {
        Fetcher {
            settings: Arc::new(settings.clone()),
        }
    }

    /// Fetches `url` (following at most the configured number of redirects, each checked)
    /// and returns its body, refused once it would pass `cap` bytes.
    pub async fn fetch_capped(&self, url: &str, cap: usize) -> Result<Vec<u8>, FetchError> {
        let url = Url::parse(url).map_err(|_| FetchError::BadUrl)?;
        let timeout = self.settings.timeout;
        let host = url.host_str().unwrap_or_default().to_string();
        match tokio::time::timeout(timeout, self.follow(url, cap)).await {
            Ok(result) => result,
            Err(_) => Err(FetchError::Timeout { host, timeout }),
        }
    }

    async fn follow(&self, mut url: Url, cap: usize) -> Result<Vec<u8>, FetchError> {
        let mut redirects = 0;
        loop {
            let (host, pinned) = self.check(&url).await?;
            let mut client = troupe_connectors::tls::http_client()
                .redirect(reqwest::redirect::Policy::none())
                .no_proxy()
                .user_agent(concat!("troupe/", env!("CARGO_PKG_VERSION")));
            if let Some((name, addrs)) = &pinned {
                client = client.resolve_to_addrs(name, addrs);
            }
            let client = client.build().map_err(|source| FetchError::Transport {
                host: host.clone(),
                source,
            })?;
            let transport = |source: reqwest::Error| FetchError::Transport {
                host: host.clone(),
                source: source.without_url(),
            };
            let mut response = client.get(url.clone()).send().await.map_err(transport)?;
            let status = response.status();
            if status.is_redirection() {
                redirects += 1;
                if redirects > self.settings.max_redirects {
                    return Err(FetchError::TooManyRedirects(self.settings.max_redirects));
                }
                let next = response
                    .headers()
                    .get(LOCATION)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|location| url.join(location).ok())
                    .ok_or_else(|| FetchError::BadRedirect { host: host.clone() })?;
                tracing::debug!(from = %host, to = next.host_str().unwrap_or(""), "following a redirect");
                url = next;
                continue;
            }
            if !status.is_success() {
                return Err(FetchError::Status { host, status });
            }
            let declared = response
                .headers()
                .get(CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse::<u64>().ok());
            if declared.is_some_and(|n| n > cap as u64) {
                return Err(FetchError::TooLarge { cap });
            }
            let mut bytes = Vec::new();
            while let Some(piece) = response.chunk().await.map_err(transport)? {
                if bytes.len() + piece.len() > cap {
                    return Err(FetchError::TooLarge { cap });
                }
                bytes.extend_from_slice(&piece);
            }
            return Ok(bytes);
        }
    }

    /// Checks one hop. Returns the host for messages and, for a name, the checked addresses
    /// the connection is pinned to.
    async fn check(
        &self,
        url: &Url,
    ) -> Result<(String, Option<(String, Vec<SocketAddr>)>), FetchError> {
        if !matches!(url.scheme(), "http" | "https") {
            return Err(FetchError::Scheme(url.scheme().to_string()));
        }
        let port = url.port_or_known_default().ok_or(FetchError::NoHost)?;
        let allow = &self.settings.allow;
        let raw = url.host_str().ok_or(FetchError::NoHost)?;
        // The URL parser has already normalised the host: IPv4 in any spelling
        // (`2130706433`, `0x7f.1`) is dotted decimal, IPv6 is bracketed.
        if let Some(v6) = raw.strip_prefix('[').and_then(|r| r.strip_suffix(']')) {
            let ip: Ipv6Addr = v6.parse().map_err(|_| FetchError::BadUrl)?;
            return self
                .check_addr(raw, IpAddr::V6(ip), port)
                .map(|()| (raw.to_string(), None));
        }
        if let Ok(ip) = raw.parse::<Ipv4Addr>() {
            return self
                .check_addr(raw, IpAddr::V4(ip), port)
                .map(|()| (raw.to_string(), None));
        }
        let host = raw.trim_end_matches('.').to_ascii_lowercase();
        let by_name = allow.iter().any(|r| r.allows_name(&host, port));
        let resolved: Vec<SocketAddr> = tokio::net::lookup_host((raw, port))
            .await
            .map_err(|e| FetchError::Resolve {
                host: host.clone(),
                reason: e.to_string(),
            })?
            .collect();
        let mut first_refusal = None;
        let mut pinned = Vec::new();
        for addr in resolved {
            // An operator who allows a name trusts whatever it resolves to.
            if by_name {
                pinned.push(addr);
                continue;
            }
            match self.check_addr(&host, addr.ip(), port) {
                Ok(()) => pinned.push(addr),
                Err(e) => {
                    first_refusal.get_or_insert(e);
                }
            }
        }
        if pinned.is_empty() {
            return Err(first_refusal.unwrap_or(FetchError::NoAddress { host }));
        }
        Ok((host, Some((raw.to_string(), pinned))))
    }

    fn check_addr(&self, host: &str, ip: IpAddr, port: u16) -> Result<(), FetchError> {
        let Some(kind) = blocked(ip) else {
            return Ok(());
        };
        if self.settings.allow.iter().any(|r| r.allows_addr(ip, port)) {
            return Ok(());
        }
        Err(FetchError::Blocked {
            host: host.to_string(),
            addr: ip,
            kind,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn internal_addresses_are_blocked() {
        for (addr, kind) in [
            ("127.0.0.1", "loopback"),
            ("127.8.9.10", "loopback"),
            ("10.1.2.3", "private"),
            ("172.16.0.1", "private"),
            ("172.31.255.255", "private"),
            ("192.168.1.1", "private"),
            ("100.64.0.1", "shared (CGNAT)"),
            ("100.100.100.200", "shared (CGNAT)"),
            ("169.254.169.254", "link-local (cloud metadata)"),
            ("0.0.0.0", "unspecified"),
            ("0.1.2.3", "\"this network\" (0.0.0.0/8)"),
            ("255.255.255.255", "broadcast"),
            ("224.0.0.1", "multicast"),
            ("240.0.0.1", "reserved"),
            ("192.0.2.7", "documentation"),
            ("198.18.0.1", "benchmarking"),
            ("::1", "loopback"),
            ("::", "unspecified"),
            ("::ffff:127.0.0.1", "loopback"),
            ("::ffff:169.254.169.254", "link-local (cloud metadata)"),
            ("::127.0.0.1", "loopback"),
            ("64:ff9b::a00:1", "private"),
            ("2002:7f00:1::", "loopback"),
            ("fd00:ec2::254", "unique local (private)"),
            ("fc00::1", "unique local (private)"),
            ("fe80::1", "link-local"),
            ("ff02::1", "multicast"),
            ("2001:db8::1", "documentation"),
        ] {
            assert_eq!(blocked(ip(addr)), Some(kind), "{addr}");
        }
    }

    /// Issue 30, finding 12: the IPv4-translated form (SIIT, RFC 2765) is judged by the
    /// IPv4 address it carries, like the mapped form; the local-use NAT64 prefix (RFC 8215)
    /// is refused whole, whatever it embeds.
    #[test]
    fn translated_and_local_nat64_addresses_are_blocked() {
        for (addr, kind) in [
            ("::ffff:0:127.0.0.1", "loopback"),
            ("::ffff:0:7f00:1", "loopback"),
            ("::ffff:0:169.254.169.254", "link-local (cloud metadata)"),
            ("::ffff:0:10.0.0.1", "private"),
            ("::ffff:0:0.0.0.0", "unspecified"),
            ("64:ff9b:1::7f00:1", "local-use NAT64 (RFC 8215)"),
            ("64:ff9b:1::808:808", "local-use NAT64 (RFC 8215)"),
            ("64:ff9b:1:a9fe:a9:fe00::", "local-use NAT64 (RFC 8215)"),
            (
                "64:ff9b:1:ffff:ffff:ffff:ffff:ffff",
                "local-use NAT64 (RFC 8215)",
            ),
        ] {
            assert_eq!(blocked(ip(addr)), Some(kind), "{addr}");
        }
        // A public IPv4 address behind the translated form is as public as itself; the
        // well-known NAT64 prefix next to the local one is still judged by what it embeds.
        assert_eq!(blocked(ip("::ffff:0:8.8.8.8")), None);
        assert_eq!(blocked(ip("64:ff9b::808:808")), None);
        assert_eq!(blocked(ip("64:ff9b:2::808:808")), None);
        // An allow entry for the IPv4 address covers its translated form, as it covers the
        // mapped one.
        assert_eq!(canonical(ip("::ffff:0:10.0.0.1")), ip("10.0.0.1"));
    }

    #[test]
    fn public_addresses_pass() {
        for addr in [
            "1.1.1.1",
            "8.8.8.8",
            "172.32.0.1",
            "100.128.0.1",
            "169.253.1.1",
            "2606:4700:4700::1111",
            "::ffff:8.8.8.8",
            "2002:808:808::",
        ] {
            assert_eq!(blocked(ip(addr)), None, "{addr}");
        }
    }

    #[test]
    fn allow_entries_parse() {
        let rules = parse_allow(
            "files.internal, files.internal:8080 10.0.0.0/8,127.0.0.1:9000,[::1]:80,fd00::/8,192.168.1.5",
        )
        .unwrap();
        assert_eq!(
            rules,
            vec![
                AllowRule::Host {
                    name: "files.internal".into(),
                    port: None
                },
                AllowRule::Host {
                    name: "files.internal".into(),
                    port: Some(8080)
                },
                AllowRule::Net {
                    addr: ip("10.0.0.0"),
                    prefix: 8,
                    port: None
                },
                AllowRule::Net {
                    addr: ip("127.0.0.1"),
                    prefix: 32,
                    port: Some(9000)
                },
                AllowRule::Net {
                    addr: ip("::1"),
                    prefix: 128,
                    port: Some(80)
                },
                AllowRule::Net {
                    addr: ip("fd00::"),
                    prefix: 8,
                    port: None
                },
                AllowRule::Net {
                    addr: ip("192.168.1.5"),
                    prefix: 32,
                    port: None
                },
            ]
        );
        assert!(parse_allow("").unwrap().is_empty());
        for bad in [
            "http://x",
            "10.0.0.0/33",
            "host:port",
            "[::1",
            "a b/c",
            "x:99999",
            "bad$name",
        ] {
            assert!(parse_allow(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn allow_entries_match_addresses_ports_and_names() {
        let rules = parse_allow("10.0.0.0/8,127.0.0.1:9000,files.internal:8080").unwrap();
        let allows = |addr: &str, port| rules.iter().any(|r| r.allows_addr(ip(addr), port));
        assert!(allows("10.200.3.4", 80));
        assert!(
            allows("::ffff:10.0.0.1", 443),
            "a mapped address is its IPv4"
        );
        assert!(!allows("11.0.0.1", 80));
        assert!(allows("127.0.0.1", 9000));
        assert!(
            !allows("127.0.0.1", 9001),
            "another port of an allowed address"
        );
        assert!(!allows("127.0.0.2", 9000));
        let by_name = |name: &str, port| rules.iter().any(|r| r.allows_name(name, port));
        assert!(by_name("files.internal", 8080));
        assert!(!by_name("files.internal", 80));
        assert!(!by_name("other.internal", 8080));
        let everything = parse_allow("0.0.0.0/0").unwrap();
        assert!(everything[0].allows_addr(ip("169.254.169.254"), 80));
    }

    fn fetcher(allow: &str) -> Fetcher {
        Fetcher::new(&FetchSettings {
            allow: parse_allow(allow).unwrap(),
            ..FetchSettings::default()
        })
    }

    #[tokio::test]
    async fn urls_are_checked_before_any_connection() {
        let f = fetcher("");
        for (url, want) in [
            ("ftp://example.com/x", "scheme"),
            ("file:///etc/passwd", "scheme"),
            ("http://127.0.0.1:1/x", "loopback"),
            ("http://2130706433/x", "loopback"),
            ("http://[::ffff:7f00:1]/x", "loopback"),
            ("http://169.254.169.254/latest/meta-data/", "metadata"),
            ("http://localhost:1/x", "loopback"),
            ("not a url", "not a valid URL"),
        ] {
            let err = f.fetch_capped(url, 100).await.unwrap_err().to_string();
            assert!(err.contains(want), "{url}: {err}");
            assert!(!err.contains("/x"), "the error shows the URL's path: {err}");
        }
    }

    #[tokio::test]
    async fn allowed_sources_are_fetched_and_redirects_rechecked() {
        use axum::routing::get;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let files = axum::Router::new()
            .route("/a.txt", get(|| async { "the body" }))
            .route("/big.txt", get(|| async { "x".repeat(1000) }))
            .route(
                "/loop",
                get(|| async { axum::response::Redirect::temporary("/loop") }),
            )
            .route(
                "/to-metadata",
                get(|| async {
                    axum::response::Redirect::temporary("http://169.254.169.254/latest/")
                }),
            )
            .route(
                "/to-a",
                get(|| async { axum::response::Redirect::temporary("/a.txt") }),
            );
        tokio::spawn(async move { axum::serve(listener, files).await });
        let base = format!("http://127.0.0.1:{port}");

        let refused = fetcher("")
            .fetch_capped(&format!("{base}/a.txt"), 100)
            .await;
        assert!(
            matches!(refused, Err(FetchError::Blocked { .. })),
            "{refused:?}"
        );
        let other_port = fetcher(&format!("127.0.0.1:{}", port.wrapping_add(1)))
            .fetch_capped(&format!("{base}/a.txt"), 100)
            .await;
        assert!(matches!(other_port, Err(FetchError::Blocked { .. })));

        let f = fetcher(&format!("127.0.0.1:{port}"));
        assert_eq!(
            f.fetch_capped(&format!("{base}/a.txt"), 100).await.unwrap(),
            b"the body"
        );
        assert_eq!(
            f.fetch_capped(&format!("{base}/to-a"), 100).await.unwrap(),
            b"the body"
        );
        let too_big = f.fetch_capped(&format!("{base}/big.txt"), 100).await;
        assert!(matches!(too_big, Err(FetchError::TooLarge { cap: 100 })));
        let looped = f.fetch_capped(&format!("{base}/loop"), 100).await;
        assert!(
            matches!(looped, Err(FetchError::TooManyRedirects(3))),
            "{looped:?}"
        );
        let metadata = f.fetch_capped(&format!("{base}/to-metadata"), 100).await;
        assert!(
            matches!(
                metadata,
                Err(FetchError::Blocked {
                    kind: "link-local (cloud metadata)",
                    ..
                })
            ),
            "{metadata:?}"
        );
        // A name allowed by name may resolve to loopback.
        let by_name = fetcher(&format!("localhost:{port}"))
            .fetch_capped(&format!("http://localhost:{port}/a.txt"), 100)
            .await
            .unwrap();
        assert_eq!(by_name, b"the body");
    }
}
