//! One component of the control plane as a child process: started with its arguments, its
//! output in a log file of its own, killed when dropped (a panicking test included) or when the
//! process that started it dies, and able to be killed and started again on the same
//! arguments and data, as a crash and a restart.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use crate::Error;

/// `setpriv`, if it is here and knows `--pdeathsig`.
static PDEATHSIG: std::sync::LazyLock<Option<PathBuf>> = std::sync::LazyLock::new(|| {
    ["/usr/bin/setpriv", "/bin/setpriv"]
        .into_iter()
        .map(PathBuf::from)
        .find(|path| {
            Command::new(path)
                .args(["--pdeathsig", "KILL", "--", "true"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        })
});

/// How many of a component's last log lines an error shows.
pub const LAST_LINES: usize = 25;

/// A component's process.
#[derive(Debug)]
pub struct Component {
    name: &'static str,
    program: PathBuf,
    args: Vec<String>,
    log: PathBuf,
    child: Option<Child>,
}

impl Component {
    /// Starts `program` with `args`, its output appended to `log`.
    pub fn start(
        name: &'static str,
        program: &Path,
        args: Vec<String>,
        log: PathBuf,
    ) -> Result<Self, Error> {
        let mut component = Component {
            name,
            program: program.to_owned(),
            args,
            log,
            child: None,
        };
        component.spawn()?;
        Ok(component)
    }

    fn spawn(&mut self) -> Result<(), Error> {
        let io = |source| Error::Io {
            path: self.log.clone(),
            source,
        };
        let out = File::options()
            .create(true)
            .append(true)
            .open(&self.log)
            .map_err(io)?;
        let err = out.try_clone().map_err(io)?;
        // Through `setpriv --pdeathsig KILL` where util-linux has it: the component then dies
        // with the process that started it even when that one is killed outright (a test
        // runner's timeout), which no destructor sees.
        let mut command = match PDEATHSIG.as_deref() {
            Some(setpriv) => {
                let mut command = Command::new(setpriv);
                command
                    .args(["--pdeathsig", "KILL", "--"])
                    .arg(&self.program);
                command
            }
            None => Command::new(&self.program),
        };
        let child = command
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|e| Error::Start {
                name: self.name,
                reason: format!("{}: {e}", self.program.display()),
            })?;
        self.child = Some(child);
        Ok(())
    }

    /// The component's name.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// An error if the process has ended: its exit status and last log lines.
    pub fn check_running(&mut self) -> Result<(), Error> {
        let Some(child) = self.child.as_mut() else {
            return Err(self.exited("was stopped".into()));
        };
        match child.try_wait() {
            Ok(None) => Ok(()),
            Ok(Some(status)) => Err(self.exited(format!("exited ({status})"))),
            Err(e) => Err(self.exited(format!("cannot be waited for: {e}"))),
        }
    }

    fn exited(&self, how: String) -> Error {
        Error::Exited {
            name: self.name,
            how,
            log: self.log.clone(),
            last_lines: self.last_lines(),
        }
    }

    /// The last [`LAST_LINES`] lines of the component's log.
    pub fn last_lines(&self) -> String {
        let text = std::fs::read(&self.log).unwrap_or_default();
        let text = String::from_utf8_lossy(&text);
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(LAST_LINES)..].join("\n")
    }

    /// Kills the process (SIGKILL, as a crash) and waits for it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Kills the process if it runs and starts it again with the same arguments.
    pub fn restart(&mut self) -> Result<(), Error> {
        self.kill();
        self.spawn()
    }
}

impl Drop for Component {
    fn drop(&mut self) {
        self.kill();
    }
}
