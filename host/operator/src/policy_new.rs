//! `tfjob-operator policy new NAME [--lang rust|python|js]`: a ready-to-build policy project
//! for a platform team.
//!
//! Python and JavaScript projects carry the operator's SDK for their language (from
//! `guest-policies/sdk-python` and `sdk-js`, as this binary was built with them), the contract's
//! WIT, a policy file, the same test suite as a Rust crate, and a one-command build with the
//! tool pinned: `python3 build.py` (componentize-py into `.venv`) or `npm run build`
//! (componentize-js, from the lock file the SDK carries). The rest of this paragraph is about
//! Rust, the default.
//!
//! Starting a policy from the SDK's README means copying a manifest, a WIT file and a skeleton
//! and getting each detail right (the crate type, the workspace table, the world, the settings
//! type). The scaffold writes all of it for the chosen hooks: `Cargo.toml` with the SDK as a
//! path dependency (inside a checkout of this repository, or with `--sdk-path`; elsewhere the
//! SDK this binary carries, written into the crate's `vendor/` by [`crate::sdk_bundle`]), the
//! contract's WIT exactly as this operator embeds it, `src/lib.rs` with a settings type and one implementation per hook, a native unit test,
//! a test suite for `policy test --suite` and a README. It builds with
//! `cargo build --release --target wasm32-wasip2` and passes its own suite as generated.
//!
//! The name becomes the crate's name, its Rust type and the policy's name in the cluster, so it
//! is held to a DNS label that is also a valid crate name: nothing in it can reach a path
//! outside the directory. That directory must be new or empty; files are created, never
//! overwritten, and what was written is removed again if writing fails half way.
//!
//! The templates live in `templates/policy-new/`. Their only syntax is `{{key}}` for a value and
//! `{{#hook}}` ... `{{/hook}}` lines around what only that hook's policy has.

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::io::Write as _;
use std::path::{Component, Path, PathBuf};
use std::process::ExitCode;

use clap::Args;
use tfjob_policy_engine::Hook;

/// The contract as the operator embeds it: a generated policy always matches its operator.
const CONTRACT_WIT: &str = include_str!("../../../wit/policy.wit");

const CARGO_TOML: &str = include_str!("../templates/policy-new/Cargo.toml");
const LIB_RS: &str = include_str!("../templates/policy-new/lib.rs");
const WORLD_WIT: &str = include_str!("../templates/policy-new/world.wit");
const SUITE_YAML: &str = include_str!("../templates/policy-new/suite.yaml");
const README_MD: &str = include_str!("../templates/policy-new/README.md");
const GITIGNORE: &str = include_str!("../templates/policy-new/gitignore");
const WORKER_POD: &str = include_str!("../templates/policy-new/worker.yaml");
const OOM_KILLED_POD: &str = include_str!("../templates/policy-new/oom-killed.yaml");
const NAMESPACES: &str = include_str!("../templates/policy-new/namespaces.yaml");
const PYTHON_APP: &str = include_str!("../templates/policy-new/python/app.py");
const PYTHON_BUILD: &str = include_str!("../templates/policy-new/python/build.py");
const PYTHON_README: &str = include_str!("../templates/policy-new/python/README.md");
const PYTHON_GITIGNORE: &str = include_str!("../templates/policy-new/python/gitignore");
const JS_POLICY: &str = include_str!("../templates/policy-new/js/policy.js");
const JS_PACKAGE: &str = include_str!("../templates/policy-new/js/package.json");
const JS_README: &str = include_str!("../templates/policy-new/js/README.md");
const JS_GITIGNORE: &str = include_str!("../templates/policy-new/js/gitignore");
const CEL_POLICY: &str = include_str!("../templates/policy-new/cel/policy.cel.yaml");
const CEL_SUITE: &str = include_str!("../templates/policy-new/cel/suite.yaml");
const CEL_README: &str = include_str!("../templates/policy-new/cel/README.md");

/// The language a policy is written in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Lang {
    /// A Rust crate on the Rust SDK, built with cargo for `wasm32-wasip2`.
    Rust,
    /// Python, built with componentize-py.
    Python,
    /// JavaScript, built with componentize-js.
    Js,
    /// A CEL document, run by the operator's CEL evaluator: nothing to build.
    Cel,
}

impl Lang {
    /// The command that builds the component, run in the project's directory; none for CEL.
    fn build_command(self) -> Option<&'static str> {
        match self {
            Lang::Rust => Some("cargo build --release --target wasm32-wasip2"),
            Lang::Python => Some("python3 build.py"),
            Lang::Js => Some("npm run build"),
            Lang::Cel => None,
        }
    }

    /// Where the build writes the component, relative to the project.
    fn component(self, name: &str) -> String {
        match self {
            Lang::Rust => format!(
                "target/wasm32-wasip2/release/{}.wasm",
                name.replace('-', "_")
            ),
            Lang::Python | Lang::Js => "policy.wasm".into(),
            Lang::Cel => "policy.cel.yaml".into(),
        }
    }
}

