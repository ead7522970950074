//! A scripted registry on loopback for the client's tests: each request is answered as the
//! test's script says, including in ways no registry should (endless, trickling, silent).
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};

/// How the fake registry answers one request.
#[derive(Clone)]
pub enum Answer {
    /// Status, extra headers, body (with its Content-Length).
    Full(u16, Vec<(String, String)>, Vec<u8>),
    /// 200 with a chunked body that never ends.
    Endless,
    /// 200 with headers, then one byte a second.
    Trickle,
    /// Reads the request and never answers.
    Silent,
}

type Script = Arc<dyn Fn(&Request) -> Answer + Send + Sync>;

/// A request as the fake registry saw it.
pub struct Request {
    /// The path and query.
    pub path: String,
    /// The request line and headers, as sent.
    pub head: String,
}

impl Request {
    /// The value of header `name` (any case), if sent.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().find_map(|line| {
            let (key, value) = line.split_once(':')?;
            key.trim().eq_ignore_ascii_case(name).then(|| value.trim())
        })
    }
}

/// Serves `script` (request path to answer) on a loopback port until the test ends.
pub async fn serve(script: impl Fn(&Request) -> Answer + Send + Sync + 'static) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let script: Script = Arc::new(script);
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(answer(stream, Arc::clone(&script)));
        }
    });
    addr
}

async fn answer(mut stream: TcpStream, script: Script) {
    loop {
        let mut request = Vec::new();
        let mut byte = [0u8; 1];
        while !request.ends_with(b"\r\n\r\n") {
            if stream.read(&mut byte).await.unwrap_or(0) == 0 {
                return;
            }
            request.push(byte[0]);
        }
        let head = String::from_utf8_lossy(&request).into_owned();
        let path = head.split_whitespace().nth(1).unwrap_or("/").to_owned();
        let result = match script(&Request { path, head }) {
            Answer::Full(status, headers, body) => {
                let mut head = format!("HTTP/1.1 {status} X\r\nContent-Length: {}\r\n", body.len());
                for (k, v) in headers {
                    head.push_str(&format!("{k}: {v}\r\n"));
                }
                head.push_str("\r\n");
                let mut out = head.into_bytes();
                out.extend_from_slice(&body);
                stream.write_all(&out).await
            }
            Answer::Endless => {
                let _ = stream
                    .write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
                    .await;
                let chunk = format!("{:x}\r\n{}\r\n", 65536, "x".repeat(65536));
                loop {
                    if stream.write_all(chunk.as_bytes()).await.is_err() {
                        return;
                    }
                }
            }
            Answer::Trickle => {
                let _ = stream
                    .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n")
                    .await;
                loop {
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    if stream.write_all(b"{").await.is_err() {
                        return;
                    }
                }
            }
            Answer::Silent => {
                tokio::time::sleep(Duration::from_secs(3600)).await;
                return;
            }
        };
        if result.is_err() {
            return;
        }
    }
}

pub fn ok(body: &[u8]) -> Answer {
    Answer::Full(200, Vec::new(), body.to_vec())
}
