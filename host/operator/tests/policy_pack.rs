//! End-to-end tests of `tfjob-operator policy pack` and `policy list`.
//!
//! `pack` runs as a child process, as a platform team would: its output must parse as a
//! ConfigMap that the operator's loader (`configmap::load`) accepts, and everything the loader
//! would refuse must be refused up front with the cause. The ConfigMaps in `deploy/policies/`
//! are regenerated with the commands of their README and compared byte for byte. `list` runs
//! against the embedded API server, with ConfigMaps created through kube-rs.

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Output;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use kube::api::{Api, PostParams};
use pretty_assertions::assert_eq;
use serde_json::json;
use sha2::{Digest, Sha256};
use tfjob_cluster::http::kubeconfig::ClientAccess;
use tfjob_cluster::http::server::ServerOptions;
use tfjob_cluster::http::tls::ServingCertificates;
use tfjob_policy_engine::cluster_reads::ReadCeiling;
use tfjob_policy_engine::configmap::{self, PolicyStatus, Signed};
use tfjob_policy_engine::signature::{SigningKey, TrustedKeys};
use tfjob_policy_engine::{FailurePolicy, Hook, PolicyEngine, PolicyMode, SandboxLimits, defaults};

use common::{text, write};

/// Longest a single invocation may take before the test gives up on it.
const TIMEOUT: Duration = Duration::from_secs(120);

/// Runs the binary with `args`; kills it and fails the test after [`TIMEOUT`].
fn run(args: &[&str]) -> Output {
    let mut cmd = common::operator();
    cmd.args(args).env_remove("KUBECONFIG");
    common::run(cmd, None, TIMEOUT)
}

/// Asserts exit status 0 and an empty stderr; returns stdout.
fn success(args: &[&str]) -> String {
    common::expect_success(&run(args), &format!("{args:?}"))
}

/// Asserts exit status 2 and an empty stdout; returns stderr.
fn failure(args: &[&str]) -> String {
    common::expect_failure(&run(args), &format!("{args:?}"))
}

fn engine() -> PolicyEngine {
    PolicyEngine::new(SandboxLimits::default()).expect("engine starts")
}

fn parse(yaml: &str) -> ConfigMap {
    serde_yaml_ng::from_str(yaml).unwrap_or_else(|e| panic!("not a ConfigMap ({e}):\n{yaml}"))
}

