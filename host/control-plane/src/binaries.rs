//! Where the control plane's programs are, each checked before anything starts: present, a
//! file, executable, and answering `--version` (a truncated or foreign file fails there, named,
//! instead of as a component that never comes up).
//!
//! `tests/control-plane/build` keeps them under
//! `${XDG_CACHE_HOME:-~/.cache}/tfjob-operator/control-plane/<component>-<version>/bin`;
//! `TFJOB_CONTROL_PLANE_BIN` names one directory holding all of them instead.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::Error;
use crate::versions::Versions;

/// The variable naming one directory that holds every program.
pub const BIN_VARIABLE: &str = "TFJOB_CONTROL_PLANE_BIN";

/// How long `--version` may take before a program counts as damaged.
const VERSION_TIMEOUT: Duration = Duration::from_secs(20);

/// The programs of the control plane, each checked.
#[derive(Debug, Clone)]
pub struct Binaries {
    pub etcd: PathBuf,
    pub kube_apiserver: PathBuf,
    pub kube_controller_manager: PathBuf,
    pub kube_scheduler: PathBuf,
    pub kubectl: PathBuf,
    pub kwok: PathBuf,
}

impl Binaries {
    /// The programs in `dir`, one directory for all.
    pub fn in_dir(dir: &Path) -> Result<Self, Error> {
        Self::checked(|name| dir.join(name))
    }

    /// The programs where the build script keeps them for `versions`, or in the directory
    /// `TFJOB_CONTROL_PLANE_BIN` names.
    pub fn located(versions: &Versions) -> Result<Self, Error> {
        if let Some(dir) = std::env::var_os(BIN_VARIABLE) {
            return Self::in_dir(Path::new(&dir));
        }
        let cache = std::env::var_os("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache")))
            .unwrap_or_else(|| PathBuf::from(".cache"))
            .join("tfjob-operator/control-plane");
        Self::checked(|name| {
            let component = match name {
                "etcd" => format!("etcd-{}", versions.etcd),
                "kwok" => format!("kwok-{}", versions.kwok),
                _ => format!("kubernetes-{}", versions.kubernetes),
            };
            cache.join(component).join("bin").join(name)
        })
    }

    fn checked(path_of: impl Fn(&str) -> PathBuf) -> Result<Self, Error> {
        let check = |name: &'static str| {
            let path = path_of(name);
            check_program(name, &path).map(|()| path)
        };
        Ok(Binaries {
            etcd: check("etcd")?,
            kube_apiserver: check("kube-apiserver")?,
            kube_controller_manager: check("kube-controller-manager")?,
            kube_scheduler: check("kube-scheduler")?,
            kubectl: check("kubectl")?,
            kwok: check("kwok")?,
        })
    }
}

/// Checks that `path` is the runnable program `name`.
fn check_program(name: &'static str, path: &Path) -> Result<(), Error> {
    use std::os::unix::fs::PermissionsExt as _;
    let missing = |reason: String| Error::Binary {
        name,
        path: path.to_owned(),
        reason,
    };
    let meta = std::fs::metadata(path).map_err(|e| {
        missing(format!(
            "{e}; build it with tests/control-plane/build {name}"
        ))
    })?;
    if !meta.is_file() {
        return Err(missing("not a file".into()));
    }
    if meta.permissions().mode() & 0o111 == 0 {
        return Err(missing("not executable".into()));
    }
    // kubectl answers `version --client`; the servers and kwok `--version`.
    let args: &[&str] = if name == "kubectl" {
        &["version", "--client"]
    } else {
        &["--version"]
    };
    let mut child = Command::new(path)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| missing(format!("does not run: {e}")))?;
    let started = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(status)) if status.success() => return Ok(()),
            Ok(Some(status)) => {
                return Err(missing(format!(
                    "`{} {}` failed ({status}): damaged, or not {name}",
                    path.display(),
                    args.join(" ")
                )));
            }
            Ok(None) if started.elapsed() > VERSION_TIMEOUT => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(missing(format!(
                    "`{}` did not answer within {VERSION_TIMEOUT:?}",
                    args.join(" ")
                )));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => return Err(missing(format!("waiting for it: {e}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_a_damaged_and_a_non_executable_program_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let e = Binaries::in_dir(dir.path()).unwrap_err().to_string();
        assert!(e.starts_with("etcd at "), "{e}");
        assert!(e.contains("tests/control-plane/build etcd"), "{e}");

        use std::os::unix::fs::PermissionsExt as _;
        let etcd = dir.path().join("etcd");
        std::fs::write(&etcd, b"\x7fELF\x02\x01\x01 truncated").unwrap();
        std::fs::set_permissions(&etcd, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = Binaries::in_dir(dir.path()).unwrap_err().to_string();
        assert!(e.ends_with("not executable"), "{e}");

        std::fs::set_permissions(&etcd, std::fs::Permissions::from_mode(0o755)).unwrap();
        let e = Binaries::in_dir(dir.path()).unwrap_err().to_string();
        assert!(e.contains("does not run") || e.contains("damaged"), "{e}");

        // A program that runs but is something else.
        std::fs::write(&etcd, "#!/bin/sh\nexit 3\n").unwrap();
        let e = Binaries::in_dir(dir.path()).unwrap_err().to_string();
        assert!(e.contains("damaged, or not etcd"), "{e}");
    }
}
