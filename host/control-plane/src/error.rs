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

impl Error {
    /// A component that exited at start because its address was taken meanwhile.
    pub fn is_port_race(&self) -> bool {
        matches!(self, Error::Exited { last_lines, .. } if last_lines.contains("address already in use"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_exit_for_an_address_in_use_is_a_port_race() {
        let exited = |last_lines: &str| Error::Exited {
            name: "kube-scheduler",
            how: "exited (exit status: 1)".into(),
            log: PathBuf::from("/tmp/kube-scheduler.log"),
            last_lines: last_lines.into(),
        };
        assert!(exited("listen tcp 127.0.0.1:43049: bind: address already in use").is_port_race());
        assert!(!exited("unknown flag: --bogus").is_port_race());
        assert!(
            !Error::PortTaken {
                name: "etcd",
                port: 2379
            }
            .is_port_race()
        );
    }
}
