//! `tfjob-operator up` as a user runs it in a terminal of its own: the process started with
//! the flags a test gives, ready once it says it listens, driven with the real kubectl through
//! the kubeconfig it wrote, and killed (SIGKILL) when the test ends or asks.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

/// A running `up` process.
pub struct Up {
    child: Child,
    pub kubeconfig: PathBuf,
    /// kubectl's discovery cache, of this test alone.
    cache: PathBuf,
}

impl Up {
    /// Starts `up --port 0 --kubeconfig-out DIR/kubeconfig --no-cel-warmup ARGS` and waits
    /// until it listens: tests that load no CEL policy spare the evaluator's compilation. Unless
    /// `ARGS` name one, the policy cache is the one every test process shares
    /// (`compiled_policies_dir`), so a start maps the default policies instead of compiling
    /// them.
    pub fn start(args: &[&str], dir: &Path) -> Up {
        Up::start_with_env(args, &[], dir)
    }

    /// Starts `up --port 0 --kubeconfig-out DIR/kubeconfig ARGS`, with nothing but `ARGS`
    /// changed from what a user runs, and waits until it listens.
    pub fn start_as_users_do(args: &[&str], dir: &Path) -> Up {
        Up::start_as_users_do_with_env(args, &[], dir)
    }

    /// [`Up::start`] with the environment variables `env` set as well.
    pub fn start_with_env(args: &[&str], env: &[(&str, &str)], dir: &Path) -> Up {
        let shared = super::compiled_policies_dir();
        let mut cold: Vec<&str> = vec!["--no-cel-warmup"];
        if let Some(shared) = shared.as_deref().and_then(Path::to_str)
            && !args.contains(&"--policy-cache-dir")
        {
            cold.extend(["--policy-cache-dir", shared]);
        }
        cold.extend_from_slice(args);
        Up::start_as_users_do_with_env(&cold, env, dir)
    }

    fn start_as_users_do_with_env(args: &[&str], env: &[(&str, &str)], dir: &Path) -> Up {
        let kubeconfig = dir.join("kubeconfig");
        let _ = std::fs::remove_file(&kubeconfig);
        let mut child = super::operator()
            .args(["up", "--port", "0", "--kubeconfig-out"])
            .arg(&kubeconfig)
            .args(args)
            .envs(env.iter().copied())
            .env_remove("KUBECONFIG")
            .env_remove("POD_NAMESPACE")
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("up starts");
        let stdout = child.stdout.take().expect("piped");
        let mut lines = BufReader::new(stdout).lines();
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let line = lines
                .next()
                .unwrap_or_else(|| panic!("up ended before listening: {:?}", child.try_wait()))
                .expect("up's output is text");
            if line.starts_with("Embedded cluster listening") {
                break;
            }
            assert!(Instant::now() < deadline, "up never listened");
        }
        // The rest of its output is read and dropped, so a full pipe never blocks it.
        std::thread::spawn(move || for _ in lines {});
        Up {
            child,
            kubeconfig,
            cache: dir.join("kubectl-cache"),
        }
    }

    /// A client of the cluster, through the written kubeconfig.
    pub async fn client(&self) -> Client {
        let kubeconfig = Kubeconfig::read_from(&self.kubeconfig).expect("the kubeconfig");
        let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .expect("a client configuration");
        Client::try_from(config).expect("a client")
    }

    /// Kills the process (SIGKILL) and reaps it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Up {
    fn drop(&mut self) {
        self.kill();
    }
}

impl super::Kubectl for Up {
    fn kubectl_output(&self, args: &[&str], stdin: Option<&str>) -> std::process::Output {
        let mut cmd = Command::new("kubectl");
        cmd.args(args)
            .env("KUBECONFIG", &self.kubeconfig)
            .env("KUBECACHEDIR", &self.cache)
            .env_remove("KUBERNETES_SERVICE_HOST");
        super::run(cmd, stdin, Duration::from_secs(60))
    }
}
