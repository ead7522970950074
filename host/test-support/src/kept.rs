//! Build outputs kept outside the clone between runs, so that a second run of the suite does
//! not build again what did not change.
//!
//! A componentize run takes 10 to 30 s, and several test files build the same examples. A
//! built component is kept under the digest of everything that goes into its build: the tool
//! (its path, size and time, so a reinstalled tool misses), the world, the options, the
//! contract, the SDK and the policy's sources. A build whose inputs changed in any byte runs
//! again. Cargo builds of policy crates keep their target directories there too. `policy new`'s
//! one-command builds never go through any of this.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use sha2::{Digest, Sha256};

/// Kept components unused for this long are removed when another is added.
const KEPT_UNUSED: Duration = Duration::from_secs(14 * 24 * 3600);

/// `sub` of the directory where build outputs are kept between runs: `TFJOB_TEST_CACHE`, else
/// `tfjob-operator/tests` in the user's cache directory (`XDG_CACHE_HOME`, else `~/.cache`).
/// `TFJOB_TEST_CACHE=off` keeps nothing (`None`).
pub fn kept_between_runs(sub: &str) -> Option<PathBuf> {
    let root = match std::env::var_os("TFJOB_TEST_CACHE") {
        Some(dir) if dir == "off" => return None,
        Some(dir) => PathBuf::from(dir),
        None => std::env::var_os("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|home| Path::new(&home).join(".cache")))?
            .join("tfjob-operator/tests"),
    };
    Some(root.join(sub))
}

/// A directory for compiled policies kept between runs (mode 0700, as `--policy-cache-dir`
/// wants it), where [`kept_between_runs`] allows one. Every test process that loads policies
/// (the default ones above all: about five seconds of compiling each in a debug build) finds
/// them compiled there; the cache's files are written whole and renamed into place, so
/// processes running at once share it safely. Files written more than two weeks ago go (a file
/// still in use is compiled again once).
pub fn compiled_policies_dir() -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = kept_between_runs("compiled-policies")?;
    std::fs::create_dir_all(&dir)
        .unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))
        .unwrap_or_else(|e| panic!("cannot make {} private: {e}", dir.display()));
    forget_unused(&dir.join("compiled"));
    Some(dir)
}

/// A cargo target directory named `name` for builds of policy crates: kept between runs where
/// it can be, else `name` in `fallback` (a test's `CARGO_TARGET_TMPDIR`).
pub fn policy_target_dir(name: &str, fallback: &Path) -> PathBuf {
    kept_between_runs(&format!("cargo-target-{name}")).unwrap_or_else(|| fallback.join(name))
}

/// The inputs of one build, digested: each part is framed by its length, so no two different
/// sequences of parts read the same.
pub struct BuildInputs(Sha256);

impl BuildInputs {
    pub fn new(tool: &Path) -> Self {
        let mut inputs = BuildInputs(Sha256::new());
        inputs.part(tool.as_os_str().as_encoded_bytes());
        let meta = std::fs::metadata(tool)
            .unwrap_or_else(|e| panic!("the build tool {} is unreadable: {e}", tool.display()));
        let modified = meta
            .modified()
            .ok()
            .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_nanos());
        inputs.part(&meta.len().to_le_bytes());
        inputs.part(&modified.to_le_bytes());
        inputs
    }

    pub fn part(&mut self, bytes: &[u8]) -> &mut Self {
        self.0.update((bytes.len() as u64).to_le_bytes());
        self.0.update(bytes);
        self
    }

    /// Every file under `path` (or `path` itself), by its path relative to `path` and its
    /// bytes, in a stable order. Python's byte-code caches and installed Node modules are left
    /// out: they are made by running things, not written by authors.
    pub fn tree(&mut self, path: &Path) -> &mut Self {
        let mut files = Vec::new();
        if path.is_file() {
            files.push((PathBuf::new(), path.to_path_buf()));
        } else {
            collect_files(path, Path::new(""), &mut files);
            files.sort();
        }
        for (relative, file) in files {
            self.part(relative.as_os_str().as_encoded_bytes());
            let bytes = std::fs::read(&file).unwrap_or_else(|e| {
                panic!("the build input {} is unreadable: {e}", file.display())
            });
            self.part(&bytes);
        }
        self
    }

    fn key(self) -> String {
        hex::encode(self.0.finalize())
    }
}

/// The files under `root`'s directory `relative`, each with its path relative to `root`.
fn collect_files(root: &Path, relative: &Path, files: &mut Vec<(PathBuf, PathBuf)>) {
    let dir = root.join(relative);
    let entries = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("the build input {} is unreadable: {e}", dir.display()));
    for entry in entries {
        let entry = entry.expect("a directory entry is readable");
        let name = entry.file_name();
        if name == "__pycache__" || name == "node_modules" {
            continue;
        }
        let path = entry.path();
        if path.is_dir() {
            collect_files(root, &relative.join(name), files);
        } else {
            files.push((relative.join(name), path));
        }
    }
}

