//! Starts the real control plane the tests use and keeps it until Ctrl-C or Ctrl-D, for trying
//! things against it by hand:
//!
//! ```sh
//! cargo run -p tfjob-control-plane --example serve            # 4 nodes of 8 CPUs
//! KUBECONFIG=<the path it prints> kubectl get nodes
//! ```
//!
//! The binaries come from `tests/control-plane/build` (or `TFJOB_CONTROL_PLANE_BIN`).

use tfjob_control_plane::{ControlPlane, Options};

fn main() -> std::process::ExitCode {
    let plane = match ControlPlane::start(Options::default()) {
        Ok(plane) => plane,
        Err(e) => {
            eprintln!("error: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    println!("{}", plane.kubeconfig().display());
    eprintln!(
        "control plane at {} (kubeconfig above); Ctrl-C or Ctrl-D stops it",
        plane.server()
    );
    // Ctrl-C reaches the whole foreground process group, the components included. Closing
    // standard input (Ctrl-D) stops them through the harness instead.
    let mut line = String::new();
    while std::io::stdin().read_line(&mut line).is_ok_and(|n| n > 0) {
        line.clear();
    }
    drop(plane);
    std::process::ExitCode::SUCCESS
}
