//! Why a control plane could not be started or used; each names the component, file or port.

use std::path::PathBuf;

/// A control plane that could not start, or a component that failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: {reason}", path.display())]
    Versions { path: PathBuf, reason: String },
    #[error("{name} at {}: {reason}", path.display())]
    Binary {
        name: &'static str,
        path: PathBuf,
        reason: String,
    },
    #[error("making the certificates: {0}")]
    Certificates(#[from] rcgen::Error),
    #[error("{name}: port {port} on 127.0.0.1 is taken")]
    PortTaken { name: &'static str, port: u16 },
    #[error("no free port on 127.0.0.1: {0}")]
    NoPort(std::io::Error),
    #[error("{name} does not start: {reason}")]
    Start { name: &'static str, reason: String },
    #[error("{name} {how}; its last log lines ({}):\n{last_lines}", log.display())]
    Exited {
        name: &'static str,
        how: String,
        log: PathBuf,
        last_lines: String,
    },
    #[error("{what} within {seconds} s; the components' last log lines:\n{logs}")]
    NotReady {
        what: String,
        seconds: u64,
        logs: String,
    },
    #[error("{} line {line}: not an audit event: {reason}", path.display())]
    Audit {
        path: PathBuf,
        line: usize,
        reason: String,
    },
    #[error("kubectl {args}: {reason}")]
    Kubectl { args: String, reason: String },
}