fn sha256(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

// ---------------------------------------------------------------------------------------------
// pack
// ---------------------------------------------------------------------------------------------

#[test]
fn pack_prints_configmaps_the_operator_loads() {
    let engine = engine();
    for d in &defaults::DEFAULTS {
        for gzip in [false, true] {
            let spec = format!("default:{}", d.name);
            let mut args = vec![
                "policy",
                "pack",
                "--wasm",
                &spec,
                "--name",
                d.name,
                "--hooks",
                d.hook.as_str(),
            ];
            if gzip {
                args.push("--gzip");
            }
            let cm = parse(&success(&args));
            assert_eq!(
                cm.metadata.name.as_deref(),
                Some(&*format!("tfjob-policy-{}", d.name))
            );
            assert_eq!(cm.metadata.namespace.as_deref(), Some("tfjob-system"));
            assert_eq!(
                cm.metadata.labels,
                Some(BTreeMap::from([(
                    "policy.tfjob.dev/policy".to_owned(),
                    "true".to_owned()
                )]))
            );
            let key = if gzip {
                "policy.wasm.gz"
            } else {
                "policy.wasm"
            };
            assert!(cm.binary_data.as_ref().unwrap().contains_key(key), "{key}");
            let active = configmap::load(&engine, &cm)
                .unwrap_or_else(|e| panic!("{} gzip={gzip}: {e}", d.name));
            assert_eq!(active.compiled.digest, sha256(d.wasm));
            assert_eq!(active.manifest.sha256.as_deref(), Some(&*sha256(d.wasm)));
            assert_eq!(active.manifest.hooks, vec![d.hook]);
            // A default gets the settings the operator runs it with.
            assert_eq!(active.manifest.settings, defaults::default_settings(d));
        }
    }
}

#[test]
fn pack_writes_every_flag_into_the_manifest() {
    let dir = tempfile::tempdir().unwrap();
    let wasm = write(
        dir.path(),
        "resources.wasm",
        defaults::find("default-resources").unwrap().wasm,
    );
    for (file, contents) in [
        ("settings.yaml", "limits:\n  cpu: \"8\"\n"),
        ("settings.json", r#"{"limits": {"cpu": "8"}}"#),
    ] {
        let settings = write(dir.path(), file, contents.as_bytes());
        let cm = parse(&success(&[
            "policy",
            "pack",
            "--wasm",
            &wasm,
            "--name",
            "caps",
            "--hooks",
            "resources",
            "--settings",
            &settings,
            "--order",
            "-5",
            "--failure-policy",
            "Ignore",
            "--mode",
            "Shadow",
            "--namespace",
            "ml",
            "--deadline-ms",
            "20",
            "--memory-mib",
            "16",
            "--allowed-path",
            "spec.topologySpreadConstraints",
            "--host-path",
            "/home/kubernetes/bin/nvidia/lib64",
            "--capability",
            "secrets",
            "--read",
            "namespaces",
            "--context",
            "configmaps:job-namespace",
        ]));
        assert_eq!(cm.metadata.namespace.as_deref(), Some("ml"));
        // Under the default ceiling the declared capability is refused, naming the field; an
        // operator started with --policy-allow secrets loads it.
        let refused = configmap::load(&engine(), &cm).unwrap_err().to_string();
        assert!(refused.contains("capabilities.secrets"), "{refused}");
        let permissive = PolicyEngine::new(SandboxLimits {
            ceiling: tfjob_policy_engine::capabilities::Capabilities::everything(),
            reads: ReadCeiling::everything(),
            ..SandboxLimits::default()
        })
        .unwrap();
        // With secrets allowed, the read of ConfigMaps is what the default read ceiling refuses.
        let refused = configmap::load(
            &PolicyEngine::new(SandboxLimits {
                ceiling: tfjob_policy_engine::capabilities::Capabilities::everything(),
                ..SandboxLimits::default()
            })
            .unwrap(),
            &cm,
        )
        .unwrap_err()
        .to_string();
        assert!(
            refused.contains("reads[1].resource: configmaps"),
            "{refused}"
        );
        let active = configmap::load(&permissive, &cm).unwrap();
        let m = &active.manifest;
        assert_eq!(m.name, "caps");
        assert_eq!(m.order, -5);
        assert_eq!(m.failure_policy, FailurePolicy::Ignore);
        assert_eq!(m.mode, PolicyMode::Shadow);
        assert_eq!(m.settings, json!({"limits": {"cpu": "8"}}), "{file}");
        assert_eq!((m.deadline_ms, m.memory_mib), (Some(20), Some(16)));
        assert_eq!(m.allowed_paths, vec!["spec.topologySpreadConstraints"]);
        assert_eq!(
            m.capabilities.host_paths,
            vec!["/home/kubernetes/bin/nvidia/lib64"]
        );
        assert!(m.capabilities.secrets);
        let reads: Vec<String> = m
            .grant_reads(&ReadCeiling::everything())
            .unwrap()
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(reads, ["namespaces", "configmaps(job-namespace)"]);
        assert_eq!(
            active.allowed.grants().host_paths,
            vec!["/home/kubernetes/bin/nvidia/lib64"]
        );
        assert_eq!(active.limits.deadline, Duration::from_millis(20));
        assert_eq!(active.limits.memory, 16 << 20);
    }
    // Several hooks, comma-separated, of a module that exports them all.
    let hostile = write(dir.path(), "full.wasm", defaults::HOSTILE_POLICY_WASM);
    let cm = parse(&success(&[
        "policy",
        "pack",
        "--wasm",
        &hostile,
        "--name",
        "full",
        "--hooks",
        "decorate,resources,classify",
    ]));
    let active = configmap::load(&engine(), &cm).unwrap();
    assert_eq!(
        active.manifest.hooks,
        vec![Hook::Decorate, Hook::Resources, Hook::Classify]
    );
}

/// The default decoration module with a custom section of `padding` bytes appended: still a
/// valid component, larger than a ConfigMap may be, and compressible.
fn padded_component(padding: usize) -> Vec<u8> {
    fn leb128(mut n: usize, out: &mut Vec<u8>) {
        loop {
            let byte = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 {
                out.push(byte);
                return;
            }
            out.push(byte | 0x80);
        }
    }
    let name = b"padding";
    let mut body = Vec::new();
    leb128(name.len(), &mut body);
    body.extend_from_slice(name);
    body.resize(body.len() + padding, 0);
    let mut module = defaults::find("default-decorate").unwrap().wasm.to_vec();
    module.push(0); // custom section
    leb128(body.len(), &mut module);
    module.extend(body);
    module
}

#[test]
fn pack_refuses_what_the_operator_would_reject() {
    let dir = tempfile::tempdir().unwrap();
    let pack = |wasm: &str, name: &str, hooks: &str, extra: &[&str]| -> Vec<String> {
        let mut args: Vec<String> = ["policy", "pack", "--wasm", wasm, "--name", name]
            .map(String::from)
            .to_vec();
        args.extend(["--hooks".to_owned(), hooks.to_owned()]);
        args.extend(extra.iter().map(|s| (*s).to_owned()));
        args
    };
    let refuse = |args: Vec<String>| -> String {
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let err = failure(&refs);
        assert!(err.starts_with("error: "), "{err}");
        err
    };

    // A module that does not load.
    let corrupt = write(dir.path(), "corrupt.wasm", b"\0asm\x0d\0\x01\0garbage");
    let err = refuse(pack(&corrupt, "corrupt", "decorate", &[]));
    assert!(err.contains("corrupt.wasm"), "{err}");
    assert!(err.contains("(compile step)"), "{err}");

    // A module that does not export a declared hook.
    let err = refuse(pack(
        "default:default-resources",
        "r",
        "resources,decorate",
        &[],
    ));
    assert!(err.contains("(hooks step)"), "{err}");
    assert!(
        err.contains("does not export tfjob:policy/decorate@0.3.0"),
        "{err}"
    );

    // Settings that validate-settings refuses, naming the setting.
    let settings = write(dir.path(), "bad.yaml", b"limits: {cpu: lots}\n");
    let err = refuse(pack(
        "default:default-resources",
        "r",
        "resources",
        &["--settings", &settings],
    ));
    assert!(err.contains("(settings step)"), "{err}");
    assert!(err.contains("limits.cpu"), "{err}");

    // Limits above the operator's maximum, naming the field.
    let err = refuse(pack(
        "default:default-resources",
        "r",
        "resources",
        &["--deadline-ms", "51"],
    ));
    assert!(err.contains("(limits step)"), "{err}");
    assert!(err.contains("deadlineMs"), "{err}");
    let err = refuse(pack(
        "default:default-resources",
        "r",
        "resources",
        &["--memory-mib", "65"],
    ));
    assert!(err.contains("memoryMib"), "{err}");

    // A path no policy may change.
    let err = refuse(pack(
        "default:default-decorate",
        "d",
        "decorate",
        &["--allowed-path", "spec.containers[*].image"],
    ));
    assert!(err.contains("allowedPaths"), "{err}");
    assert!(err.contains("spec.containers[*].image"), "{err}");

    // Reads of what policies never read, of a namespaced kind without a scope, or with a scope
    // that is none, each naming the value.
    for (read, expected) in [
        ("secrets", "\"secrets\" is never readable by policies"),
        ("configmaps", "configmaps is namespaced"),
        ("nodes:everywhere", "scope \"everywhere\""),
    ] {
        let err = refuse(pack(
            "default:default-decorate",
            "d",
            "decorate",
            &["--read", read],
        ));
        assert!(err.contains("--read"), "{err}");
        assert!(err.contains(expected), "{read}: {err}");
    }
    // Host path volumes are a capability, not a path; prefixes must be absolute.
    let err = refuse(pack(
        "default:default-decorate",
        "d",
        "decorate",
        &["--allowed-path", "spec.volumes[*].hostPath"],
    ));
    assert!(err.contains("capabilities.hostPaths"), "{err}");
    let err = refuse(pack(
        "default:default-decorate",
        "d",
        "decorate",
        &["--host-path", "usr/lib"],
    ));
    assert!(err.contains("capabilities.hostPaths[0]"), "{err}");

    // A name that makes no ConfigMap name.
    let err = refuse(pack(
        "default:default-decorate",
        "GPU_rules",
        "decorate",
        &[],
    ));
    assert!(err.contains("--name"), "{err}");

    // Too large for a ConfigMap: refused with a hint, and fine compressed.
    let big = write(dir.path(), "big.wasm", &padded_component(1 << 20));
    let err = refuse(pack(&big, "big", "decorate", &[]));
    assert!(err.contains("(size step)"), "{err}");
    assert!(err.contains("1048576"), "{err}");
    assert!(err.contains("--gzip"), "{err}");
    let args = pack(&big, "big", "decorate", &["--gzip"]);
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let cm = parse(&success(&refs));
    assert!(configmap::load(&engine(), &cm).is_ok());

    // Unreadable input and unknown defaults name what is wrong.
    let err = refuse(pack("/no/such/policy.wasm", "x", "decorate", &[]));
    assert!(err.contains("/no/such/policy.wasm"), "{err}");
    let err = refuse(pack("default:default-decorator", "x", "decorate", &[]));
    assert!(err.contains("no default policy"), "{err}");
    let missing = dir.path().join("missing.yaml");
    let err = refuse(pack(
        "default:default-classify",
        "x",
        "classify",
        &["--settings", missing.to_str().unwrap()],
    ));
    assert!(
        err.contains("--settings") && err.contains("missing.yaml"),
        "{err}"
    );
    let output = run(&[
        "policy", "pack", "--wasm", &big, "--name", "x", "--hooks", "paint",
    ]);
    assert_eq!(output.status.code(), Some(2));
    assert!(text(&output.stderr).contains("unknown hook \"paint\""));
}

// ---------------------------------------------------------------------------------------------
// signing
// ---------------------------------------------------------------------------------------------

/// A P-256 (PKCS#8) and an Ed25519 private key from a fixed seed, as PEM, with the public keys
/// an operator would trust.
fn key_pairs(seed: &str) -> [(String, String); 2] {
    use p256::pkcs8::{EncodePrivateKey as _, EncodePublicKey as _, LineEnding};
    let bytes = Sha256::digest(seed.as_bytes());
    let p256 = p256::ecdsa::SigningKey::from_slice(&bytes).unwrap();
    let ed25519 = ed25519_dalek::SigningKey::from_bytes(&bytes.into());
    [
        (
            p256.to_pkcs8_pem(LineEnding::LF).unwrap().to_string(),
            p256.verifying_key()
                .to_public_key_pem(LineEnding::LF)
                .unwrap(),
        ),
        (
            ed25519.to_pkcs8_pem(LineEnding::LF).unwrap().to_string(),
            ed25519
                .verifying_key()
                .to_public_key_pem(LineEnding::LF)
                .unwrap(),
        ),
    ]
}

#[test]
fn pack_signs_the_module_for_an_operator_that_trusts_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine();
    let d = defaults::find("default-decorate").unwrap();
    let spec = format!("default:{}", d.name);
    for (i, (private, public)) in key_pairs("pack").into_iter().enumerate() {
        let key = write(dir.path(), &format!("key{i}.pem"), private.as_bytes());
        let trusted = TrustedKeys::from_pem("trusted.pub", &public).unwrap();
        for gzip in [false, true] {
            let mut unsigned = vec!["policy", "pack", "--wasm", &spec, "--name", d.name];
            unsigned.extend(["--hooks", "decorate"]);
            if gzip {
                unsigned.push("--gzip");
            }
            let mut args = unsigned.clone();
            args.extend(["--sign-key", &key]);
            let out = success(&args);
            let cm = parse(&out);
            let signature = &cm.data.as_ref().unwrap()[configmap::SIGNATURE_KEY];
            // Over the module itself, whether or not it is stored compressed.
            let id = trusted.verify(d.wasm, signature).unwrap();
            let (_, signed) = configmap::load_verified(&engine, &cm, &trusted)
                .unwrap_or_else(|e| panic!("key{i} gzip={gzip}: {e}"));
            assert_eq!(signed, Signed::By(id));
            // Deterministic signatures keep packing reproducible.
            assert_eq!(success(&args), out);
            // Unsigned, the same policy is refused by that operator.
            let err = configmap::load_verified(&engine, &parse(&success(&unsigned)), &trusted)
                .unwrap_err();
            assert_eq!(err.step(), "signature", "{err}");
        }
    }
}

#[test]
fn pack_takes_a_signature_made_elsewhere() {
    let dir = tempfile::tempdir().unwrap();
    let d = defaults::find("default-classify").unwrap();
    let [(private, public), _] = key_pairs("cosign");
    // What `cosign sign-blob --key` prints: base64 of a DER ECDSA signature, and a newline.
    let made_elsewhere = SigningKey::from_pem("cosign.key", &private)
        .unwrap()
        .sign(d.wasm);
    let sig = write(
        dir.path(),
        "policy.wasm.sig",
        format!("{made_elsewhere}\n").as_bytes(),
    );
    let pack = |sig: &str| {
        run(&[
            "policy",
            "pack",
            "--wasm",
            "default:default-classify",
            "--name",
            "default-classify",
            "--hooks",
            "classify",
            "--gzip",
            "--signature",
            sig,
        ])
    };
    let cm = parse(&common::expect_success(&pack(&sig), "pack --signature"));
    assert_eq!(
        cm.data.as_ref().unwrap()[configmap::SIGNATURE_KEY],
        made_elsewhere
    );
    let trusted = TrustedKeys::from_pem("cosign.pub", &public).unwrap();
    let (_, signed) = configmap::load_verified(&engine(), &cm, &trusted).unwrap();
    assert!(matches!(signed, Signed::By(_)), "{signed:?}");

    let garbled = write(dir.path(), "garbled.sig", b"MEUCIQ*not base64\n");
    let err = common::expect_failure(&pack(&garbled), "pack --signature garbled");
    assert!(
        err.starts_with(&format!("error: --signature {garbled}: invalid base64")),
        "{err}"
    );
}

/// A CEL document with one mutation, as a platform team writes it (comments and all).
const CEL_DOCUMENT: &str = "# GPU pods on GPU nodes\nmutations:\n- patchType: ApplyConfiguration\n  \
                            applyConfiguration:\n    expression: \"Object{spec: \
                            Object.spec{nodeSelector: {'gpu': 'true'}}}\"\n";

#[test]
fn pack_cel_prints_the_document_as_written_beside_the_flags_manifest() {
    let dir = tempfile::tempdir().unwrap();
    let document = write(dir.path(), "gpu.cel.yaml", CEL_DOCUMENT.as_bytes());
    let out = success(&[
        "policy", "pack", "--cel", &document, "--name", "gpu", "--order", "7", "--mode", "Shadow",
    ]);
    let cm = parse(&out);
    let data = cm.data.as_ref().unwrap();
    assert_eq!(data["policy.cel.yaml"], CEL_DOCUMENT);
    assert_eq!(data["policy.yaml"], "name: gpu\norder: 7\nmode: Shadow\n");
    assert!(cm.binary_data.is_none());
    let policy = configmap::load(&engine(), &cm).expect("the operator loads it");
    assert_eq!(policy.manifest.hooks, vec![Hook::Decorate]);
    assert_eq!(policy.manifest.mode, PolicyMode::Shadow);

    // Signed, the signature is over the document's text; an operator trusting the key loads it.
    for (i, (private, public)) in key_pairs("cel").into_iter().enumerate() {
        let key = write(dir.path(), &format!("key{i}.pem"), private.as_bytes());
        let trusted = TrustedKeys::from_pem("trusted.pub", &public).unwrap();
        let cm = parse(&success(&[
            "policy",
            "pack",
            "--cel",
            &document,
            "--name",
            "gpu",
            "--sign-key",
            &key,
        ]));
        let signature = &cm.data.as_ref().unwrap()["policy.cel.yaml.sig"];
        let id = trusted.verify(CEL_DOCUMENT.as_bytes(), signature).unwrap();
        let (_, signed) = configmap::load_verified(&engine(), &cm, &trusted).unwrap();
        assert_eq!(signed, Signed::By(id));
    }
}

#[test]
fn pack_cel_refuses_what_the_operator_would_reject_with_the_expression_and_a_caret() {
    let dir = tempfile::tempdir().unwrap();
    let broken = CEL_DOCUMENT.replace("}}}", "}}");
    let document = write(dir.path(), "broken.cel.yaml", broken.as_bytes());
    let err = failure(&["policy", "pack", "--cel", &document, "--name", "gpu"]);
    assert!(
        err.contains("the operator would reject this policy (document step)"),
        "{err}"
    );
    assert!(
        err.contains("mutations[0].applyConfiguration.expression"),
        "{err}"
    );
    assert!(
        err.contains("| Object{spec: Object.spec{nodeSelector: {'gpu': 'true'}}\n"),
        "{err}"
    );
    assert!(err.contains('^'), "{err}");

    let empty = write(dir.path(), "empty.cel.yaml", b"variables: []\n");
    let err = failure(&["policy", "pack", "--cel", &empty, "--name", "gpu"]);
    assert!(
        err.contains("has no mutations, resourceMutations or verdicts"),
        "{err}"
    );
    let document = write(dir.path(), "gpu.cel.yaml", CEL_DOCUMENT.as_bytes());
    for (flag, value) in [
        ("--hooks", "decorate"),
        ("--wasm", "p.wasm"),
        ("--gzip", ""),
    ] {
        let mut args = vec!["policy", "pack", "--cel", &document, "--name", "gpu", flag];
        if !value.is_empty() {
            args.push(value);
        }
        let err = failure(&args);
        assert!(err.contains("cannot be used with"), "{flag}: {err}");
    }
}

#[test]
fn pack_refuses_a_key_it_cannot_sign_with() {
    let dir = tempfile::tempdir().unwrap();
    let [(_, public), _] = key_pairs("pack");
    let public = write(dir.path(), "signing.pub", public.as_bytes());
    let pack = |key: &str| {
        failure(&[
            "policy",
            "pack",
            "--wasm",
            "default:default-decorate",
            "--name",
            "default-decorate",
            "--hooks",
            "decorate",
            "--sign-key",
            key,
        ])
    };
    let err = pack(&public);
    assert!(
        err.starts_with(&format!(
            "error: --sign-key {public}: PEM block PUBLIC KEY: expected a private key"
        )),
        "{err}"
    );
    let missing = dir.path().join("missing.pem");
    let err = pack(missing.to_str().unwrap());
    assert!(
        err.starts_with(&format!("error: --sign-key: reading {}", missing.display())),
        "{err}"
    );
}

#[test]
fn run_exits_naming_a_trusted_key_file_it_cannot_use() {
    let dir = tempfile::tempdir().unwrap();
    let [(private, _), _] = key_pairs("run");
    let private = write(dir.path(), "private.pem", private.as_bytes());
    let notes = write(dir.path(), "notes.txt", b"not a key\n");
    let missing = dir.path().join("missing.pub");
    for (file, cause) in [
        (private.as_str(), "expected a public key"),
        (notes.as_str(), "no PEM block -----BEGIN PUBLIC KEY-----"),
        (missing.to_str().unwrap(), "reading"),
    ] {
        let output = run(&[
            "run",
            "--kubeconfig",
            "/nonexistent/kubeconfig",
            "--policy-trusted-key",
            file,
        ]);
        assert_eq!(output.status.code(), Some(1), "{file}");
        let err = text(&output.stderr);
        assert!(err.contains(file) && err.contains(cause), "{file}: {err}");
        assert!(err.contains("--policy-trusted-key"), "{err}");
    }
}

// ---------------------------------------------------------------------------------------------
// deploy/policies
// ---------------------------------------------------------------------------------------------

/// Splits a shell command line: words separated by spaces, `'...'` quoting.
fn shell_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word: Option<String> = None;
    let mut quoted = false;
    for c in line.chars() {
        match c {
            '\'' => {
                quoted = !quoted;
                word.get_or_insert_with(String::new);
            }
            ' ' if !quoted => words.extend(word.take()),
            c => word.get_or_insert_with(String::new).push(c),
        }
    }
    words.extend(word);
    words
}