#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  tfjob-operator policy new team-labels\n  tfjob-operator policy new team-labels --lang python\n  tfjob-operator policy new oom-permanent --lang js --hooks classify\n  tfjob-operator policy new gpu-limits --hooks decorate,resources --dir policies/gpu-limits\n  tfjob-operator policy new oom-permanent --hooks classify --sdk-path ../tfjob-operator/guest-policies/sdk\n\nThen: cd NAME && cargo build --release --target wasm32-wasip2 (the printed next steps run its test suite)."
)]
pub struct NewArgs {
    /// The policy's name: a DNS label (lower-case letters, digits, `-`), also the crate's name.
    pub name: String,
    /// The language to write it in.
    #[arg(long, value_enum, default_value = "rust")]
    pub lang: Lang,
    /// The hooks it implements, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "decorate", value_parser = parse_hook)]
    pub hooks: Vec<Hook>,
    /// The directory to create it in; must not exist or be empty [default: ./NAME].
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// The SDK crate (`guest-policies/sdk` of the operator's repository) to depend on by path
    /// [default: this repository's, when DIR is inside a checkout of it; else the SDK this
    /// binary carries, written into the crate's `vendor/`]. Rust only.
    #[arg(long, value_name = "DIR")]
    pub sdk_path: Option<PathBuf>,
    /// The decoration also reads the cluster: it copies the labels of the job's Namespace that
    /// its settings list (`namespaceLabels`), the suite declares `reads: [namespaces]` and
    /// serves Namespaces from `cluster:` fixtures. Needs the decorate hook.
    #[arg(long)]
    pub reads: bool,
}

/// What a generated policy does: its hooks (in contract order), and whether its decoration
/// reads the cluster. Template sections are named after either: `{{#decorate}}`, `{{#reads}}`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shape {
    pub hooks: Vec<Hook>,
    pub reads: bool,
}

impl Shape {
    /// `hooks`, reading nothing.
    #[cfg(test)]
    pub fn of(hooks: &[Hook]) -> Shape {
        Shape {
            hooks: hooks.to_vec(),
            reads: false,
        }
    }

    /// Whether the section named `section` is kept; an error for a name no section has.
    fn keeps(&self, section: &str) -> Result<bool, String> {
        if section == "reads" {
            return Ok(self.reads);
        }
        let hook: Hook = section.parse()?;
        Ok(self.hooks.contains(&hook))
    }
}

fn parse_hook(s: &str) -> Result<Hook, String> {
    s.parse()
}

