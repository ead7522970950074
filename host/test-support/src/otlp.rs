//! An OTLP/HTTP receiver on loopback for the trace tests and the scale bench: it answers every
//! `POST /v1/traces` with an empty success and keeps each request's body (an
//! `ExportTraceServiceRequest`, decoded by whoever reads it) or, for a bench that only needs a
//! collector that keeps up, counts it. A small HTTP/1.1 server of its own, so that no
//! collector is needed and nothing here shares code with the exporter it receives from.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// What the receiver got.
#[derive(Default)]
struct Received {
    bodies: Mutex<Vec<Vec<u8>>>,
    requests: AtomicU64,
    bytes: AtomicU64,
}

/// A running receiver; it serves until the process ends.
#[derive(Clone)]
pub struct Receiver {
    addr: SocketAddr,
    keep: bool,
    received: Arc<Received>,
}

impl Receiver {
    /// Listens on a free loopback port; `keep` keeps every body for [`Receiver::bodies`].
    pub fn start(keep: bool) -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        let receiver = Receiver {
            addr: listener.local_addr().expect("its address"),
            keep,
            received: Arc::default(),
        };
        let serving = receiver.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let serving = serving.clone();
                std::thread::spawn(move || serving.serve(stream));
            }
        });
        receiver
    }

    /// `http://127.0.0.1:PORT`, the endpoint to export to.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The bodies received so far, when kept.
    pub fn bodies(&self) -> Vec<Vec<u8>> {
        self.received.bodies.lock().expect("bodies").clone()
    }

    /// Export requests and body bytes received so far.
    pub fn totals(&self) -> (u64, u64) {
        (
            self.received.requests.load(Ordering::Relaxed),
            self.received.bytes.load(Ordering::Relaxed),
        )
    }

    /// Serves one connection's requests (an exporter keeps its connection alive).
    fn serve(&self, stream: TcpStream) {
        let Ok(mut writer) = stream.try_clone() else {
            return;
        };
        let mut reader = BufReader::new(stream);
        loop {
            let mut request_line = String::new();
            if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
                return;
            }
            let mut length = 0usize;
            loop {
                let mut header = String::new();
                if reader.read_line(&mut header).unwrap_or(0) == 0 {
                    return;
                }
                let header = header.trim_end();
                if header.is_empty() {
                    break;
                }
                if let Some((name, value)) = header.split_once(':')
                    && name.eq_ignore_ascii_case("content-length")
                {
                    length = value.trim().parse().expect("a content length");
                }
            }
            let mut body = vec![0; length];
            if reader.read_exact(&mut body).is_err() {
                return;
            }
            assert!(
                request_line.starts_with("POST /v1/traces "),
                "not an OTLP trace export: {request_line}"
            );
            self.received.requests.fetch_add(1, Ordering::Relaxed);
            self.received
                .bytes
                .fetch_add(body.len() as u64, Ordering::Relaxed);
            if self.keep {
                self.received.bodies.lock().expect("bodies").push(body);
            }
            // An empty `ExportTraceServiceResponse` is zero bytes of protobuf: full success.
            let answer = "HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n";
            if writer.write_all(answer.as_bytes()).is_err() {
                return;
            }
        }
    }
}
