//! A real Kubernetes control plane for the tests, started from the binaries
//! `tests/control-plane/build` makes, as envtest starts one for controller-runtime projects:
//! etcd and kube-apiserver on loopback with TLS, the RBAC and Node authorizers, the default
//! admission plugins (and `OwnerReferencesPermissionEnforcement`) and service-account tokens; the controller-manager (garbage collector,
//! namespace, service-account and root-CA controllers) and the scheduler; and kwok, which plays
//! the kubelets of N nodes of the capacity asked for, running each pod as long as its
//! `sim.tfjob.dev/duration` annotation says and ending it with the exit code the embedded
//! cluster's simulated kubelet gives it.
//!
//! [`ControlPlane::start`] writes an administrator's kubeconfig and returns once the API
//! server is ready and the nodes are; a component that exits at start, or a control plane that
//! is not ready within its bound, is an error naming the component with its last log lines, and
//! whatever had started is stopped. Dropping the [`ControlPlane`] kills every process, also when
//! a test panics, and so does the end of the thread that started it (`setpriv --pdeathsig`,
//! where util-linux has it), even when the test process is killed outright: start and keep a
//! control plane on one thread. Nothing here is known to the operator, which only ever sees a
//! kubeconfig.

pub mod audit;
mod binaries;
mod component;
mod error;
mod kubeconfig;
pub mod kwok;
mod pki;
mod ports;
mod proxy;
pub mod runs;
mod versions;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

pub use binaries::{BIN_VARIABLE, Binaries};
pub use component::Component;
pub use error::Error;
pub use kwok::NodeSpec;
pub use proxy::CuttingProxy;
pub use versions::Versions;

use pki::Pki;

/// The components, in the order they start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    Etcd,
    ApiServer,
    ControllerManager,
    Scheduler,
    Kwok,
}

/// What control plane to start.
#[derive(Debug, Clone)]
pub struct Options {
    /// The simulated nodes.
    pub nodes: Vec<NodeSpec>,
    /// How long the whole control plane may take to be ready.
    pub ready_within: Duration,
    /// etcd's client port and the API server's port; `None` picks free ones.
    pub etcd_port: Option<u16>,
    pub apiserver_port: Option<u16>,
    /// The API server's `--max-requests-inflight` (`None`: its default), as a plain limit with
    /// priority and fairness off, so that requests past it are answered 429 at once.
    pub max_requests_inflight: Option<u32>,
    /// The API server's `--min-request-timeout` in seconds, which bounds watches (`None`: its
    /// default, 1800).
    pub min_request_timeout: Option<u32>,
    /// Where the programs are; `None` finds them with [`Binaries::located`].
    pub binaries: Option<Binaries>,
    /// The users whose requests the API server writes to its audit log
    /// ([`ControlPlane::audited`]); none by default.
    pub audit_users: Vec<String>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            nodes: vec![NodeSpec::default(); 4],
            ready_within: Duration::from_secs(90),
            etcd_port: None,
            apiserver_port: None,
            max_requests_inflight: None,
            min_request_timeout: None,
            binaries: None,
            audit_users: Vec::new(),
        }
    }
}

/// A running control plane. Dropping it stops every component.
#[derive(Debug)]
pub struct ControlPlane {
    // Declared in the order they stop: the ledger's watch, then the components, then the
    // directory their data is in.
    /// Plays `sim.tfjob.dev/fail-times`, beside kwok (`runs`).
    runs: Option<runs::RunLedger>,
    components: Vec<(Part, Component)>,
    kubeconfig: PathBuf,
    server: String,
    binaries: Binaries,
    dir: tempfile::TempDir,
}

/// How many times a start that lost a port to another process is tried.
const PORT_RACES: usize = 3;

/// The versions file of this repository.
pub fn versions_file() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/control-plane/versions")
}