/// Why nothing (or nothing more) was generated.
#[derive(Debug, thiserror::Error)]
pub enum NewError {
    #[error("NAME {name:?}: {reason}")]
    Name { name: String, reason: String },
    #[error("--hooks: {0}")]
    Hooks(String),
    #[error("--reads: {0}")]
    Reads(String),
    #[error("--dir {}: {reason}", dir.display())]
    Dir { dir: PathBuf, reason: String },
    #[error("--sdk-path: {0}")]
    SdkLang(String),
    #[error("--sdk-path {}: {reason}", dir.display())]
    Sdk { dir: PathBuf, reason: String },
    #[error("writing {}: {source}", path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Words Rust or cargo keep for themselves: a crate cannot be named so.
const RESERVED: &[&str] = &[
    "as",
    "async",
    "await",
    "break",
    "const",
    "continue",
    "crate",
    "dyn",
    "else",
    "enum",
    "extern",
    "false",
    "fn",
    "for",
    "gen",
    "if",
    "impl",
    "in",
    "let",
    "loop",
    "match",
    "mod",
    "move",
    "mut",
    "pub",
    "ref",
    "return",
    "self",
    "static",
    "struct",
    "super",
    "trait",
    "true",
    "type",
    "unsafe",
    "use",
    "where",
    "while",
    "abstract",
    "become",
    "box",
    "do",
    "final",
    "macro",
    "override",
    "priv",
    "typeof",
    "unsized",
    "virtual",
    "yield",
    "try",
    "std",
    "core",
    "alloc",
    "test",
    "proc-macro",
    "proc_macro",
];

/// Checks `name`: a DNS label (it names the policy and its ConfigMap) that starts with a
/// letter (it names the crate and a Rust type) and is not a reserved word.
pub fn check_name(name: &str) -> Result<(), NewError> {
    let refuse = |reason: &str| NewError::Name {
        name: name.to_owned(),
        reason: reason.to_owned(),
    };
    if name.is_empty() || name.len() > 63 {
        return Err(refuse("must be 1 to 63 characters"));
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        return Err(refuse(
            "may only hold lower-case letters, digits and `-` (it names the policy, its ConfigMap and the crate)",
        ));
    }
    if !name.starts_with(|c: char| c.is_ascii_lowercase()) || name.ends_with('-') {
        return Err(refuse(
            "must start with a letter and end with a letter or digit",
        ));
    }
    if RESERVED.contains(&name) {
        return Err(refuse("is reserved by Rust or cargo"));
    }
    Ok(())
}

/// `team-labels` -> `TeamLabelsPolicy`: the type that implements the hooks. The suffix keeps it
/// clear of the types the crate declares (`Settings`).
pub fn type_name(name: &str) -> String {
    let mut out: String = name
        .split('-')
        .map(|word| {
            let mut chars = word.chars();
            chars.next().map_or_else(String::new, |first| {
                first.to_ascii_uppercase().to_string() + chars.as_str()
            })
        })
        .collect();
    out.push_str("Policy");
    out
}

/// Renders `template`: `{{key}}` takes `values[key]`; lines `{{#section}}` and `{{/section}}`
/// keep what they enclose only when `shape` has it (a hook, or `reads`). Errors name what does
/// not fit (a template of this crate's own, so a test renders every template for every shape).
pub fn render(
    template: &str,
    shape: &Shape,
    values: &BTreeMap<&str, String>,
) -> Result<String, String> {
    let mut out = String::with_capacity(template.len());
    // The sections open around the current line, and whether each keeps its content.
    let mut open: Vec<(&str, bool)> = Vec::new();
    for (n, line) in template.lines().enumerate() {
        let trimmed = line.trim();
        if let Some(section) = trimmed
            .strip_prefix("{{#")
            .and_then(|s| s.strip_suffix("}}"))
        {
            let keep = shape
                .keeps(section)
                .map_err(|e| format!("line {}: {e}", n + 1))?;
            open.push((section, keep));
            continue;
        }
        if let Some(section) = trimmed
            .strip_prefix("{{/")
            .and_then(|s| s.strip_suffix("}}"))
        {
            match open.pop() {
                Some((open_section, _)) if open_section == section => continue,
                _ => return Err(format!("line {}: `{trimmed}` closes nothing open", n + 1)),
            }
        }
        if open.iter().any(|(_, keep)| !keep) {
            continue;
        }
        let mut rest = line;
        while let Some(start) = rest.find("{{") {
            out.push_str(&rest[..start]);
            let end = rest[start..]
                .find("}}")
                .ok_or_else(|| format!("line {}: `{{{{` without `}}}}`", n + 1))?;
            let key = &rest[start + 2..start + end];
            let value = values
                .get(key)
                .ok_or_else(|| format!("line {}: no value for {{{{{key}}}}}", n + 1))?;
            out.push_str(value);
            rest = &rest[start + end + 2..];
        }
        out.push_str(rest);
        out.push('\n');
    }
    if let Some((section, _)) = open.last() {
        return Err(format!("{{{{#{section}}}}} is never closed"));
    }
    Ok(out)
}

/// How the generated crate depends on the SDK.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SdkDependency {
    /// A path, relative to the crate when it can be.
    Path(PathBuf),
    /// The SDK this binary carries, written into the crate's `vendor/`.
    Vendored,
}

impl SdkDependency {
    fn toml(&self) -> String {
        let path = match self {
            SdkDependency::Path(p) => p.to_string_lossy().into_owned(),
            SdkDependency::Vendored => crate::sdk_bundle::SDK_DIR.to_owned(),
        };
        format!("tfjob-policy-sdk = {{ path = {} }}", toml_string(&path))
    }
}

/// A TOML basic string. JSON's string syntax is valid TOML for every character it escapes.
fn toml_string(s: &str) -> String {
    serde_json::Value::from(s).to_string()
}

/// Whether `dir` holds the SDK crate.
fn is_sdk(dir: &Path) -> bool {
    std::fs::read_to_string(dir.join("Cargo.toml")).is_ok_and(|t| {
        t.lines()
            .any(|l| l.trim().replace(' ', "") == "name=\"tfjob-policy-sdk\"")
    })
}

/// `to` relative to `from` (both absolute and canonical).
fn relative(from: &Path, to: &Path) -> PathBuf {
    let from: Vec<Component<'_>> = from.components().collect();
    let to: Vec<Component<'_>> = to.components().collect();
    let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
    let mut out = PathBuf::new();
    for _ in common..from.len() {
        out.push("..");
    }
    for c in &to[common..] {
        out.push(c.as_os_str());
    }
    out
}

