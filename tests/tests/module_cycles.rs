//! No import cycles between the modules of any crate of the workspace.
//!
//! A cycle (`a` uses `crate::b`, `b` uses `crate::a`) means neither module can be read, tested
//! or moved without the other. This test reads every crate root of the workspace (`lib.rs`,
//! `main.rs`), the module tree it declares (nested modules included, each a node by its path)
//! and every `crate::...` and `super::...` path in each module's file (`use` lines and paths in
//! code alike, grouped imports included), and finds the strongly connected components of that
//! graph.
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

/// The modules a file declares with `mod name;` or `pub mod name;` (any visibility); inline
/// modules (`mod tests { ... }`) are part of their file.
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

/// Every module of the crate rooted at `root`, by path (`http::server`), with its file. A
/// module `a` declared in `dir/x.rs` (or the root) lives in `dir/a.rs` or `dir/a/mod.rs`, and
/// its own modules under `dir/a/`.
fn module_tree(root: &Path) -> BTreeMap<String, PathBuf> {
    let mut modules = BTreeMap::new();
    let mut stack = vec![(
        String::new(),
        root.to_path_buf(),
        root.parent().unwrap().to_path_buf(),
    )];
    while let Some((path, file, children)) = stack.pop() {
        let code = code_of(&std::fs::read_to_string(&file).unwrap());
        for name in declared_modules(&code) {
            let child = if path.is_empty() {
                name.clone()
            } else {
                format!("{path}::{name}")
            };
            let flat = children.join(format!("{name}.rs"));
            let nested = children.join(&name).join("mod.rs");
            let child_file = if flat.exists() { flat } else { nested };
            assert!(
                child_file.exists(),
                "{}: mod {name} has no file",
                file.display()
            );
            stack.push((child.clone(), child_file.clone(), children.join(&name)));
            modules.insert(child, child_file);
        }
    }
    modules
}

/// Every path `code` names through `crate::` (as segments, anchored at the root: `None`), and
/// through `super::` (as the segments after it, anchored `Some(n)` levels up), grouped imports
/// expanded: `use crate::{a::X,
/// b::{Y, Z}}` names `a::X`, `b::Y` and `b::Z`. A glob (`super::*`) names nothing.
fn named_paths(code: &str) -> Vec<(Option<usize>, Vec<String>)> {
    fn ident(rest: &str) -> &str {
        let end = rest
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        &rest[..end]
    }
    /// Reads one use tree at the start of `rest` below `prefix` into `out`.
    fn tree(rest: &str, prefix: Vec<String>, out: &mut Vec<Vec<String>>) {
        let rest = rest.trim_start();
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 1;
            let mut start = 0;
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 1 => {
                        tree(&group[start..i], prefix.clone(), out);
                        start = i + 1;
                    }
                    _ => {}
                }
                if depth == 0 {
                    tree(&group[start..i], prefix, out);
                    return;
                }
            }
            return;
        }
        let name = ident(rest);
        if name.is_empty() {
            if !prefix.is_empty() {
                out.push(prefix);
            }
            return;
        }
        let mut path = prefix;
        if name != "self" {
            path.push(name.to_owned());
        }
        match rest[name.len()..].strip_prefix("::") {
            Some(more) => tree(more, path, out),
            None => out.push(path),
        }
    }
    let mut named = Vec::new();
    for (keyword, relative) in [("crate::", false), ("super::", true)] {
        let mut rest = code;
        while let Some(at) = rest.find(keyword) {
            // `$crate::` in a macro, or an identifier ending in the keyword, is not a path.
            let before = rest[..at].chars().next_back();
            rest = &rest[at + keyword.len()..];
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$' || c == ':') {
                continue;
            }
            let mut ups = usize::from(relative);
            let mut tail = rest;
            while relative && let Some(more) = tail.strip_prefix("super::") {
                ups += 1;
                tail = more;
            }
            rest = tail;
            let mut paths = Vec::new();
            tree(tail, Vec::new(), &mut paths);
            let anchor = relative.then_some(ups);
            named.extend(paths.into_iter().map(|p| (anchor, p)));
        }
    }
    named
}

/// The module graph of the crate rooted at `root`: each module and the other modules it
/// names (the longest module path a named path starts with). A module's own descendants are
/// not edges: a parent declares its children.
fn graph(root: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let modules = module_tree(root);
    let mut graph = BTreeMap::new();
    for (module, file) in &modules {
        let code = code_of(&std::fs::read_to_string(file).unwrap());
        let own: Vec<&str> = module.split("::").collect();
        let mut edges = BTreeSet::new();
        for (anchor, path) in named_paths(&code) {
            let base = match anchor {
                None => 0,
                Some(ups) => match own.len().checked_sub(ups) {
                    Some(base) => base,
                    None => continue,
                },
            };
            let full: Vec<&str> = own[..base]
                .iter()
                .copied()
                .chain(path.iter().map(String::as_str))
                .collect();
            let target = (1..=full.len())
                .rev()
                .map(|n| full[..n].join("::"))
                .find(|candidate| modules.contains_key(candidate));
            if let Some(target) = target
                && target != *module
                && !target.starts_with(&format!("{module}::"))
            {
                edges.insert(target);
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
    let named: Vec<String> = named_paths(&code)
        .into_iter()
        .map(|(anchor, p)| format!("{anchor:?}:{}", p.join("::")))
        .collect();
    assert_eq!(
        named,
        ["None:a::X", "None:b::Y", "None:b::Z", "None:c", "None:f::g"]
    );
    let code = code_of("use super::super::x::{self, y};\nuse super::*;\nfn f() { super::z(); }");
    let named: Vec<String> = named_paths(&code)
        .into_iter()
        .map(|(anchor, p)| format!("{anchor:?}:{}", p.join("::")))
        .collect();
    assert_eq!(named, ["Some(2):x", "Some(2):x::y", "Some(1):z"]);
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

#[test]
fn nested_modules_are_nodes_of_their_own() {
    let g = graph(&repo().join("host/cluster/src/lib.rs"));
    assert!(g["http::server"].contains("storage::store"), "{g:#?}");
    assert!(g["kubelet::gang"].contains("kubelet::schedule"), "{g:#?}");
    assert!(
        !g["http"].contains("http::server"),
        "a parent declares its children"
    );
}