/// The `policy pack` commands of `deploy/policies/README.md`: arguments and output file.
fn readme_commands() -> Vec<(Vec<String>, String)> {
    let readme = std::fs::read_to_string(common::repo("deploy/policies/README.md"))
        .expect("deploy/policies/README.md");
    readme
        .lines()
        .filter_map(|line| line.strip_prefix("cargo run -p tfjob-operator -- "))
        .map(|command| {
            let words = shell_words(command);
            let at = words.iter().position(|w| w == ">").expect("> FILE");
            (words[..at].to_vec(), words[at + 1].clone())
        })
        .collect()
}

#[test]
fn checked_in_policy_configmaps_are_current() {
    let commands = readme_commands();
    let files: Vec<&str> = commands.iter().map(|(_, f)| f.as_str()).collect();
    assert_eq!(
        files,
        [
            "deploy/policies/decorate.yaml",
            "deploy/policies/resources.yaml",
            "deploy/policies/classify.yaml",
            "deploy/policies/decorate-from-registry.yaml"
        ]
    );
    let update = std::env::var_os("UPDATE_POLICIES").is_some_and(|v| v == "1");
    let mut stale = Vec::new();
    for (args, file) in &commands {
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let generated = success(&refs);
        let path = common::repo(file);
        if update {
            std::fs::write(&path, &generated).unwrap();
            continue;
        }
        let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
        if checked_in != generated {
            stale.push(file.as_str());
        }
        // Whatever the bytes, what is checked in is what the operator embeds.
        let cm = parse(&checked_in);
        let active = match configmap::module_reference(&cm).unwrap() {
            None => configmap::load(&engine(), &cm).unwrap(),
            // Named in a registry: what the operator loads once it has pulled the default.
            Some(_) => {
                let name = configmap::read_manifest(&cm).expect("a manifest").name;
                let d = defaults::find(&name).expect("a default's name");
                let source =
                    configmap::read_referenced(&cm, d.wasm.to_vec(), configmap::Signed::No)
                        .unwrap();
                configmap::activate_source(&engine(), source).unwrap()
            }
        };
        let d = defaults::find(active.name()).expect("a default's name");
        assert_eq!(active.compiled.digest, sha256(d.wasm), "{file}");
    }
    assert!(
        stale.is_empty(),
        "{stale:?} differ from what `policy pack` makes of the embedded defaults; regenerate \
         them with `UPDATE_POLICIES=1 cargo test -p tfjob-operator --test integration policy_pack::` (the \
         commands are in deploy/policies/README.md)"
    );
}

