//! Every `tfjob-operator` command the documentation shows parses as written.
//!
//! The README, every page of `docs/` and the binary's own `--help` examples show commands a
//! reader copies. This test reads each shell block (```` ```sh ````) of those pages and each
//! `Examples:` line of the help, joins continued lines, drops comments, and hands every
//! invocation of the binary (`tfjob-operator ...` or `cargo run -p tfjob-operator -- ...`, also
//! after a pipe) to the real command-line parser. A renamed flag, a removed subcommand or a
//! value the parser refuses fails it, naming the page and the line. Commands that need no
//! cluster also run for real in `tests/cli.rs` (`the_readmes_commands_without_a_cluster_run`).

use std::path::{Path, PathBuf};

use clap::{CommandFactory as _, Parser as _};

use crate::cli::Cli;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The pages a reader copies commands from.
fn pages() -> Vec<PathBuf> {
    let mut pages = vec![repo().join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(repo().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    pages.extend(docs);
    pages
}

/// The shell lines of `markdown`'s `sh` blocks, continuations joined, with their line numbers.
fn shell_lines(markdown: &str) -> Vec<(usize, String)> {
    let mut lines = Vec::new();
    let mut in_shell = false;
    let mut pending: Option<(usize, String)> = None;
    for (i, line) in markdown.lines().enumerate() {
        let trimmed = line.trim();
        if let Some(lang) = trimmed.strip_prefix("```") {
            in_shell = !in_shell && matches!(lang, "sh" | "bash" | "shell");
            continue;
        }
        if !in_shell {
            continue;
        }
        let (number, mut text) = pending.take().unwrap_or((i + 1, String::new()));
        match trimmed.strip_suffix('\\') {
            Some(part) => {
                text.push_str(part);
                text.push(' ');
                pending = Some((number, text));
            }
            None => {
                text.push_str(trimmed);
                lines.push((number, text));
            }
        }
    }
    lines
}

/// The binary's arguments in one shell line, if it runs the binary: the part after
/// `tfjob-operator` or `cargo run -p tfjob-operator --`, up to a comment, a redirection or a
/// pipe.
fn invocation(line: &str) -> Option<Vec<String>> {
    let line = line.split(" #").next().unwrap_or(line);
    let words = shlex::split(line)?;
    let mut segments = words.split(|w| w == "|" || w == "&&" || w == ";");
    segments.find_map(|words| {
        let words: Vec<&str> = words
            .iter()
            .map(String::as_str)
            .take_while(|w| !w.starts_with('>') && !w.starts_with('<') && *w != "#")
            .collect();
        let args = match words.as_slice() {
            ["tfjob-operator", rest @ ..] => rest,
            ["cargo", "run", "-p", "tfjob-operator", "--", rest @ ..] => rest,
            _ => return None,
        };
        Some(args.iter().map(|w| (*w).to_owned()).collect())
    })
}

/// Every `Examples:` line of the binary's help, subcommands included.
fn help_examples() -> Vec<String> {
    fn walk(cmd: &clap::Command, out: &mut Vec<String>) {
        if let Some(help) = cmd.get_after_help() {
            let help = help.to_string();
            if let Some((_, examples)) = help.split_once("Examples:") {
                for line in examples.trim_start().lines().map(str::trim) {
                    if line.is_empty() {
                        break;
                    }
                    out.push(line.to_owned());
                }
            }
        }
        for sub in cmd.get_subcommands() {
            walk(sub, out);
        }
    }
    let mut out = Vec::new();
    walk(&Cli::command(), &mut out);
    out
}

fn parses(args: &[String]) -> Result<(), String> {
    let argv = std::iter::once("tfjob-operator".to_owned()).chain(args.iter().cloned());
    Cli::try_parse_from(argv)
        .map(drop)
        .map_err(|e| e.to_string())
}

#[test]
fn every_documented_command_parses_as_written() {
    let mut checked = 0;
    let mut failures = Vec::new();
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        let name = page.strip_prefix(repo()).unwrap().display().to_string();
        for (number, line) in shell_lines(&text) {
            let Some(args) = invocation(&line) else {
                continue;
            };
            checked += 1;
            if let Err(e) = parses(&args) {
                failures.push(format!("{name}:{number}: {line}\n{e}"));
            }
        }
    }
    for line in help_examples() {
        let Some(args) = invocation(&line) else {
            continue;
        };
        checked += 1;
        if let Err(e) = parses(&args) {
            failures.push(format!("--help example: {line}\n{e}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    // The README's quickstart alone shows several; finding none means the reader broke.
    assert!(checked >= 30, "only {checked} commands found");
}

#[test]
fn the_reader_finds_commands_behind_cargo_pipes_and_continuations() {
    let page = "text\n```sh\ncargo run -p tfjob-operator -- render \\\n  -f job.yaml -o json  # two lines\ncat job.yaml | tfjob-operator render -f - > out.yaml\nkubectl get pods\n```\n```yaml\ntfjob-operator crd\n```\n";
    let found: Vec<Vec<String>> = shell_lines(page)
        .into_iter()
        .filter_map(|(_, line)| invocation(&line))
        .collect();
    assert_eq!(
        found,
        [
            vec!["render", "-f", "job.yaml", "-o", "json"],
            vec!["render", "-f", "-"],
        ]
    );
    assert!(parses(&found[0]).is_ok());
    assert!(parses(&["render".to_owned(), "--no-such-flag".to_owned()]).is_err());
}

/// The `cargo test` commands a page shows, in code spans or shell lines, with their line
/// numbers: the text from `cargo test` to the end of the span or line.
fn test_commands(markdown: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for (i, line) in markdown.lines().enumerate() {
        let mut rest = line;
        while let Some(start) = rest.find("cargo test") {
            let command = &rest[start..];
            let end = command.find(['`', '#']).unwrap_or(command.len());
            found.push((i + 1, command[..end].trim().to_owned()));
            rest = &command[end..];
        }
    }
    found
}

/// The manifest (`Cargo.toml`) in `dir`.
fn manifest(dir: &Path) -> toml_edit::DocumentMut {
    std::fs::read_to_string(dir.join("Cargo.toml"))
        .unwrap()
        .parse()
        .unwrap()
}

/// The workspace's packages: name to directory.
fn packages() -> std::collections::BTreeMap<String, PathBuf> {
    manifest(&repo())["workspace"]["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|member| {
            let dir = repo().join(member.as_str().unwrap());
            let name = manifest(&dir)["package"]["name"]
                .as_str()
                .unwrap()
                .to_owned();
            (name, dir)
        })
        .collect()
}

/// Why `command` (a documented `cargo test ...`) would not run what it names, if it would not:
/// its package must be the workspace's, its `--test` target one the package has, and a
/// `module::` filter of an integration test must name a module of that binary.
fn test_command_problem(
    command: &str,
    packages: &std::collections::BTreeMap<String, PathBuf>,
) -> Option<String> {
    let words = shlex::split(command)?;
    let mut package = None;
    let mut target = None;
    let mut filter = None;
    let mut words = words.iter().skip(2);
    while let Some(word) = words.next() {
        match word.as_str() {
            "-p" | "--package" => package = words.next(),
            "--test" => target = words.next(),
            "--" => break,
            flag if flag.starts_with('-') => {}
            free => filter = filter.or(Some(free)),
        }
    }
    let (Some(package), Some(target)) = (package, target) else {
        return None;
    };
    let Some(dir) = packages.get(package.as_str()) else {
        return Some(format!("no package {package} in the workspace"));
    };
    let manifest = manifest(dir);
    let declared = manifest
        .get("test")
        .and_then(|tests| tests.as_array_of_tables())
        .into_iter()
        .flatten()
        .find(|test| test.get("name").and_then(|n| n.as_str()) == Some(target.as_str()));
    let automatic = manifest["package"]
        .get("autotests")
        .and_then(|auto| auto.as_bool())
        != Some(false)
        && dir.join("tests").join(format!("{target}.rs")).is_file();
    let Some(main) = declared
        .and_then(|test| test.get("path"))
        .and_then(|path| path.as_str())
        .map(|path| dir.join(path))
        .or_else(|| automatic.then(|| dir.join("tests").join(format!("{target}.rs"))))
    else {
        return Some(format!("{package} has no test target {target}"));
    };
    let module = filter.and_then(|f| f.split_once("::")).map(|(m, _)| m)?;
    let folder = main.parent().unwrap();
    let exists = folder.join(format!("{module}.rs")).is_file()
        || folder.join(module).join("mod.rs").is_file();
    (!exists).then(|| format!("{package}'s {target} has no module {module}"))
}

#[test]
fn every_documented_test_command_names_a_test_target_and_module_that_exist() {
    let packages = packages();
    let mut checked = 0;
    let mut failures = Vec::new();
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        let name = page.strip_prefix(repo()).unwrap().display().to_string();
        for (number, command) in test_commands(&text) {
            checked += 1;
            if let Some(problem) = test_command_problem(&command, &packages) {
                failures.push(format!("{name}:{number}: {command}\n{problem}"));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    assert!(checked >= 10, "only {checked} test commands found");
}

#[test]
fn a_test_command_naming_a_missing_target_or_module_is_caught() {
    let packages = packages();
    let problem = |command: &str| test_command_problem(command, &packages);
    assert_eq!(
        problem("cargo test -p tfjob-operator --test integration traces::"),
        None
    );
    assert_eq!(
        problem("cargo test -p tfjob-operator --lib telemetry"),
        None
    );
    assert_eq!(
        problem("cargo test -p tfjob-controller --test mock_api"),
        None
    );
    assert_eq!(
        problem("cargo test -p tfjob-operator --test traces").as_deref(),
        Some("tfjob-operator has no test target traces")
    );
    assert_eq!(
        problem("cargo test -p tfjob-operator --test integration tracing::").as_deref(),
        Some("tfjob-operator's integration has no module tracing")
    );
    assert_eq!(
        problem("cargo test -p tfjob-nothing --test integration").as_deref(),
        Some("no package tfjob-nothing in the workspace")
    );
}