/// The SDK for a crate in `crate_dir` (canonical): `--sdk-path`, else the repository
/// `crate_dir` is in, else the one this binary carries.
fn sdk_dependency(crate_dir: &Path, sdk_path: Option<&Path>) -> Result<SdkDependency, NewError> {
    if let Some(dir) = sdk_path {
        let refuse = |reason: String| NewError::Sdk {
            dir: dir.to_owned(),
            reason,
        };
        let real = dir.canonicalize().map_err(|e| refuse(e.to_string()))?;
        if !is_sdk(&real) {
            return Err(refuse(
                "holds no Cargo.toml of the tfjob-policy-sdk crate (guest-policies/sdk of the operator's repository)".into(),
            ));
        }
        return Ok(SdkDependency::Path(relative(crate_dir, &real)));
    }
    for ancestor in crate_dir.ancestors().skip(1) {
        let sdk = ancestor.join("guest-policies/sdk");
        if is_sdk(&sdk) {
            return Ok(SdkDependency::Path(relative(crate_dir, &sdk)));
        }
    }
    Ok(SdkDependency::Vendored)
}

/// What was generated.
#[derive(Debug)]
pub struct Generated {
    pub dir: PathBuf,
    pub files: Vec<PathBuf>,
    pub sdk: SdkDependency,
}

