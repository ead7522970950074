//! No import cycles between the top-level modules of any crate of the workspace.
//!
//! A cycle (`a` uses `crate::b`, `b` uses `crate::a`) means neither module can be read, tested
//! or moved without the other. This test reads every crate root of the workspace (`lib.rs`,
//! `main.rs`), the modules it declares and every `crate::...` path in their files (`use` lines
//! and paths in code alike, grouped imports included), and finds the strongly connected
//! components of that graph.
//!
//! `KNOWN` may list cycles that are being removed; the test fails on any cycle not listed, and
//! on a listed one that no longer exists (so the list only shrinks). It is empty.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Cycles that exist and are to be removed, each as its sorted module names, by crate root.
/// None are left; a new one fails the test.
const KNOWN: &[(&str, &[&str])] = &[];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The crate roots of the workspace: every `src/lib.rs` and `src/main.rs` under `host/`,
/// `guest-policies/` and `tests/`.
fn crate_roots() -> Vec<PathBuf> {
    let mut roots = Vec::new();
    for group in ["host", "guest-policies"] {
        for entry in std::fs::read_dir(repo().join(group)).unwrap() {
            let src = entry.unwrap().path().join("src");
            for root in ["lib.rs", "main.rs"] {
                if src.join(root).exists() {
                    roots.push(src.join(root));
                }
            }
        }
    }
    roots.push(repo().join("tests/lib.rs"));
    roots.sort();
    roots
}

/// Source with comments and string literals blanked, so that `crate::x` in a doc comment or a
/// message is not an import.
fn code_of(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '/' if chars.peek() == Some(&'/') => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        out.push('\n');
                        break;
                    }
                }
            }
            '/' if chars.peek() == Some(&'*') => {
                let mut last = ' ';
                for c in chars.by_ref() {
                    if last == '*' && c == '/' {
                        break;
                    }
                    last = c;
                }
            }
            '"' => {
                let mut escaped = false;
                for c in chars.by_ref() {
                    if c == '"' && !escaped {
                        break;
                    }
                    escaped = c == '\\' && !escaped;
                }
                out.push_str("\"\"");
            }
            // A character literal (not a lifetime): skip it whole.
            '\'' => {
                let rest: String = chars.clone().take(3).collect();
                if rest.starts_with('\\') || rest.chars().nth(1) == Some('\'') {
                    for c in chars.by_ref() {
                        if c == '\'' {
                            break;
                        }
                    }
                    out.push_str("' '");
                } else {
                    out.push(c);
                }
            }
            _ => out.push(c),
        }
    }
    out
}

/// The modules a root file declares with `mod name;` or `pub mod name;` (any visibility).
fn declared_modules(code: &str) -> Vec<String> {
    code.lines()
        .map(str::trim)
        .filter_map(|l| {
            let l = l.strip_suffix(';')?;
            let name = l.split_whitespace().last()?;
            let words: Vec<&str> = l.split_whitespace().collect();
            (words.len() >= 2 && words[words.len() - 2] == "mod").then(|| name.to_owned())
        })
        .collect()
}

/// Every file of module `name` of the crate rooted in `src`: `name.rs`, `name/mod.rs` and
/// everything below `name/`.
fn module_files(src: &Path, name: &str) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for file in [
        src.join(format!("{name}.rs")),
        src.join(name).join("mod.rs"),
    ] {
        if file.exists() {
            files.push(file);
        }
    }
    let mut stack = vec![src.join(name)];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") && !files.contains(&path) {
                files.push(path);
            }
        }
    }
    files
}

/// The top-level modules `code` names through `crate::`, grouped imports included.
fn crate_paths(code: &str) -> BTreeSet<String> {
    let mut named = BTreeSet::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        // `$crate::` in a macro, or an identifier ending in `crate`, is not this crate's path.
        let before = rest[..at].chars().next_back();
        rest = &rest[at + "crate::".len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$') {
            continue;
        }
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 1;
            let mut end = 0;
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    _ => {}
                }
                if depth == 0 {
                    end = i;
                    break;
                }
            }
            // Top-level names of the group: split at commas outside nested braces.
            let mut depth = 0;
            let mut start = 0;
            let inner = &group[..end];
            for (i, c) in inner.char_indices().chain([(inner.len(), ',')]) {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        let item = inner[start..i].trim();
                        let head: String = item
                            .chars()
                            .take_while(|c| c.is_alphanumeric() || *c == '_')
                            .collect();
                        if !head.is_empty() {
                            named.insert(head);
                        }
                        start = i + 1;
                    }
                    _ => {}
                }
            }
        } else {
            let head: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if !head.is_empty() {
                named.insert(head);
            }
        }
    }
    named
}

