//! The compiled-code cache with real components: an engine started on a warm cache loads the
//! default policies without compiling them and they decide as compiled ones do; a cache file
//! damaged on disk is detected, removed and compiled again, never loaded as it is.

use std::fs;
use std::os::unix::fs::PermissionsExt as _;

use serde_json::json;
use tfjob_policy_engine::bindings::JobContext;
use tfjob_policy_engine::compiled_cache::{CacheStats, CompiledCache};
use tfjob_policy_engine::defaults;
use tfjob_policy_engine::engine::CodeBacking;
use tfjob_policy_engine::function_cache::{self, FunctionCache};
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
            rejected: 0,
            unwritten: 0,
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
            rejected: 0,
            unwritten: 0,
        }
    );
    drop(warm);

    // One flipped bit in the middle of the compiled code.
    let files: Vec<_> = fs::read_dir(dir.path().join("compiled"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "cwasm"))
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
            rejected: 1,
            unwritten: 0,
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

fn files(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir.join("compiled"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn compiled_code_is_mapped_and_a_restart_maps_the_pre_initialised_copy_without_compiling() {
    let dir = tempfile::tempdir().unwrap();
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o700)).unwrap();
    let d = defaults::find("default-decorate").unwrap();
    let settings = defaults::default_settings(d).to_string();

    let cold = engine_on(dir.path());
    let policy = cold.compile(d.wasm).unwrap();
    assert!(
        matches!(policy.code(), CodeBacking::Mapped { bytes } if *bytes > 0),
        "{:?}",
        policy.code()
    );
    assert_eq!(cold.prepare(&policy, d.name, &settings), Ok(true));
    let expected = decorate(&cold);
    assert_eq!((stats(&cold).hits, stats(&cold).misses), (0, 2));
    let kept = files(dir.path());
    assert_eq!(
        kept.iter().filter(|f| f.ends_with(".cwasm")).count(),
        2,
        "the plain component and the copy: {kept:?}"
    );
    drop((policy, cold));

    let warm = engine_on(dir.path());
    let policy = warm.compile(d.wasm).unwrap();
    assert_eq!(warm.prepare(&policy, d.name, &settings), Ok(true));
    assert!(policy.is_prepared_for(&settings));
    // What it holds loaded: the component and the copy, each measured as resident pages of a
    // mapping (none of the copy is touched before a call).
    let parts = policy.parts_for(&settings);
    assert_eq!(parts.len(), 2, "{parts:?}");
    assert_eq!(parts[0].id, policy.digest);
    assert!(parts[1].id.starts_with("prepared-"), "{parts:?}");
    let CodeBacking::Mapped { bytes: image } = policy.code() else {
        panic!("mapped")
    };
    assert!(
        parts.iter().all(|p| p.bytes <= *image as u64 * 2),
        "{parts:?} against an image of {image}"
    );
    assert_eq!(
        stats(&warm),
        CacheStats {
            hits: 2,
            misses: 0,
            rejected: 0,
            unwritten: 0,
        },
        "neither compiled nor pre-initialised again"
    );
    assert_eq!(decorate(&warm), expected);

    // Once nothing uses the module, its files leave the directory; the compiled functions,
    // shared by every module, stay.
    drop(policy);
    assert_eq!(warm.evict_unused(), 1);
    assert_eq!(
        files(dir.path()),
        vec![function_cache::FILE_NAME.to_owned()]
    );
}

/// `wasm` with a custom section naming `n` appended: the same code, another digest.
fn distinct(wasm: &[u8], n: u8) -> Vec<u8> {
    let name = b"variant";
    let mut out = wasm.to_vec();
    out.extend([0, (1 + name.len() + 1) as u8, name.len() as u8]);
    out.extend(name);
    out.push(n);
    out
}

fn stored_functions(dir: &std::path::Path) -> u64 {
    let path = dir.join("compiled").join(function_cache::FILE_NAME);
    FunctionCache::open(&path, function_cache::DEFAULT_MAX_BYTES)
        .unwrap()
        .stored_bytes()
        .unwrap()
}

#[test]
fn a_module_with_the_same_code_reuses_the_functions_compiled_for_another() {
    let dir = tempfile::tempdir().unwrap();
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o700)).unwrap();
    let d = defaults::find("default-decorate").unwrap();
    let settings = defaults::default_settings(d).to_string();
    let engine = engine_on(dir.path());

    let first = engine.compile(&distinct(d.wasm, 1)).unwrap();
    let alone = stored_functions(dir.path());
    assert!(alone > 0, "the first compilation files its functions");
    let second = engine.compile(&distinct(d.wasm, 2)).unwrap();
    assert_ne!(first.digest, second.digest);
    assert_eq!(stats(&engine).misses, 2, "each module has code of its own");
    // Cranelift's keys for a few functions differ from one compilation of the same code to
    // the next (measured: 30 to 60 of 800), so "nothing added" cannot be asserted; most of
    // the code is reused.
    let added = stored_functions(dir.path()) - alone;
    assert!(
        added < alone / 2,
        "the second module added {added} bytes of functions to {alone}"
    );
    assert_eq!(engine.prepare(&second, d.name, &settings), Ok(true));
    assert_eq!(
        decorate(&engine),
        decorate(&engine_on(tempfile::tempdir().unwrap().path())),
        "code made of filed functions decides as code compiled whole"
    );
}

#[test]
fn where_no_file_can_be_written_the_code_is_held_in_memory_and_still_serves() {
    let dir = tempfile::tempdir().unwrap();
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o700)).unwrap();
    let engine = engine_on(dir.path());
    // A directory that refuses every write, whoever the operator runs as.
    fs::remove_dir_all(dir.path().join("compiled")).unwrap();
    let d = defaults::find("default-decorate").unwrap();
    let settings = defaults::default_settings(d).to_string();
    let policy = engine.compile(d.wasm).unwrap();
    assert!(
        matches!(policy.code(), CodeBacking::Held { bytes } if *bytes > 0),
        "{:?}",
        policy.code()
    );
    assert_eq!(engine.prepare(&policy, d.name, &settings), Ok(true));
    // Held code counts in full.
    let parts = policy.parts_for(&settings);
    assert_eq!(
        parts[0].bytes,
        policy.code().bytes() as u64 + d.wasm.len() as u64
    );
    let elsewhere = tempfile::tempdir().unwrap();
    let expected = decorate(&engine_on(elsewhere.path()));
    assert_eq!(decorate(&engine), expected, "decides as mapped code does");
    assert!(stats(&engine).unwritten >= 2, "{:?}", stats(&engine));
}
