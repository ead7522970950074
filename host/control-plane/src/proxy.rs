//! A TCP proxy on loopback in front of the API server that can cut every connection through it
//! at once, as a load balancer restart or a network blip does: a client's watches end mid-stream
//! and its requests in flight fail, while the API server itself stays up. The bytes pass
//! through untouched (TLS included), so the client sees the real server's certificate.

use std::io;
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use crate::Error;

/// A running proxy; dropping it stops accepting and cuts what is open.
#[derive(Debug)]
pub struct CuttingProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
}

#[derive(Debug, Default)]
struct Shared {
    stopping: AtomicBool,
    /// Both ends of every open connection, to shut them down on a cut.
    open: Mutex<Vec<TcpStream>>,
    cuts: AtomicU64,
}

impl CuttingProxy {
    /// Listens on a free loopback port and forwards each connection to `upstream`.
    pub fn start(upstream: SocketAddr) -> Result<Self, Error> {
        let listener = TcpListener::bind("127.0.0.1:0").map_err(Error::NoPort)?;
        let addr = listener.local_addr().map_err(Error::NoPort)?;
        let shared = Arc::new(Shared::default());
        let acceptor = {
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name("cutting-proxy".into())
                .spawn(move || accept(&listener, upstream, &shared))
                .map_err(|e| Error::Start {
                    name: "proxy",
                    reason: e.to_string(),
                })?
        };
        Ok(CuttingProxy {
            addr,
            shared,
            acceptor: Some(acceptor),
        })
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Cuts every open connection; new ones are accepted as before. Returns how many ends were
    /// shut down.
    pub fn cut_all(&self) -> usize {
        let open = std::mem::take(&mut *lock(&self.shared.open));
        for stream in &open {
            let _ = stream.shutdown(Shutdown::Both);
        }
        self.shared.cuts.fetch_add(1, Ordering::Relaxed);
        open.len()
    }

    /// How many times [`cut_all`](Self::cut_all) ran.
    pub fn cuts(&self) -> u64 {
        self.shared.cuts.load(Ordering::Relaxed)
    }
}

impl Drop for CuttingProxy {
    fn drop(&mut self) {
        self.shared.stopping.store(true, Ordering::Relaxed);
        // Wakes the acceptor, which then sees the flag.
        let _ = TcpStream::connect(self.addr);
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
        self.cut_all();
    }
}

fn lock(open: &Mutex<Vec<TcpStream>>) -> std::sync::MutexGuard<'_, Vec<TcpStream>> {
    // A copying thread that panicked leaves the list as usable as before.
    open.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn accept(listener: &TcpListener, upstream: SocketAddr, shared: &Arc<Shared>) {
    for client in listener.incoming() {
        if shared.stopping.load(Ordering::Relaxed) {
            return;
        }
        let Ok(client) = client else { continue };
        // An upstream that refuses drops the client too: it sees a reset, as through a proxy.
        let Ok(server) = TcpStream::connect(upstream) else {
            continue;
        };
        if let Err(e) = forward(client, server, shared) {
            eprintln!("cutting proxy: a connection could not be set up: {e}");
        }
    }
}

/// Copies both ways on two threads, registering the ends so that a cut reaches them.
fn forward(client: TcpStream, server: TcpStream, shared: &Arc<Shared>) -> io::Result<()> {
    let ends = [client.try_clone()?, server.try_clone()?];
    lock(&shared.open).extend(ends);
    for (mut from, mut to) in [(client.try_clone()?, server.try_clone()?), (server, client)] {
        std::thread::Builder::new()
            .name("cutting-proxy-copy".into())
            .spawn(move || {
                let _ = io::copy(&mut from, &mut to);
                // One direction ended: end the other, as a closing proxy does.
                let _ = to.shutdown(Shutdown::Both);
                let _ = from.shutdown(Shutdown::Both);
            })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    /// An upstream that echoes each connection's bytes back.
    fn echo() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                std::thread::spawn(move || {
                    let mut reader = stream.try_clone().unwrap();
                    let mut writer = stream;
                    let _ = io::copy(&mut reader, &mut writer);
                });
            }
        });
        addr
    }

    #[test]
    fn bytes_pass_until_a_cut_ends_the_connection_and_new_ones_are_accepted() {
        let proxy = CuttingProxy::start(echo()).unwrap();
        let mut conn = TcpStream::connect(proxy.addr()).unwrap();
        conn.write_all(b"ping").unwrap();
        let mut buf = [0u8; 4];
        conn.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"ping");

        assert_eq!(proxy.cut_all(), 2, "both ends of the one connection");
        let mut rest = Vec::new();
        // The cut connection reads its end (or an error), never more bytes.
        let read = conn.read_to_end(&mut rest);
        assert!(read.is_err() || rest.is_empty(), "{read:?} {rest:?}");

        let mut again = TcpStream::connect(proxy.addr()).unwrap();
        again.write_all(b"pong").unwrap();
        again.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"pong");
        assert_eq!(proxy.cuts(), 1);
    }
}