impl ControlPlane {
    /// Starts a control plane as `options` say and waits until it is ready. A port picked free
    /// can be taken by another process before the component that was to listen on it starts
    /// (control planes of tests running side by side pick theirs at the same time): a
    /// component that exits at start for an address in use is started again, everything with
    /// new ports, a few times.
    pub fn start(options: Options) -> Result<Self, Error> {
        let mut attempt = 1;
        loop {
            match Self::start_once(options.clone()) {
                Err(e) if e.is_port_race() && attempt < PORT_RACES => attempt += 1,
                result => return result,
            }
        }
    }

    fn start_once(options: Options) -> Result<Self, Error> {
        let binaries = match options.binaries.clone() {
            Some(binaries) => binaries,
            None => Binaries::located(&Versions::read(&versions_file())?)?,
        };
        let dir = tempfile::Builder::new()
            .prefix("tfjob-control-plane-")
            .tempdir()
            .map_err(|source| Error::Io {
                path: std::env::temp_dir(),
                source,
            })?;
        let pki_dir = dir.path().join("pki");
        std::fs::create_dir(&pki_dir).map_err(|source| Error::Io {
            path: pki_dir.clone(),
            source,
        })?;
        let pki = Pki::make(&pki_dir)?;
        let etcd_port = ports::port("etcd", options.etcd_port)?;
        let etcd_peer_port = ports::port("etcd", None)?;
        let apiserver_port = ports::port("kube-apiserver", options.apiserver_port)?;
        let server = format!("https://127.0.0.1:{apiserver_port}");

        let write = |name: &str, text: &str| -> Result<PathBuf, Error> {
            let path = dir.path().join(name);
            std::fs::write(&path, text).map_err(|source| Error::Io {
                path: path.clone(),
                source,
            })?;
            Ok(path)
        };
        let kubeconfig = write(
            "admin.kubeconfig",
            &kubeconfig::render(&server, &pki.ca_cert, "admin", &pki.admin),
        )?;
        let cm_kubeconfig = write(
            "controller-manager.kubeconfig",
            &kubeconfig::render(
                &server,
                &pki.ca_cert,
                "system:kube-controller-manager",
                &pki.controller_manager,
            ),
        )?;
        let scheduler_kubeconfig = write(
            "scheduler.kubeconfig",
            &kubeconfig::render(
                &server,
                &pki.ca_cert,
                "system:kube-scheduler",
                &pki.scheduler,
            ),
        )?;
        let kwok_kubeconfig = write(
            "kwok.kubeconfig",
            &kubeconfig::render(&server, &pki.ca_cert, "kwok", &pki.kwok),
        )?;
        let kwok_config = write("kwok.yaml", &kwok::configuration())?;
        let audit_policy = write("audit-policy.json", &audit::policy(&options.audit_users))?;

        let mut plane = ControlPlane {
            runs: None,
            components: Vec::new(),
            kubeconfig,
            server,
            binaries: binaries.clone(),
            dir,
        };
        let deadline = Instant::now() + options.ready_within;
        let path = |p: &Path| p.display().to_string();

        // etcd: one member on loopback, its data in the control plane's directory.
        let data = plane.dir.path().join("etcd");
        plane.launch(
            Part::Etcd,
            "etcd",
            &binaries.etcd,
            vec![
                "--name=default".into(),
                format!("--data-dir={}", path(&data)),
                format!("--listen-client-urls=http://127.0.0.1:{etcd_port}"),
                format!("--advertise-client-urls=http://127.0.0.1:{etcd_port}"),
                format!("--listen-peer-urls=http://127.0.0.1:{etcd_peer_port}"),
                format!("--initial-advertise-peer-urls=http://127.0.0.1:{etcd_peer_port}"),
                format!("--initial-cluster=default=http://127.0.0.1:{etcd_peer_port}"),
                // A test's data lives as long as the test: no fsync on every write.
                "--unsafe-no-fsync=true".into(),
                "--log-level=warn".into(),
            ],
        )?;
        plane.wait_until("etcd answering /health", deadline, |_| {
            ports::http_get_ok(etcd_port, "/health", "\"health\":\"true\"")
        })?;

        let mut apiserver = vec![
            format!("--etcd-servers=http://127.0.0.1:{etcd_port}"),
            "--bind-address=127.0.0.1".into(),
            "--advertise-address=127.0.0.1".into(),
            // The `kubernetes` Service's endpoints may not be a loopback address, and no pod
            // here reaches the API server through it.
            "--endpoint-reconciler-type=none".into(),
            format!("--secure-port={apiserver_port}"),
            format!(
                "--cert-dir={}",
                path(&plane.dir.path().join("apiserver-certs"))
            ),
            format!("--tls-cert-file={}", path(&pki.serving_cert)),
            format!("--tls-private-key-file={}", path(&pki.serving_key)),
            format!("--client-ca-file={}", path(&pki.ca_cert)),
            "--authorization-mode=Node,RBAC".into(),
            // Beside the default plugins, the one stricter clusters (OpenShift among them) run:
            // setting `blockOwnerDeletion` needs `update` on the owner's `finalizers`.
            "--enable-admission-plugins=OwnerReferencesPermissionEnforcement".into(),
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local".into(),
            format!(
                "--service-account-key-file={}",
                path(&pki.service_account_pub)
            ),
            format!(
                "--service-account-signing-key-file={}",
                path(&pki.service_account_key)
            ),
            "--service-cluster-ip-range=10.0.0.0/24".into(),
            "--allow-privileged=true".into(),
            "--profiling=false".into(),
            format!("--audit-policy-file={}", path(&audit_policy)),
            format!("--audit-log-path={}", path(&plane.audit_log())),
            // Written as each request is answered, so that a test reads what has happened.
            "--audit-log-mode=blocking".into(),
            "--audit-log-format=json".into(),
        ];
        if let Some(n) = options.max_requests_inflight {
            // A plain limit, as before priority and fairness: a request past it is answered 429
            // at once instead of queued. The administrator (`system:masters`) is exempt.
            apiserver.push("--enable-priority-and-fairness=false".into());
            apiserver.push(format!("--max-requests-inflight={n}"));
            apiserver.push(format!(
                "--max-mutating-requests-inflight={}",
                n.div_ceil(2)
            ));
        }
        if let Some(seconds) = options.min_request_timeout {
            apiserver.push(format!("--min-request-timeout={seconds}"));
        }
        plane.launch(
            Part::ApiServer,
            "kube-apiserver",
            &binaries.kube_apiserver,
            apiserver,
        )?;
        plane.wait_until("kube-apiserver ready (/readyz)", deadline, |plane| {
            plane
                .kubectl_quiet(&["get", "--raw", "/readyz"])
                .is_some_and(|out| out.trim() == "ok")
        })?;

        let cm_port = ports::port("kube-controller-manager", None)?;
        plane.launch(
            Part::ControllerManager,
            "kube-controller-manager",
            &binaries.kube_controller_manager,
            vec![
                format!("--kubeconfig={}", path(&cm_kubeconfig)),
                format!("--authentication-kubeconfig={}", path(&cm_kubeconfig)),
                format!("--authorization-kubeconfig={}", path(&cm_kubeconfig)),
                "--bind-address=127.0.0.1".into(),
                format!("--secure-port={cm_port}"),
                "--leader-elect=false".into(),
                "--controllers=garbage-collector-controller,namespace-controller,serviceaccount-controller,serviceaccount-token-controller,root-ca-certificate-publisher-controller,pod-garbage-collector-controller".into(),
                format!("--root-ca-file={}", path(&pki.ca_cert)),
                format!(
                    "--service-account-private-key-file={}",
                    path(&pki.service_account_key)
                ),
                // Each controller acts as its own ServiceAccount, bound by Kubernetes' bootstrap
                // RBAC, as on a real cluster (the manager's own user may do far less).
                "--use-service-account-credentials=true".into(),
            ],
        )?;
        let scheduler_port = ports::port("kube-scheduler", None)?;
        plane.launch(
            Part::Scheduler,
            "kube-scheduler",
            &binaries.kube_scheduler,
            vec![
                format!("--kubeconfig={}", path(&scheduler_kubeconfig)),
                format!(
                    "--authentication-kubeconfig={}",
                    path(&scheduler_kubeconfig)
                ),
                format!("--authorization-kubeconfig={}", path(&scheduler_kubeconfig)),
                "--bind-address=127.0.0.1".into(),
                format!("--secure-port={scheduler_port}"),
                "--leader-elect=false".into(),
            ],
        )?;
        let kwok_port = ports::port("kwok", None)?;
        plane.launch(
            Part::Kwok,
            "kwok",
            &binaries.kwok,
            vec![
                format!("--kubeconfig={}", path(&kwok_kubeconfig)),
                format!("--config={}", path(&kwok_config)),
                "--manage-all-nodes=false".into(),
                format!(
                    "--manage-nodes-with-annotation-selector={}=fake",
                    kwok::NODE_ANNOTATION
                ),
                format!("--server-address=127.0.0.1:{kwok_port}"),
                "--cidr=10.1.0.0/16".into(),
                "--node-ip=10.1.0.1".into(),
            ],
        )?;
        // The service-account controller makes `default` in every namespace: the controller
        // manager works once the one of `default` is there.
        plane.wait_until(
            "the controller-manager making ServiceAccount default/default",
            deadline,
            |plane| {
                plane
                    .kubectl_quiet(&[
                        "get",
                        "serviceaccount",
                        "default",
                        "-n",
                        "default",
                        "-o",
                        "name",
                    ])
                    .is_some_and(|out| out.trim() == "serviceaccount/default")
            },
        )?;
        let nodes = kwok::nodes_manifest(&options.nodes);
        plane.kubectl_apply(&nodes)?;
        let expected = options.nodes.len();
        plane.wait_until(
            &format!("{expected} kwok nodes Ready"),
            deadline,
            |plane| {
                plane
                    .kubectl_quiet(&[
                        "get",
                        "nodes",
                        "-o",
                        "jsonpath={range .items[*]}{.status.conditions[?(@.type==\"Ready\")].status}{\"\\n\"}{end}",
                    ])
                    .is_some_and(|out| out.lines().filter(|l| *l == "True").count() == expected)
            },
        )?;
        // Nodes are created with the `not-ready` taint, which the node lifecycle controller
        // lifts on a real cluster once they are ready. That controller is not run here: it
        // would also evict pods from nodes whose heartbeats kwok does not send.
        plane.kubectl_run(&[
            "taint",
            "nodes",
            "-l",
            "type=kwok",
            "node.kubernetes.io/not-ready:NoSchedule-",
        ])?;
        plane.runs = Some(
            runs::RunLedger::start(&plane.binaries.kubectl, &plane.kubeconfig).map_err(|e| {
                Error::Start {
                    name: "the run ledger (kubectl get pods --watch)",
                    reason: e.to_string(),
                }
            })?,
        );
        Ok(plane)
    }

