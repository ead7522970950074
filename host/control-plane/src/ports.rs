//! Ports on loopback for the components: a free one picked by the system, or one asked for and
//! checked free first, so a port that is taken is named as such instead of showing as a
//! component that exits at start.

use std::io::{Read as _, Write as _};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::time::Duration;

use crate::Error;

/// A port for `name`: `asked` if it is free, else a free one the system picks.
pub fn port(name: &'static str, asked: Option<u16>) -> Result<u16, Error> {
    match asked {
        Some(port) => TcpListener::bind((Ipv4Addr::LOCALHOST, port))
            .map(|_| port)
            .map_err(|_| Error::PortTaken { name, port }),
        None => TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .and_then(|listener| listener.local_addr())
            .map(|addr| addr.port())
            .map_err(Error::NoPort),
    }
}

/// Whether a plain-HTTP GET of `path` on loopback `port` answers 200 with `expect` in its body.
pub fn http_get_ok(port: u16, path: &str, expect: &str) -> bool {
    let Ok(mut stream) = TcpStream::connect((Ipv4Addr::LOCALHOST, port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    let request = format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
    if stream.write_all(request.as_bytes()).is_err() {
        return false;
    }
    let mut answer = Vec::new();
    // A bounded read: a health answer is a few hundred bytes.
    let _ = stream.take(64 * 1024).read_to_end(&mut answer);
    let answer = String::from_utf8_lossy(&answer);
    answer.starts_with("HTTP/1.") && answer.contains(" 200 ") && answer.contains(expect)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_taken_port_is_named_and_a_free_one_is_given() {
        let held = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let taken = held.local_addr().unwrap().port();
        let e = port("etcd", Some(taken)).unwrap_err().to_string();
        assert_eq!(e, format!("etcd: port {taken} on 127.0.0.1 is taken"));
        let free = port("etcd", None).unwrap();
        assert_ne!(free, 0);
    }

    #[test]
    fn a_listener_that_never_answers_is_not_ok() {
        let silent = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let port = silent.local_addr().unwrap().port();
        assert!(!http_get_ok(port, "/health", "true"));
    }
}