/// The template values every language shares.
fn values(name: &str, shape: &Shape, lang: Lang) -> BTreeMap<&'static str, String> {
    let hooks = &shape.hooks;
    let mut values = BTreeMap::new();
    values.insert("name", name.to_owned());
    values.insert("crate_name", name.replace('-', "_"));
    values.insert("type", type_name(name));
    let names: Vec<&str> = hooks.iter().map(|h| h.as_str()).collect();
    values.insert("hooks", names.join(", "));
    values.insert("hooks_flag", names.join(","));
    // What `policy pack` adds for the manifest to declare the reads.
    let read_flag = if shape.reads {
        " --read namespaces"
    } else {
        ""
    };
    values.insert("read_flag", read_flag.to_owned());
    values.insert(
        "build_command",
        lang.build_command().unwrap_or_default().to_owned(),
    );
    values.insert("component", lang.component(name));
    let mut example = Vec::new();
    if hooks.contains(&Hook::Decorate) {
        example.push(r#""labels": {"team": "ml"}"#);
    }
    if shape.reads {
        example.push(r#""namespaceLabels": ["cost-center"]"#);
    }
    if hooks.contains(&Hook::Resources) {
        example.push(r#""defaultMemoryRequest": "512Mi""#);
    }
    if hooks.contains(&Hook::Classify) {
        example.push(r#""permanentReasons": ["OOMKilled"]"#);
    }
    values.insert("settings_example", format!("{{{}}}", example.join(", ")));
    let first = hooks[0];
    values.insert("first_hook", first.to_string());
    let (pod, now) = match first {
        Hook::Classify => ("oom-killed.yaml", " \\\n  --now 2026-01-01T01:00:00Z"),
        _ => ("worker.yaml", ""),
    };
    values.insert("first_pod", pod.to_owned());
    values.insert("first_now", now.to_owned());
    values
}

/// The files of the project, path relative to its directory, for `shape` in `lang` (`sdk`
/// matters for Rust only).
pub fn files(
    name: &str,
    shape: &Shape,
    lang: Lang,
    sdk: &SdkDependency,
) -> Result<Vec<(PathBuf, String)>, String> {
    let hooks = &shape.hooks;
    let mut values = values(name, shape, lang);
    values.insert("sdk_dependency", sdk.toml());
    let render = |t: &str| render(t, shape, &values);
    let mut out = match lang {
        Lang::Rust => vec![
            (PathBuf::from("Cargo.toml"), render(CARGO_TOML)?),
            (PathBuf::from("README.md"), render(README_MD)?),
            (PathBuf::from(".gitignore"), GITIGNORE.to_owned()),
            (PathBuf::from("src/lib.rs"), render(LIB_RS)?),
        ],
        Lang::Python => vec![
            (PathBuf::from("app.py"), render(PYTHON_APP)?),
            (PathBuf::from("build.py"), render(PYTHON_BUILD)?),
            (PathBuf::from("README.md"), render(PYTHON_README)?),
            (PathBuf::from(".gitignore"), PYTHON_GITIGNORE.to_owned()),
        ],
        Lang::Js => vec![
            (PathBuf::from("policy.js"), render(JS_POLICY)?),
            (PathBuf::from("package.json"), render(JS_PACKAGE)?),
            (PathBuf::from("README.md"), render(JS_README)?),
            (PathBuf::from(".gitignore"), JS_GITIGNORE.to_owned()),
        ],
        // No contract to build against: the operator's evaluator implements it.
        Lang::Cel => vec![
            (PathBuf::from("policy.cel.yaml"), render(CEL_POLICY)?),
            (PathBuf::from("README.md"), render(CEL_README)?),
            (PathBuf::from("tests/suite.yaml"), render(CEL_SUITE)?),
        ],
    };
    if lang != Lang::Cel {
        out.extend([
            (PathBuf::from("wit/world.wit"), render(WORLD_WIT)?),
            (
                PathBuf::from("wit/deps/tfjob-policy/policy.wit"),
                CONTRACT_WIT.to_owned(),
            ),
            (PathBuf::from("tests/suite.yaml"), render(SUITE_YAML)?),
        ]);
    }
    if hooks.iter().any(|h| *h != Hook::Classify) {
        out.push((
            PathBuf::from("tests/pods/worker.yaml"),
            WORKER_POD.to_owned(),
        ));
    }
    if hooks.contains(&Hook::Classify) {
        out.push((
            PathBuf::from("tests/pods/oom-killed.yaml"),
            OOM_KILLED_POD.to_owned(),
        ));
    }
    if shape.reads {
        out.push((
            PathBuf::from("tests/namespaces.yaml"),
            NAMESPACES.to_owned(),
        ));
    }
    match lang {
        Lang::Rust if *sdk == SdkDependency::Vendored => out.extend(crate::sdk_bundle::files()),
        Lang::Rust => {}
        Lang::Python => out.extend(crate::sdk_bundle::python_files()),
        Lang::Js => out.extend(crate::sdk_bundle::js_files(name)),
        Lang::Cel => {}
    }
    Ok(out)
}

/// The hooks in contract order, each once.
fn hooks_in_order(hooks: &[Hook]) -> Result<Vec<Hook>, NewError> {
    if hooks.is_empty() {
        return Err(NewError::Hooks("name at least one hook".into()));
    }
    if let Some(h) = hooks
        .iter()
        .enumerate()
        .find_map(|(i, h)| hooks[..i].contains(h).then_some(h))
    {
        return Err(NewError::Hooks(format!("{h} is named twice")));
    }
    Ok(Hook::ALL
        .into_iter()
        .filter(|h| hooks.contains(h))
        .collect())
}

/// Writes the crate. The directory must not exist, or be empty.
pub fn generate(args: &NewArgs) -> Result<Generated, NewError> {
    check_name(&args.name)?;
    if args.sdk_path.is_some() && args.lang != Lang::Rust {
        return Err(NewError::SdkLang(
            "only for --lang rust; Python and JavaScript projects carry their SDK".into(),
        ));
    }
    let hooks = hooks_in_order(&args.hooks)?;
    if args.reads && !hooks.contains(&Hook::Decorate) {
        return Err(NewError::Reads(
            "the reading policy copies namespace labels in its decoration: add decorate to --hooks"
                .into(),
        ));
    }
    let shape = Shape {
        hooks,
        reads: args.reads,
    };
    let dir = args
        .dir
        .clone()
        .unwrap_or_else(|| PathBuf::from(&args.name));
    let refuse = |reason: String| NewError::Dir {
        dir: dir.clone(),
        reason,
    };
    let created_dir = match std::fs::symlink_metadata(&dir) {
        Ok(m) if m.is_dir() => {
            let mut entries = std::fs::read_dir(&dir).map_err(|e| refuse(e.to_string()))?;
            if entries.next().is_some() {
                return Err(refuse(
                    "exists and is not empty; nothing was written (give a new or empty directory)"
                        .into(),
                ));
            }
            false
        }
        Ok(_) => return Err(refuse("exists and is not a directory".into())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(&dir).map_err(|e| refuse(e.to_string()))?;
            true
        }
        Err(e) => return Err(refuse(e.to_string())),
    };
    let real = dir.canonicalize().map_err(|e| refuse(e.to_string()))?;
    let sdk = match args.lang {
        Lang::Rust => sdk_dependency(&real, args.sdk_path.as_deref()),
        // The language SDKs are small and carried whole in every project; CEL needs none.
        _ => Ok(SdkDependency::Vendored),
    };
    let result = sdk.and_then(|sdk| {
        let files = files(&args.name, &shape, args.lang, &sdk)
            .map_err(|e| refuse(format!("template: {e}")))?;
        write_all(&real, &files).map(|written| Generated {
            dir: dir.clone(),
            files: written,
            sdk,
        })
    });
    if result.is_err() && created_dir {
        // Nothing half-made is left behind; the directory was ours.
        let _ = std::fs::remove_dir_all(&real);
    }
    result
}

/// Writes `files` below `dir`, creating each (never following or replacing what is there);
/// on failure removes what it wrote.
fn write_all(dir: &Path, files: &[(PathBuf, String)]) -> Result<Vec<PathBuf>, NewError> {
    let mut written: Vec<PathBuf> = Vec::new();
    let mut made_dirs: Vec<PathBuf> = Vec::new();
    let result = files.iter().try_for_each(|(relative, contents)| {
        let path = dir.join(relative);
        let fail = |source| NewError::Write {
            path: path.clone(),
            source,
        };
        if let Some(parent) = path.parent() {
            let mut missing: Vec<&Path> = parent
                .ancestors()
                .take_while(|p| *p != dir && !p.exists())
                .collect();
            missing.reverse();
            for d in missing {
                std::fs::create_dir(d).map_err(fail)?;
                made_dirs.push(d.to_owned());
            }
        }
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(fail)?;
        written.push(path.clone());
        file.write_all(contents.as_bytes()).map_err(fail)
    });
    if let Err(e) = result {
        for f in &written {
            let _ = std::fs::remove_file(f);
        }
        for d in made_dirs.iter().rev() {
            let _ = std::fs::remove_dir(d);
        }
        return Err(e);
    }
    Ok(written)
}

pub fn main(args: &NewArgs) -> ExitCode {
    match generate(args) {
        Ok(g) => {
            let dir = g.dir.display();
            let sdk = match (&g.sdk, args.lang) {
                (SdkDependency::Path(p), _) => format!("the SDK at {}", p.display()),
                (SdkDependency::Vendored, Lang::Rust) => format!(
                    "the SDK of this operator in {}",
                    crate::sdk_bundle::VENDOR_DIR
                ),
                (SdkDependency::Vendored, Lang::Python) => {
                    "the Python SDK of this operator in tfjob_policy".into()
                }
                (SdkDependency::Vendored, Lang::Js) => {
                    "the JavaScript SDK of this operator in tfjob-policy".into()
                }
                (SdkDependency::Vendored, Lang::Cel) => {
                    "run by the operator's CEL evaluator".into()
                }
            };
            let names: Vec<&str> = args.hooks.iter().map(|h| h.as_str()).collect();
            let native_test = match args.lang {
                Lang::Rust => "\n  cargo test",
                Lang::Python | Lang::Js | Lang::Cel => "",
            };
            let build = args
                .lang
                .build_command()
                .map(|command| format!("\n  {command}"))
                .unwrap_or_default();
            let pack = match args.lang {
                Lang::Cel => format!(
                    "\n  tfjob-operator policy pack --cel policy.cel.yaml --name {} > configmap.yaml",
                    args.name
                ),
                _ => String::new(),
            };
            println!(
                "Created policy {} in {dir} (hooks: {}; {sdk}), {} files.\n\nNext:\n  cd {dir}{native_test}{build}\n  tfjob-operator policy test --suite tests/suite.yaml --policy {}{pack}",
                args.name,
                names.join(", "),
                g.files.len(),
                args.lang.component(&args.name),
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every non-empty choice of hooks.
    /// Every choice of hooks, and with decorate, reading or not.
    fn combinations() -> Vec<Shape> {
        (1u8..8)
            .flat_map(|bits| {
                let hooks: Vec<Hook> = Hook::ALL
                    .into_iter()
                    .enumerate()
                    .filter(|(i, _)| bits & (1 << i) != 0)
                    .map(|(_, h)| h)
                    .collect();
                let reading = hooks.contains(&Hook::Decorate).then(|| Shape {
                    hooks: hooks.clone(),
                    reads: true,
                });
                [Some(Shape::of(&hooks)), reading].into_iter().flatten()
            })
            .collect()
    }

    #[test]
    fn names_are_dns_labels_that_are_crate_names() {
        for ok in ["team-labels", "a", "gpu2", "a-1", &"x".repeat(63)] {
            assert!(check_name(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "../evil",
            "a/b",
            ".",
            "..",
            "Team",
            "team_labels",
            "-x",
            "x-",
            "1team",
            "team labels",
            "naïve",
            "fn",
            "self",
            "test",
            "std",
            &"x".repeat(64),
            "a\0b",
        ] {
            let err = check_name(bad).unwrap_err().to_string();
            assert!(err.starts_with(&format!("NAME {bad:?}: ")), "{err}");
        }
    }

    #[test]
    fn type_names() {
        assert_eq!(type_name("team-labels"), "TeamLabelsPolicy");
        assert_eq!(type_name("settings"), "SettingsPolicy");
        assert_eq!(type_name("a-1"), "A1Policy");
    }

    #[test]
    fn sections_keep_what_the_hooks_chose() {
        let values = BTreeMap::from([("x", "1".to_owned())]);
        let t = "a {{x}}\n{{#decorate}}\nd\n  {{#classify}}\n  dc\n  {{/classify}}\n{{/decorate}}\n{{#classify}}\nc{{x}}{{x}}\n{{/classify}}\nz\n";
        assert_eq!(
            render(t, &Shape::of(&[Hook::Decorate]), &values).unwrap(),
            "a 1\nd\nz\n"
        );
        assert_eq!(
            render(t, &Shape::of(&[Hook::Decorate, Hook::Classify]), &values).unwrap(),
            "a 1\nd\n  dc\nc11\nz\n"
        );
        assert_eq!(
            render(t, &Shape::of(&[Hook::Classify]), &values).unwrap(),
            "a 1\nc11\nz\n"
        );
        let reading = "{{#decorate}}\nd\n{{#reads}}\nr\n{{/reads}}\n{{/decorate}}\n";
        let shape = Shape {
            hooks: vec![Hook::Decorate],
            reads: true,
        };
        assert_eq!(render(reading, &shape, &values).unwrap(), "d\nr\n");
        assert_eq!(
            render(reading, &Shape::of(&[Hook::Decorate]), &values).unwrap(),
            "d\n"
        );
        for bad in [
            "{{y}}\n",
            "{{#decorate}}\n",
            "{{/decorate}}\n",
            "{{#teapot}}\n{{/teapot}}\n",
            "{{x\n",
        ] {
            assert!(
                render(bad, &Shape::of(&[Hook::Decorate]), &values).is_err(),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn every_template_renders_for_every_choice_of_hooks() {
        for shape in combinations() {
            let hooks = &shape.hooks;
            for sdk in [
                SdkDependency::Vendored,
                SdkDependency::Path("../sdk".into()),
            ] {
                let files = files("team-labels", &shape, Lang::Rust, &sdk).unwrap();
                for (path, text) in &files {
                    assert!(!text.contains("{{"), "{hooks:?} {}: {text}", path.display());
                }
                let get = |p: &str| &files.iter().find(|(f, _)| f == Path::new(p)).unwrap().1;
                let world = get("wit/world.wit");
                let lib = get("src/lib.rs");
                for h in Hook::ALL {
                    let chosen = hooks.contains(&h);
                    assert_eq!(
                        world.contains(&format!("export {};", h.interface())),
                        chosen,
                        "{hooks:?}\n{world}"
                    );
                    assert_eq!(
                        lib.contains(&format!("tfjob::policy::{h}::Guest for")),
                        chosen,
                        "{hooks:?}"
                    );
                }
                assert_eq!(get("wit/deps/tfjob-policy/policy.wit"), CONTRACT_WIT);
                assert!(get("Cargo.toml").contains(&sdk.toml()));
                assert!(get("Cargo.toml").contains("\n[workspace]\n"));
                let vendored = files.iter().any(|(p, _)| p.starts_with("vendor"));
                assert_eq!(vendored, sdk == SdkDependency::Vendored, "{sdk:?}");
            }
        }
    }

    #[test]
    fn python_and_js_projects_render_for_every_choice_of_hooks() {
        type Export = dyn Fn(Hook) -> String;
        for shape in combinations() {
            let hooks = &shape.hooks;
            let cases: [(Lang, &str, &Export); 2] = [
                (Lang::Python, "app.py", &|h: Hook| {
                    let class = match h {
                        Hook::Decorate => "Decorate",
                        Hook::Resources => "Resources",
                        Hook::Classify => "Classify",
                    };
                    format!("\n{class} = hooks.{class}\n")
                }),
                (Lang::Js, "policy.js", &|h: Hook| {
                    format!("export const {h} = hooks.{h};")
                }),
            ];
            for (lang, source, export) in cases {
                let files = files("team-labels", &shape, lang, &SdkDependency::Vendored).unwrap();
                for (path, text) in &files {
                    assert!(!text.contains("{{"), "{hooks:?} {}: {text}", path.display());
                }
                let get = |p: &str| &files.iter().find(|(f, _)| f == Path::new(p)).unwrap().1;
                for h in Hook::ALL {
                    assert_eq!(
                        get(source).contains(&export(h)),
                        hooks.contains(&h),
                        "{lang:?} {hooks:?}"
                    );
                }
                assert_eq!(get("wit/deps/tfjob-policy/policy.wit"), CONTRACT_WIT);
                let build = lang
                    .build_command()
                    .expect("Python and JavaScript are built");
                assert!(get("tests/suite.yaml").contains(build));
                assert!(!files.iter().any(|(p, _)| p.starts_with("vendor")));
            }
        }
        let js = files(
            "team-labels",
            &Shape::of(&[Hook::Decorate]),
            Lang::Js,
            &SdkDependency::Vendored,
        )
        .unwrap();
        let package: serde_json::Value = serde_json::from_str(
            &js.iter()
                .find(|(p, _)| p == Path::new("package.json"))
                .unwrap()
                .1,
        )
        .unwrap();
        assert_eq!(package["name"], "team-labels");
    }

    #[test]
    fn cel_projects_render_the_parts_of_their_hooks_and_nothing_to_build() {
        for shape in combinations() {
            let files = files("team-labels", &shape, Lang::Cel, &SdkDependency::Vendored).unwrap();
            let get = |p: &str| &files.iter().find(|(f, _)| f == Path::new(p)).unwrap().1;
            for (path, text) in &files {
                assert!(!text.contains("{{"), "{shape:?} {}: {text}", path.display());
            }
            let document = get("policy.cel.yaml");
            for (hook, part) in [
                (Hook::Decorate, "\nmutations:"),
                (Hook::Resources, "\nresourceMutations:"),
                (Hook::Classify, "\nverdicts:"),
            ] {
                assert_eq!(
                    document.contains(part),
                    shape.hooks.contains(&hook),
                    "{shape:?}"
                );
            }
            assert_eq!(
                document.contains("namespaceObject =="),
                shape.reads,
                "{shape:?}"
            );
            let paths: Vec<&Path> = files.iter().map(|(p, _)| p.as_path()).collect();
            assert!(
                !paths
                    .iter()
                    .any(|p| p.starts_with("wit") || p.starts_with("vendor"))
            );
            assert!(
                get("README.md").contains("policy pack --cel policy.cel.yaml --name team-labels")
            );
        }
    }

    #[test]
    fn the_sdk_path_is_for_rust_only() {
        let args = NewArgs {
            name: "team-labels".into(),
            lang: Lang::Python,
            hooks: vec![Hook::Decorate],
            dir: Some(PathBuf::from("/nonexistent/never-written")),
            sdk_path: Some(PathBuf::from("../sdk")),
            reads: false,
        };
        let err = generate(&args).unwrap_err().to_string();
        assert!(err.starts_with("--sdk-path: only for --lang rust"), "{err}");
        assert!(!Path::new("/nonexistent/never-written").exists());
    }

    #[test]
    fn a_reading_policy_decorates() {
        let args = NewArgs {
            name: "team-labels".into(),
            lang: Lang::Rust,
            hooks: vec![Hook::Classify],
            dir: Some(PathBuf::from("/nonexistent/never-written")),
            sdk_path: None,
            reads: true,
        };
        let err = generate(&args).unwrap_err().to_string();
        assert!(err.starts_with("--reads: "), "{err}");
        assert!(err.contains("add decorate to --hooks"), "{err}");
        assert!(!Path::new("/nonexistent/never-written").exists());
    }

    #[test]
    fn a_reading_project_declares_and_fixes_what_it_reads() {
        let shape = Shape {
            hooks: vec![Hook::Decorate],
            reads: true,
        };
        for lang in [Lang::Rust, Lang::Python, Lang::Js] {
            let files = files("team-labels", &shape, lang, &SdkDependency::Vendored).unwrap();
            let get = |p: &str| &files.iter().find(|(f, _)| f == Path::new(p)).unwrap().1;
            let suite: serde_json::Value =
                serde_yaml_ng::from_str(get("tests/suite.yaml")).unwrap();
            assert_eq!(
                suite["manifest"]["reads"],
                serde_json::json!([{"resource": "namespaces"}])
            );
            assert_eq!(suite["cluster"], serde_json::json!(["namespaces.yaml"]));
            assert!(get("tests/namespaces.yaml").contains("kind: Namespace"));
            assert!(get("README.md").contains("--hooks decorate --read namespaces"));
            let source = match lang {
                Lang::Rust => get("src/lib.rs"),
                Lang::Python => get("app.py"),
                Lang::Js => get("policy.js"),
                Lang::Cel => unreachable!("not among the languages above"),
            };
            assert!(source.contains("namespaceLabels"), "{lang:?}");
        }
        let plain = files(
            "team-labels",
            &Shape::of(&[Hook::Decorate]),
            Lang::Rust,
            &SdkDependency::Vendored,
        )
        .unwrap();
        assert!(
            !plain
                .iter()
                .any(|(p, _)| p == Path::new("tests/namespaces.yaml"))
        );
    }

    #[test]
    fn the_sdk_dependency_forms() {
        assert_eq!(
            SdkDependency::Path("../../guest-policies/sdk".into()).toml(),
            r#"tfjob-policy-sdk = { path = "../../guest-policies/sdk" }"#
        );
        assert_eq!(
            SdkDependency::Path("../we\"ird\\dir".into()).toml(),
            r#"tfjob-policy-sdk = { path = "../we\"ird\\dir" }"#
        );
        assert_eq!(
            SdkDependency::Vendored.toml(),
            r#"tfjob-policy-sdk = { path = "vendor/crates/tfjob-policy-sdk" }"#
        );
        assert_eq!(
            relative(Path::new("/a/b/c"), Path::new("/a/x/y")),
            PathBuf::from("../../x/y")
        );
        assert_eq!(
            relative(Path::new("/a"), Path::new("/a/b")),
            PathBuf::from("b")
        );
    }

    #[test]
    fn the_hooks_come_in_contract_order_and_once() {
        assert_eq!(
            hooks_in_order(&[Hook::Classify, Hook::Decorate]).unwrap(),
            vec![Hook::Decorate, Hook::Classify]
        );
        assert!(hooks_in_order(&[]).is_err());
        let err = hooks_in_order(&[Hook::Decorate, Hook::Decorate]).unwrap_err();
        assert_eq!(err.to_string(), "--hooks: decorate is named twice");
    }
}