// ---------------------------------------------------------------------------------------------
// list
// ---------------------------------------------------------------------------------------------

/// A kubeconfig file for the server at `access`, as `up` writes it.
fn kubeconfig(dir: &Path, access: &ClientAccess) -> String {
    write(
        dir,
        "kubeconfig",
        access.admin_kubeconfig("default").as_bytes(),
    )
}

/// Serves `store` over HTTPS, as `up` does: how clients reach it, and a kube-rs client of the
/// administrator's kubeconfig.
async fn serve_https(store: Arc<tfjob_cluster::Store>) -> (ClientAccess, Client) {
    let certificates = ServingCertificates::generate().unwrap();
    let options = ServerOptions::default().with_https(&certificates).unwrap();
    let running = tfjob_cluster::http::server::start_with(store, 0, options)
        .await
        .unwrap();
    let access = ClientAccess::https(running.addr, &certificates);
    let config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::from_yaml(&access.admin_kubeconfig("default")).unwrap(),
        &Default::default(),
    )
    .await
    .unwrap();
    (access, Client::try_from(config).unwrap())
}

/// A policy ConfigMap as `pack` prints it, with a status annotation when given.
fn policy_configmap(
    namespace: &str,
    name: &str,
    hooks: &str,
    mode: &str,
    status: Option<&str>,
) -> ConfigMap {
    let module = match hooks {
        "classify" => "default:default-classify",
        "resources" => "default:default-resources",
        _ => "default:default-decorate",
    };
    let mut cm = parse(&success(&[
        "policy",
        "pack",
        "--wasm",
        module,
        "--name",
        name,
        "--hooks",
        hooks,
        "--mode",
        mode,
        "--namespace",
        namespace,
        "--gzip",
    ]));
    if let Some(status) = status {
        cm.metadata.annotations = Some(BTreeMap::from([(
            configmap::STATUS_ANNOTATION.to_owned(),
            status.to_owned(),
        )]));
    }
    cm
}