    fn launch(
        &mut self,
        part: Part,
        name: &'static str,
        program: &Path,
        args: Vec<String>,
    ) -> Result<(), Error> {
        let log = self.dir.path().join(format!("{name}.log"));
        let component = Component::start(name, program, args, log)?;
        self.components.push((part, component));
        Ok(())
    }

    /// Polls `ready` until it holds, failing when a component exits or `deadline` passes.
    fn wait_until(
        &mut self,
        what: &str,
        deadline: Instant,
        mut ready: impl FnMut(&Self) -> bool,
    ) -> Result<(), Error> {
        let started = Instant::now();
        loop {
            for (_, component) in &mut self.components {
                component.check_running()?;
            }
            if ready(self) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(Error::NotReady {
                    what: what.to_owned(),
                    seconds: started.elapsed().as_secs(),
                    logs: self.logs(),
                });
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Every component's last log lines, each under its name.
    pub fn logs(&self) -> String {
        self.components
            .iter()
            .map(|(_, c)| format!("--- {} ---\n{}", c.name(), c.last_lines()))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The administrator's kubeconfig (`system:masters`).
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// A kubeconfig (JSON) for ServiceAccount `namespace/name`, with a token the API server
    /// mints for it, valid for `hours`, reaching the API server at `server` (this control
    /// plane's, or a proxy in front of it).
    pub fn service_account_kubeconfig(
        &self,
        namespace: &str,
        name: &str,
        hours: u32,
        server: &str,
    ) -> Result<String, Error> {
        let duration = format!("--duration={hours}h");
        let token = self.kubectl_run(&["create", "token", name, "-n", namespace, &duration])?;
        let ca = self.dir.path().join("pki").join("ca.crt");
        let user = format!("system:serviceaccount:{namespace}:{name}");
        Ok(kubeconfig::render_token(
            server,
            &ca,
            &user,
            token.trim(),
            namespace,
        ))
    }

    /// The API server's audit log (empty unless [`Options::audit_users`] names someone).
    pub fn audit_log(&self) -> PathBuf {
        self.dir.path().join("audit.log")
    }

    /// The requests of [`Options::audit_users`] so far, as the API server answered them.
    pub fn audited(&self) -> Result<Vec<audit::Request>, Error> {
        audit::read(&self.audit_log())
    }

    /// The API server's URL.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// The programs it runs; `kubectl` among them.
    pub fn binaries(&self) -> &Binaries {
        &self.binaries
    }

    /// A kubectl command as the administrator, with a discovery cache of this control plane's
    /// own.
    pub fn kubectl(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(&self.binaries.kubectl);
        cmd.arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .arg("--cache-dir")
            .arg(self.dir.path().join("kubectl-cache"))
            .args(args);
        cmd
    }

    /// kubectl's output if it succeeded.
    fn kubectl_quiet(&self, args: &[&str]) -> Option<String> {
        let out = self.kubectl(args).output().ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Runs kubectl as the administrator; an error carries its stderr.
    pub fn kubectl_run(&self, args: &[&str]) -> Result<String, Error> {
        let fail = |reason: String| Error::Kubectl {
            args: args.join(" "),
            reason,
        };
        let out = self
            .kubectl(args)
            .output()
            .map_err(|e| fail(e.to_string()))?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(fail(String::from_utf8_lossy(&out.stderr).into_owned()))
        }
    }

    /// Applies `manifest` (YAML or JSON) as the administrator, server-side.
    pub fn kubectl_apply(&self, manifest: &str) -> Result<(), Error> {
        use std::io::Write as _;
        let args = ["apply", "--server-side", "-f", "-"];
        let fail = |reason: String| Error::Kubectl {
            args: args.join(" "),
            reason,
        };
        let mut child = self
            .kubectl(&args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .map_err(|e| fail(e.to_string()))?;
        if let Some(mut stdin) = child.stdin.take() {
            stdin
                .write_all(manifest.as_bytes())
                .map_err(|e| fail(e.to_string()))?;
        }
        let out = child.wait_with_output().map_err(|e| fail(e.to_string()))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(fail(String::from_utf8_lossy(&out.stderr).into_owned()))
        }
    }

    /// The component `part`'s process.
    pub fn component(&mut self, part: Part) -> Option<&mut Component> {
        self.components
            .iter_mut()
            .find(|(p, _)| *p == part)
            .map(|(_, c)| c)
    }

    /// Kills `part` (SIGKILL) and starts it again on the same data, then waits until the API
    /// server answers ready again.
    pub fn restart(&mut self, part: Part, ready_within: Duration) -> Result<(), Error> {
        if let Some(component) = self.component(part) {
            component.restart()?;
        }
        let deadline = Instant::now() + ready_within;
        self.wait_until("kube-apiserver ready again (/readyz)", deadline, |plane| {
            plane
                .kubectl_quiet(&["get", "--raw", "/readyz"])
                .is_some_and(|out| out.trim() == "ok")
        })
    }
}