/// Writes to `out` the component kept under `inputs`' key, or runs `build` into `out` and
/// keeps what it wrote.
pub fn build_or_reuse(inputs: BuildInputs, out: &Path, build: impl FnOnce(&Path)) {
    match kept_between_runs("components") {
        Some(dir) => build_or_reuse_in(&dir, inputs, out, build),
        None => build(out),
    }
}

fn build_or_reuse_in(dir: &Path, inputs: BuildInputs, out: &Path, build: impl FnOnce(&Path)) {
    let key = inputs.key();
    let kept = dir.join(format!("{key}.wasm"));
    if std::fs::copy(&kept, out).is_ok() {
        // Used again: not among the ones to remove.
        if let Ok(file) = std::fs::File::options().append(true).open(&kept) {
            let _ = file.set_modified(SystemTime::now());
        }
        return;
    }
    build(out);
    std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("cannot make {}: {e}", dir.display()));
    forget_unused(dir);
    // Written under a name of its own and renamed, so that a build running beside this one
    // never copies half a file.
    let partial = dir.join(format!("{key}.{}.partial", std::process::id()));
    std::fs::copy(out, &partial)
        .and_then(|_| std::fs::rename(&partial, &kept))
        .unwrap_or_else(|e| panic!("cannot keep {} in {}: {e}", out.display(), dir.display()));
}

/// Removes the files directly in `dir` that were last written (or, for kept components, last
/// used) longer ago than two weeks, so that what the suite keeps does not grow with every
/// change of its inputs.
pub fn forget_unused(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let unused_for = entry
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok());
        if unused_for.is_some_and(|d| d > KEPT_UNUSED) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key_of(dir: &Path) -> String {
        let tool = dir.join("tool");
        let mut inputs = BuildInputs::new(&tool);
        inputs
            .part(b"world")
            .tree(&dir.join("contract.wit"))
            .tree(&dir.join("src"));
        inputs.key()
    }

    #[test]
    fn a_key_changes_with_any_byte_or_name_of_the_inputs_and_not_with_byte_code_caches() {
        let temp = tempfile::tempdir().unwrap();
        let dir = temp.path().to_path_buf();
        std::fs::write(dir.join("tool"), "#!/bin/sh\n").unwrap();
        std::fs::write(dir.join("contract.wit"), "package a:b;\n").unwrap();
        std::fs::create_dir_all(dir.join("src/pkg")).unwrap();
        std::fs::write(dir.join("src/app.py"), "x = 1\n").unwrap();
        std::fs::write(dir.join("src/pkg/mod.py"), "y = 2\n").unwrap();
        let first = key_of(&dir);
        assert_eq!(key_of(&dir), first);

        std::fs::create_dir_all(dir.join("src/__pycache__")).unwrap();
        std::fs::write(dir.join("src/__pycache__/app.pyc"), [0u8; 8]).unwrap();
        assert_eq!(key_of(&dir), first, "byte code is an output");

        std::fs::write(dir.join("src/app.py"), "x = 2\n").unwrap();
        let edited = key_of(&dir);
        assert_ne!(edited, first);

        std::fs::rename(dir.join("src/pkg/mod.py"), dir.join("src/pkg/other.py")).unwrap();
        let renamed = key_of(&dir);
        assert_ne!(renamed, edited, "a renamed file is another input");

        // A single file is an input too.
        std::fs::write(dir.join("contract.wit"), "package a:c;\n").unwrap();
        assert_ne!(key_of(&dir), renamed);

        // Framing: moving bytes from one part to the next is another input.
        let tool = dir.join("tool");
        let mut ab = BuildInputs::new(&tool);
        ab.part(b"ab").part(b"c");
        let mut a_bc = BuildInputs::new(&tool);
        a_bc.part(b"a").part(b"bc");
        assert_ne!(ab.key(), a_bc.key());
    }

    #[test]
    fn a_component_is_built_once_per_inputs_and_copied_out_after() {
        let temp = tempfile::tempdir().unwrap();
        let dir = temp.path();
        std::fs::write(dir.join("tool"), "#!/bin/sh\n").unwrap();
        let kept = dir.join("kept");
        let inputs = |source: &[u8]| {
            let mut inputs = BuildInputs::new(&dir.join("tool"));
            inputs.part(source);
            inputs
        };
        let mut builds = 0;
        for (source, out) in [(b"one", "a.wasm"), (b"one", "b.wasm"), (b"two", "c.wasm")] {
            build_or_reuse_in(&kept, inputs(source), &dir.join(out), |out| {
                builds += 1;
                std::fs::write(out, source).unwrap();
            });
            assert_eq!(std::fs::read(dir.join(out)).unwrap(), source);
        }
        assert_eq!(builds, 2, "the second build of the same inputs was a copy");
        let mut names: Vec<_> = std::fs::read_dir(&kept)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(names.len(), 2, "{names:?}");
        assert!(
            names.iter().all(|n| n.ends_with(".wasm")),
            "no partial file left: {names:?}"
        );
    }
}