/// Cells of a `policy list` line: columns are at least three spaces apart.
fn cells(line: &str) -> Vec<String> {
    line.split("   ")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .map(str::to_owned)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_shows_policy_configmaps_with_the_operators_status() {
    let store = tfjob_cluster::Store::new();
    let (access, client) = serve_https(Arc::clone(&store)).await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = kubeconfig(dir.path(), &access);

    let at: jiff::Timestamp = "2026-01-02T03:04:05Z".parse().unwrap();
    let classify = defaults::find("default-classify").unwrap();
    let active = PolicyStatus::active(&sha256(classify.wasm), at).to_annotation();
    let rejected =
        PolicyStatus::rejected(&configmap::LoadError::Ambiguous, None, at).to_annotation();
    // Packing runs the binary: off the runtime that serves the API.
    let configmaps = tokio::task::spawn_blocking(move || {
        [
            policy_configmap(
                "tfjob-system",
                "default-classify",
                "classify",
                "Enforce",
                Some(&active),
            ),
            policy_configmap(
                "tfjob-system",
                "gpu",
                "decorate",
                "Enforce",
                Some(&rejected),
            ),
            policy_configmap(
                "tfjob-system",
                "broken",
                "resources",
                "Enforce",
                Some("{not json"),
            ),
            policy_configmap("ml", "canary", "classify", "Shadow", None),
        ]
    })
    .await
    .unwrap();
    for cm in &configmaps {
        let api: Api<ConfigMap> =
            Api::namespaced(client.clone(), cm.metadata.namespace.as_deref().unwrap());
        api.create(&PostParams::default(), cm).await.unwrap();
    }
    // A ConfigMap without the label is not a policy.
    let unrelated: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "tfjob-policy-lookalike", "namespace": "tfjob-system"},
        "data": {"policy.yaml": "hooks: [decorate]\n"}
    }))
    .unwrap();
    Api::<ConfigMap>::namespaced(client.clone(), "tfjob-system")
        .create(&PostParams::default(), &unrelated)
        .await
        .unwrap();

    let list = move |extra: &[&str]| {
        let mut args = vec!["policy", "list", "--kubeconfig", &kubeconfig];
        args.extend_from_slice(extra);
        let args: Vec<String> = args.into_iter().map(String::from).collect();
        tokio::task::spawn_blocking(move || {
            let refs: Vec<&str> = args.iter().map(String::as_str).collect();
            run(&refs)
        })
    };

    // The default namespace is tfjob-system.
    let output = list(&[]).await.unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    let table = text(&output.stdout);
    let lines: Vec<Vec<String>> = table.lines().map(cells).collect();
    assert_eq!(
        lines[0],
        [
            "NAMESPACE",
            "NAME",
            "CONFIGMAP",
            "HOOKS",
            "MODE",
            "SCOPE",
            "GRANTED",
            "READS",
            "STATE",
            "DIGEST",
            "MEMORY",
            "LOADED-AT",
            "ERROR"
        ],
        "{table}"
    );
    assert_eq!(lines.len(), 4, "three policy ConfigMaps:\n{table}");
    assert_eq!(
        lines[1],
        [
            "tfjob-system",
            "broken",
            "tfjob-policy-broken",
            "1 (resources)",
            "Enforce",
            "-",
            "-",
            "-",
            "Unknown",
            "-",
            "-",
            "-",
            "unreadable policy.tfjob.dev/status annotation: key must be a string at line 1 column 2"
        ],
        "{table}"
    );
    assert_eq!(
        lines[2],
        [
            "tfjob-system",
            "default-classify",
            "tfjob-policy-default-classify",
            "1 (classify)",
            "Enforce",
            "-",
            "-",
            "-",
            "Active",
            &sha256(classify.wasm)[..12],
            "-",
            "2026-01-02T03:04:05Z",
            "-"
        ],
        "{table}"
    );
    assert_eq!(
        lines[3],
        [
            "tfjob-system",
            "gpu",
            "tfjob-policy-gpu",
            "1 (decorate)",
            "Enforce",
            "-",
            "-",
            "-",
            "Rejected",
            "-",
            "-",
            "2026-01-02T03:04:05Z",
            "binaryData keys policy.wasm and policy.wasm.gz are both set; keep one"
        ],
        "{table}"
    );
    // Columns line up.
    let header = table.lines().next().unwrap();
    for line in table.lines().skip(1) {
        assert_eq!(
            line.find("tfjob-policy-"),
            header.find("CONFIGMAP"),
            "{table}"
        );
    }

    // Another namespace, and all of them.
    let output = list(&["-n", "ml"]).await.unwrap();
    let table = text(&output.stdout);
    let lines: Vec<Vec<String>> = table.lines().map(cells).collect();
    assert_eq!(lines.len(), 2, "{table}");
    assert_eq!(
        lines[1],
        [
            "ml",
            "canary",
            "tfjob-policy-canary",
            "1 (classify)",
            "Shadow",
            "-",
            "-",
            "-",
            "Unknown",
            "-",
            "-",
            "-",
            "-"
        ]
    );
    let output = list(&["-A"]).await.unwrap();
    let table = text(&output.stdout);
    let namespaces: Vec<String> = table.lines().skip(1).map(|l| cells(l)[0].clone()).collect();
    assert_eq!(
        namespaces,
        ["ml", "tfjob-system", "tfjob-system", "tfjob-system"],
        "{table}"
    );

    // None found: said on stderr, nothing on stdout.
    let output = list(&["--namespace", "empty"]).await.unwrap();
    assert_eq!(output.status.code(), Some(0));
    assert_eq!(text(&output.stdout), "");
    assert!(
        text(&output.stderr).contains("No policy ConfigMaps"),
        "{}",
        text(&output.stderr)
    );
}

#[test]
fn list_without_a_reachable_cluster_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    // A port nothing listens on: bound, then released.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let nobody = ClientAccess::https(
        ([127, 0, 0, 1], port).into(),
        &ServingCertificates::generate().unwrap(),
    );
    let kubeconfig = kubeconfig(dir.path(), &nobody);
    let err = failure(&["policy", "list", "--kubeconfig", &kubeconfig]);
    assert!(err.contains("listing policy ConfigMaps"), "{err}");
    let err = failure(&["policy", "list", "--kubeconfig", "/no/such/kubeconfig"]);
    assert!(err.contains("/no/such/kubeconfig"), "{err}");
}
