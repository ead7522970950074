//! The compiled-code cache with real components: an engine started on a warm cache loads the
//! default policies without compiling them and they decide as compiled ones do; a cache file
//! damaged on disk is detected, removed and compiled again, never loaded as it is.

use std::fs;
use std::os::unix::fs::PermissionsExt as _;

use serde_json::json;
use tfjob_policy_engine::bindings::JobContext;
use tfjob_policy_engine::compiled_cache::{CacheStats, CompiledCache};
use tfjob_policy_engine::defaults;
use tfjob_policy_engine::{PolicyEngine, SandboxLimits};

fn engine_on(dir: &std::path::Path) -> PolicyEngine {
    PolicyEngine::new(SandboxLimits::default())
        .unwrap()
        .with_compiled_cache(CompiledCache::open(dir).unwrap())
}

fn ctx() -> JobContext {
    JobContext {
        job_name: "mnist".into(),
        namespace: "ml".into(),
        job_uid: "uid-1".into(),
        job_labels: vec![],
        job_annotations: vec![],
        replica_type: "Worker".into(),
        replica_index: 0,
        replica_count: 1,
        attempt: 0,
    }
}

fn decorate(engine: &PolicyEngine) -> String {
    let d = defaults::find("default-decorate").unwrap();
    let policy = engine.compile(d.wasm).unwrap();
    let pod = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "tensorflow", "image": "tf"}]}});
    engine
        .at_maximum()
        .decorate(
            &policy,
            d.name,
            &ctx(),
            &defaults::default_settings(d).to_string(),
            &pod.to_string(),
        )
        .unwrap()
}

fn stats(engine: &PolicyEngine) -> CacheStats {
    engine.compiled_cache().unwrap().stats()
}

#[test]
fn a_restart_loads_compiled_code_and_a_damaged_file_is_compiled_again() {
    let dir = tempfile::tempdir().unwrap();
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o700)).unwrap();

    let cold = engine_on(dir.path());
    let expected = decorate(&cold);
    assert_eq!(
        stats(&cold),
        CacheStats {
            hits: 0,
            misses: 1,
            rejected: 0
        }
    );
    drop(cold);

    let warm = engine_on(dir.path());
    assert_eq!(
        decorate(&warm),
        expected,
        "code from the cache decides as compiled code"
    );
    assert_eq!(
        stats(&warm),
        CacheStats {
            hits: 1,
            misses: 0,
            rejected: 0
        }
    );
    drop(warm);

    // One flipped bit in the middle of the compiled code.
    let files: Vec<_> = fs::read_dir(dir.path().join("compiled"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    let mut bytes = fs::read(&files[0]).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x10;
    fs::write(&files[0], &bytes).unwrap();

    let after = engine_on(dir.path());
    assert_eq!(decorate(&after), expected);
    assert_eq!(
        stats(&after),
        CacheStats {
            hits: 0,
            misses: 1,
            rejected: 1
        }
    );
    drop(after);
    let again = engine_on(dir.path());
    decorate(&again);
    assert_eq!(
        stats(&again).hits,
        1,
        "the file written after the damage is sound"
    );
}
