//! An OTLP/HTTP receiver on loopback for the trace tests and the scale bench: it answers every
//! `POST /v1/traces` with an empty success, counts it, and hands each request's body (an
//! `ExportTraceServiceRequest`, decoded by whoever is handed it) to a callback, if it was given
//! one; a bench that only needs a collector that keeps up gives none. A small HTTP/1.1 server of its own, so that no
//! collector is needed and nothing here shares code with the exporter it receives from.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// What the receiver got.
#[derive(Default)]
struct Received {
    requests: AtomicU64,
    bytes: AtomicU64,
}

/// What is done with each body received.
type OnBody = Arc<dyn Fn(&[u8]) + Send + Sync>;

/// A running receiver; it serves until the process ends.
#[derive(Clone)]
pub struct Receiver {
    addr: SocketAddr,
    on_body: Option<OnBody>,
    received: Arc<Received>,
}

impl Receiver {
    /// Listens on a free loopback port, counting what it receives.
    pub fn start() -> Receiver {
        Receiver::listen(None)
    }

    /// Listens on a free loopback port and calls `on_body` with each request's body, on the
    /// connection's thread, before answering it.
    pub fn start_with(on_body: impl Fn(&[u8]) + Send + Sync + 'static) -> Receiver {
        Receiver::listen(Some(Arc::new(on_body)))
    }

    fn listen(on_body: Option<OnBody>) -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        let receiver = Receiver {
            addr: listener.local_addr().expect("its address"),
            on_body,
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
            if let Some(on_body) = &self.on_body {
                on_body(&body);
            }
            // An empty `ExportTraceServiceResponse` is zero bytes of protobuf: full success.
            let answer = "HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n";
            if writer.write_all(answer.as_bytes()).is_err() {
                return;
            }
        }
    }
}
