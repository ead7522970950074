//! The medians criterion estimated in this run, read back from the `estimates.json` files it
//! writes, so a benchmark can print its targets beside the measures without timing twice.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde_json::Value;

/// Where criterion writes: `CRITERION_HOME`, else `CARGO_TARGET_DIR/criterion`, else
/// `target/criterion` beside the bench executable's profile directory.
pub fn criterion_dir() -> PathBuf {
    if let Some(home) = std::env::var_os("CRITERION_HOME") {
        return PathBuf::from(home);
    }
    if let Some(target) = std::env::var_os("CARGO_TARGET_DIR") {
        return PathBuf::from(target).join("criterion");
    }
    std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.parent()?.parent()?.join("criterion")))
        .unwrap_or_else(|| PathBuf::from("target/criterion"))
}

/// The median (ns) criterion estimated for `group/function` in this run, if it measured it.
pub fn median_ns(dir: &Path, group: &str, function: &str, since: SystemTime) -> Option<f64> {
    let path = dir.join(group).join(function).join("new/estimates.json");
    let modified = std::fs::metadata(&path).ok()?.modified().ok()?;
    if modified < since {
        return None; // left over from an earlier run (e.g. this one was filtered)
    }
    let estimates: Value = serde_json::from_slice(&std::fs::read(&path).ok()?).ok()?;
    estimates["median"]["point_estimate"].as_f64()
}
