//! Running the built `tfjob-operator` binary as a child process, the way a user or a script
//! would, for the end-to-end tests of its subcommands: the command, its run with a time limit,
//! and the checks of exit status and output that every subcommand shares.
//!
//! Every test file compiles this module on its own and uses a different subset of it, hence the
//! `dead_code` allowance.
#![allow(dead_code)]

pub mod cluster;
pub mod real;
pub mod registry;
pub mod up;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// Address-space limit of a [`limited`] child (KiB), so that a runaway allocation fails the
/// test instead of exhausting the machine's memory. The engine falls back from its pooling
/// allocator to on-demand allocation when the pool does not fit.
pub const MEMORY_LIMIT_KIB: u64 = 2 * 1024 * 1024;

/// `path` of the repository.
pub fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(path)
}

/// A cargo target directory for the tests' own builds of policy crates: kept between runs
/// where it can be (`tfjob_test_support::kept_between_runs`), else in this build's `target/tmp`.
pub fn policy_target_dir(name: &str) -> PathBuf {
    tfjob_test_support::policy_target_dir(name, Path::new(env!("CARGO_TARGET_TMPDIR")))
}

pub use tfjob_test_support::compiled_policies_dir;

/// `policy test`, keeping compiled code between runs where it can, as an author iterating on a
/// policy would: a Python or JavaScript component takes seconds to compile.
pub fn policy_test() -> Command {
    let mut cmd = operator();
    cmd.args(["policy", "test"]);
    if let Some(dir) = compiled_policies_dir() {
        cmd.arg("--policy-cache-dir").arg(dir);
    }
    cmd
}

/// A new directory only its owner may use, as the operator wants its policy cache.
pub fn private_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )
    .unwrap();
    dir
}

/// The binary.
pub fn operator() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tfjob-operator"))
}

/// The binary under [`MEMORY_LIMIT_KIB`].
pub fn limited() -> Command {
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(format!(
            "ulimit -v {MEMORY_LIMIT_KIB} && exec \"$0\" \"$@\""
        ))
        .arg(env!("CARGO_BIN_EXE_tfjob-operator"));
    cmd
}

/// Runs `cmd` with `stdin` as its standard input (`None`: nothing to read) and collects its
/// output; kills it and fails the test after `timeout`.
pub fn run(cmd: Command, stdin: Option<&str>, timeout: Duration) -> Output {
    tfjob_test_support::run(cmd, stdin, timeout)
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec()).expect("UTF-8 output")
}

/// Asserts exit status 0 and an empty stderr; returns stdout. `context` (what ran) leads the
/// failure messages.
pub fn expect_success(output: &Output, context: &str) -> String {
    assert_eq!(
        output.status.code(),
        Some(0),
        "{context}\nstderr:\n{}",
        text(&output.stderr)
    );
    assert_eq!(text(&output.stderr), "", "{context}");
    text(&output.stdout)
}

/// Asserts exit status 0 of a tool that reports progress on stderr (a build, a test runner);
/// returns stdout. Both streams lead the failure message.
pub fn expect_exit_zero(output: &Output, context: &str) -> String {
    assert_eq!(
        output.status.code(),
        Some(0),
        "{context}\nstdout:\n{}\nstderr:\n{}",
        text(&output.stdout),
        text(&output.stderr)
    );
    text(&output.stdout)
}

/// Asserts exit status 2 (invalid input) and an empty stdout; returns stderr. `context` (what
/// ran) leads the failure messages.
pub fn expect_failure(output: &Output, context: &str) -> String {
    assert_eq!(
        output.status.code(),
        Some(2),
        "{context}\nstdout:\n{}\nstderr:\n{}",
        text(&output.stdout),
        text(&output.stderr)
    );
    assert_eq!(text(&output.stdout), "", "{context}: nothing on stdout");
    text(&output.stderr)
}

/// Writes `contents` to `dir/file`; returns the path.
pub fn write(dir: &Path, file: &str, contents: &[u8]) -> String {
    let path = dir.join(file);
    std::fs::write(&path, contents).expect("writing a temp file");
    path.to_str().expect("UTF-8 path").to_owned()
}

