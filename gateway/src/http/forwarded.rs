//! The caller's address behind reverse proxies (issue 30, finding 7): `X-Forwarded-For` and
//! `Forwarded` (RFC 7239), believed only from `TROUPE_TRUSTED_PROXIES`.
//!
//! Anyone can send these headers, so from a peer that is not a trusted proxy they are
//! ignored and the peer's own address is the caller's. From a trusted proxy, the hops are
//! read from the right (the one the nearest proxy appended) and trusted proxies are
//! skipped: the first hop that is not one is the caller, whatever a client wrote to the
//! left of it. A hop that cannot be read (`unknown`, an obfuscated `_name`, garbage) stops
//! the walk at the proxy that reported it, so every such caller shares that proxy's budget
//! rather than choosing their own. This module owns only that rule; what is counted per
//! caller is `limits::ApiBudget`'s.

use axum::http::HeaderMap;
use std::net::IpAddr;

/// The most hops read from the headers: a proxy chain is a few hops long, and a longer
/// list is a client padding it.
const MAX_HOPS: usize = 32;

/// The caller's address: `peer` itself unless it is a trusted proxy, else the rightmost
/// hop of `Forwarded` (or, without it, `X-Forwarded-For`) that is not a trusted proxy.
pub fn client_ip(peer: IpAddr, headers: &HeaderMap, trusted: &[ipnet::IpNet]) -> IpAddr {
    let is_trusted = |ip: IpAddr| trusted.iter().any(|net| net.contains(&canonical(ip)));
    if !is_trusted(peer) {
        return peer;
    }
    let hops = if headers.contains_key("forwarded") {
        hops(headers, "forwarded", forwarded_for)
    } else {
        hops(headers, "x-forwarded-for", |e| parse_node(e.trim()))
    };
    let mut caller = peer;
    for hop in hops.into_iter().rev().take(MAX_HOPS) {
        match hop {
            Some(ip) if is_trusted(ip) => caller = ip,
            Some(ip) => return ip,
            None => return caller,
        }
    }
    caller
}

/// Every element of every `name` header, in order, each read by `read`.
fn hops(headers: &HeaderMap, name: &str, read: fn(&str) -> Option<IpAddr>) -> Vec<Option<IpAddr>> {
    headers
        .get_all(name)
        .iter()
        .flat_map(|value| match value.to_str() {
            Ok(text) => text.split(',').map(read).collect::<Vec<_>>(),
            Err(_) => vec![None],
        })
        .collect()
}

/// The `for=` of one `Forwarded` element (`for=192.0.2.60;proto=http;by=203.0.113.43`).
fn forwarded_for(element: &str) -> Option<IpAddr> {
    element.split(';').find_map(|pair| {
        let (key, value) = pair.trim().split_once('=')?;
        key.trim()
            .eq_ignore_ascii_case("for")
            .then(|| parse_node(value.trim().trim_matches('"')))?
    })
}

/// A node: `192.0.2.60`, `192.0.2.60:4711`, `2001:db8::1`, `[2001:db8::1]:4711`.
fn parse_node(node: &str) -> Option<IpAddr> {
    if let Ok(ip) = node.parse::<IpAddr>() {
        return Some(ip);
    }
    if let Some(rest) = node.strip_prefix('[') {
        return rest.split_once(']')?.0.parse().ok();
    }
    let (host, _port) = node.rsplit_once(':')?;
    host.parse::<std::net::Ipv4Addr>().ok().map(IpAddr::V4)
}

/// An IPv4-mapped IPv6 address is the IPv4 address it maps (a dual-stack listener's peers).
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, v.parse().unwrap());
        }
        h
    }

    fn nets(list: &[&str]) -> Vec<ipnet::IpNet> {
        list.iter().map(|n| n.parse().unwrap()).collect()
    }

    #[test]
    fn an_untrusted_peer_is_the_caller_whatever_it_writes() {
        let h = headers(&[("x-forwarded-for", "198.51.100.7")]);
        assert_eq!(client_ip(ip("192.0.2.1"), &h, &[]), ip("192.0.2.1"));
        let trusted = nets(&["10.0.0.0/8"]);
        assert_eq!(client_ip(ip("192.0.2.1"), &h, &trusted), ip("192.0.2.1"));
    }

    #[test]
    fn behind_trusted_proxies_the_rightmost_untrusted_hop_is_the_caller() {
        let trusted = nets(&["10.0.0.0/8", "127.0.0.1/32"]);
        // A client that writes its own X-Forwarded-For gets it prepended to, not believed.
        let h = headers(&[("x-forwarded-for", "203.0.113.9, 198.51.100.7, 10.1.1.1")]);
        assert_eq!(client_ip(ip("127.0.0.1"), &h, &trusted), ip("198.51.100.7"));
        // Two header lines are one list.
        let h = headers(&[
            ("x-forwarded-for", "203.0.113.9"),
            ("x-forwarded-for", "198.51.100.8"),
        ]);
        assert_eq!(client_ip(ip("10.0.0.2"), &h, &trusted), ip("198.51.100.8"));
        // Only proxies: the leftmost of them.
        let h = headers(&[("x-forwarded-for", "10.9.9.9, 10.1.1.1")]);
        assert_eq!(client_ip(ip("10.0.0.2"), &h, &trusted), ip("10.9.9.9"));
        // No header: the proxy itself.
        assert_eq!(
            client_ip(ip("10.0.0.2"), &HeaderMap::new(), &trusted),
            ip("10.0.0.2")
        );
        // An IPv4-mapped peer is its IPv4 address.
        let h = headers(&[("x-forwarded-for", "198.51.100.7")]);
        assert_eq!(
            client_ip(ip("::ffff:127.0.0.1"), &h, &trusted),
            ip("198.51.100.7")
        );
    }

    #[test]
    fn forwarded_is_read_per_rfc_7239_and_wins_over_x_forwarded_for() {
        let trusted = nets(&["10.0.0.0/8"]);
        let h = headers(&[
            (
                "forwarded",
                "for=203.0.113.9, for=\"[2001:db8::17]:4711\";proto=https, for=10.2.2.2:80",
            ),
            ("x-forwarded-for", "198.51.100.7"),
        ]);
        assert_eq!(client_ip(ip("10.0.0.2"), &h, &trusted), ip("2001:db8::17"));
        // An unreadable hop stops at the proxy that reported it.
        let h = headers(&[("forwarded", "for=198.51.100.7, for=unknown, for=10.2.2.2")]);
        assert_eq!(client_ip(ip("10.0.0.2"), &h, &trusted), ip("10.2.2.2"));
        let h = headers(&[("x-forwarded-for", "198.51.100.7, not-an-ip")]);
        assert_eq!(client_ip(ip("10.0.0.2"), &h, &trusted), ip("10.0.0.2"));
        assert_eq!(parse_node("192.0.2.60:4711"), Some(ip("192.0.2.60")));
        assert_eq!(parse_node("_hidden"), None);
    }
}
