//! Peer addresses as members give them (`HOST:PORT`): checked where they
//! enter (the configuration's `[peers]`, `member add-learner`), so that a
//! mistyped one is refused at once instead of failing every dial later.

/// Whether `addr` is `HOST:PORT`: no scheme, a host name or IP address
/// (IPv6 in brackets), a non-zero port. The error says what is wrong.
pub fn check_peer_address(addr: &str) -> Result<(), String> {
    if addr.contains("://") {
        return Err("give the address without a scheme (TLS comes from [tls])".into());
    }
    let (host, port) = addr.rsplit_once(':').ok_or("the port is missing")?;
    if !port.parse::<u16>().is_ok_and(|p| p != 0) {
        return Err(format!("{port:?} is not a port"));
    }
    let host = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
    let valid_name = !host.is_empty()
        && host.split('.').all(|label| {
            !label.is_empty() && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') && !label.starts_with('-')
        });
    if host.parse::<std::net::IpAddr>().is_ok() || valid_name {
        Ok(())
    } else {
        Err(format!("{host:?} is not a host name or IP address"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_host_and_port_pass() {
        for good in ["127.0.0.1:7480", "node-2.example:7480", "[::1]:7480", "localhost:1"] {
            assert_eq!(check_peer_address(good), Ok(()), "{good}");
        }
        for (bad, why) in [
            ("127.0.0.1", "the port is missing"),
            ("http://127.0.0.1:7480", "without a scheme"),
            ("127.0.0.1:0", "is not a port"),
            ("127.0.0.1:99999", "is not a port"),
            ("bad host:7480", "is not a host name"),
            (":7480", "is not a host name"),
        ] {
            let err = check_peer_address(bad).unwrap_err();
            assert!(err.contains(why), "{bad}: {err}");
        }
    }
}