/// A loopback address with a free port for a child process to listen on.
///
/// The port is taken below Linux's ephemeral range (32768-60999 by default). A port the
/// kernel handed out for `bind(0)` and that is free again is, until the child binds it, also
/// free for the kernel to hand out again: to the embedded API server of a test running
/// beside this one, or as the local port of an outgoing connection, the child's own to the
/// API server included. The child then fails to bind and the test waits for it in vain.
/// Ports below the range are never handed out that way.
pub fn free_addr() -> std::net::SocketAddr {
    use std::sync::atomic::{AtomicU64, Ordering};
    static DRAWS: AtomicU64 = AtomicU64::new(0);
    let seed = u64::from(std::process::id())
        ^ std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
    for _ in 0..1000 {
        let draw = DRAWS.fetch_add(1, Ordering::Relaxed);
        // A multiplicative hash spreads consecutive draws over 20000-32767.
        let mixed =
            (seed ^ draw.wrapping_mul(0x9E37_79B9_7F4A_7C15)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        let port = 20_000 + u16::try_from((mixed >> 40) % 12_768).expect("below 12768");
        if let Ok(listener) = std::net::TcpListener::bind(("127.0.0.1", port)) {
            return listener.local_addr().unwrap();
        }
    }
    panic!("no free loopback port in 20000-32767");
}

/// The status code and body of `GET path` at `addr`, or `None` while nothing listens there.
pub fn http_get(addr: std::net::SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut stream = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(1)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let status = response.split_whitespace().nth(1)?.parse().ok()?;
    let body = response
        .split_once("\r\n\r\n")
        .map_or("", |(_, body)| body)
        .to_owned();
    Some((status, body))
}

/// kubectl against some cluster, as a user types it: the commands the end-to-end tests share
/// whichever cluster they run on.
pub trait Kubectl {
    /// Runs kubectl; `stdin` is fed to it (`apply -f -`).
    fn kubectl_output(&self, args: &[&str], stdin: Option<&str>) -> Output;

    /// Runs kubectl and returns its stdout, failing the test on a non-zero exit (warnings on
    /// stderr are kubectl's to print).
    fn kubectl(&self, args: &[&str]) -> String {
        self.kubectl_with(args, None)
    }

    /// [`Kubectl::kubectl`] with `stdin` fed to it.
    fn kubectl_with(&self, args: &[&str], stdin: Option<&str>) -> String {
        let out = self.kubectl_output(args, stdin);
        expect_exit_zero(&out, &format!("kubectl {args:?}"))
    }

    /// Polls `kubectl args` until its output satisfies `done`, for `limit` at most; a failure
    /// shows what kubectl printed last.
    fn kubectl_until(&self, limit: Duration, args: &[&str], done: impl Fn(&str) -> bool) -> String {
        let started = Instant::now();
        loop {
            let out = self.kubectl_output(args, None);
            let printed = text(&out.stdout);
            if out.status.success() && done(&printed) {
                return printed;
            }
            assert!(
                started.elapsed() < limit,
                "kubectl {args:?} never reached the expected state within {limit:?}; last: {}{}",
                printed,
                text(&out.stderr)
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

/// A child process (the operator), killed when the test ends.
pub struct Killed(pub std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Polls `check` every 100 ms until it returns `Some`; fails after 90 s naming `what`.
pub fn eventually<T>(what: &str, check: impl FnMut() -> Option<T>) -> T {
    eventually_within(Duration::from_secs(90), what, check)
}

/// How long a wait on loading a Python or JavaScript policy may take: two compilations of a
/// language runtime (over 10 MiB of Wasm each) and its pre-initialisation, in a debug build,
/// on a machine whose cores other tests share. A liveness bound, not a performance claim:
/// the loading benchmark measures how long it takes.
pub const RUNTIME_LOAD: Duration = Duration::from_secs(300);

/// Polls `check` every 100 ms until it returns `Some`; fails after `limit` naming `what`.
pub fn eventually_within<T>(
    limit: Duration,
    what: &str,
    mut check: impl FnMut() -> Option<T>,
) -> T {
    let started = Instant::now();
    loop {
        if let Some(value) = check() {
            return value;
        }
        assert!(started.elapsed() < limit, "never within {limit:?}: {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}