/// The module graph of the crate rooted at `root`: each declared module and the other declared
/// modules it names.
fn graph(root: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let src = root.parent().unwrap();
    let modules = declared_modules(&code_of(&std::fs::read_to_string(root).unwrap()));
    let mut graph = BTreeMap::new();
    for module in &modules {
        let mut edges = BTreeSet::new();
        for file in module_files(src, module) {
            let code = code_of(&std::fs::read_to_string(&file).unwrap());
            for named in crate_paths(&code) {
                if named != *module && modules.contains(&named) {
                    edges.insert(named);
                }
            }
        }
        graph.insert(module.clone(), edges);
    }
    graph
}

/// The strongly connected components with more than one module (Tarjan's algorithm).
fn cycles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct State<'a> {
        graph: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        next: usize,
        found: Vec<Vec<String>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a str) {
        s.index.insert(v, s.next);
        s.low.insert(v, s.next);
        s.next += 1;
        s.stack.push(v);
        s.on_stack.insert(v);
        for w in &s.graph[v] {
            let w = w.as_str();
            if !s.index.contains_key(w) {
                visit(s, w);
                let low = s.low[v].min(s.low[w]);
                s.low.insert(v, low);
            } else if s.on_stack.contains(w) {
                let low = s.low[v].min(s.index[w]);
                s.low.insert(v, low);
            }
        }
        if s.low[v] == s.index[v] {
            let mut component = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                component.push(w.to_owned());
                if w == v {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort();
                s.found.push(component);
            }
        }
    }
    let mut s = State {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        next: 0,
        found: Vec::new(),
    };
    for v in graph.keys() {
        if !s.index.contains_key(v.as_str()) {
            visit(&mut s, v);
        }
    }
    s.found
}

#[test]
fn the_checker_finds_a_cycle_and_reads_grouped_imports() {
    let code = code_of(
        "use crate::{a::X, b::{Y, Z}, c};\n// crate::d in a comment\nlet s = \"crate::e\";\nlet f = crate::f::g();\nmacro_rules! m { () => { $crate::h }; }",
    );
    assert_eq!(
        crate_paths(&code).into_iter().collect::<Vec<_>>(),
        ["a", "b", "c", "f"]
    );
    let graph: BTreeMap<String, BTreeSet<String>> = [
        ("a", vec!["b"]),
        ("b", vec!["c"]),
        ("c", vec!["a"]),
        ("d", vec!["a"]),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.into_iter().map(str::to_owned).collect()))
    .collect();
    assert_eq!(cycles(&graph), [["a", "b", "c"]]);
}

#[test]
fn no_crate_has_an_import_cycle_between_its_modules() {
    let mut found: Vec<(String, Vec<String>)> = Vec::new();
    for root in crate_roots() {
        let name = root
            .strip_prefix(repo())
            .unwrap()
            .to_string_lossy()
            .into_owned();
        for cycle in cycles(&graph(&root)) {
            found.push((name.clone(), cycle));
        }
    }
    let known: Vec<(String, Vec<String>)> = KNOWN
        .iter()
        .map(|(root, modules)| {
            (
                (*root).to_owned(),
                modules.iter().map(|m| (*m).to_owned()).collect(),
            )
        })
        .collect();
    let new: Vec<_> = found.iter().filter(|c| !known.contains(c)).collect();
    let gone: Vec<_> = known.iter().filter(|c| !found.contains(c)).collect();
    assert!(
        new.is_empty(),
        "import cycles between modules (crate root, modules): {new:#?}"
    );
    assert!(
        gone.is_empty(),
        "these listed cycles are gone: remove them from KNOWN: {gone:#?}"
    );
}
