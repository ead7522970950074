//! The library half of `tfjob-operator`: what the binary's subcommands share with the
//! end-to-end tests. [`policy_setup`] assembles the policies from the operator's flags;
//! [`operator`] runs the operator (policy ConfigMap sync and controller) against any cluster;
//! [`embedded`] starts a whole cluster in one process (API server, simulated kubelet, CRD with
//! admission, policies and the operator), as `tfjob-operator up` and the test suites use it;
//! [`api_client`] builds the operator's named API client, held by [`rate_limit`] to
//! `--kube-api-qps`/`--kube-api-burst` and counted by [`api_metrics`]; [`telemetry`] exports
//! the process's spans over OTLP.

pub mod api_client;
pub mod api_metrics;
pub mod api_trace;
pub mod embedded;
pub mod operator;
pub mod policy_setup;
pub mod rate_limit;
pub mod telemetry;
