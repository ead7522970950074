//! `run --config FILE`: one YAML file that sets any of a subcommand's flags, and
//! `config defaults`, which prints such a file with every key at its default.
//!
//! Nothing here lists the flags: the keys are the long names (and aliases) of the subcommand's
//! arguments as clap knows them, so a flag added to `RunArgs` is a key the moment it exists.
//! The file's values become the arguments' default values before clap parses the command line,
//! which gives the precedence by clap's own rules: a flag on the command line, then its
//! environment variable, then the file, then the built-in default. Each value is checked by the
//! argument's own value parser (ranges, listen addresses, possible values) before that, so an
//! invalid value is reported against the file and its key rather than as a flag nobody typed.
//!
//! Two of clap's rules look only at explicit values and so would not see the file on their own:
//! a required flag is satisfied by a file value (its `required` is lifted when the file sets
//! it), and a file value that conflicts with another flag in effect (given, from the
//! environment, or from the file) is refused here after parsing, naming the key. A file may
//! turn on a boolean flag that the command line then turns off again: a flag the file sets
//! takes `--flag=false` as well as `--flag` (which clap's conflict rules still count as the flag
//! given). Counted flags (`-vvv`) cannot be set in the file.
//! Not covered: `requires` relations and required groups, which clap does not expose; `run`
//! uses neither.

use std::ffi::{OsStr, OsString};
use std::io::Read as _;
use std::path::{Path, PathBuf};

use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::parser::ValueSource;
use clap::{Arg, ArgAction, ArgMatches, Command, Parser};
use serde_yaml_ng::Value;

/// The id (and long name) of the argument that names the file.
pub const CONFIG_ID: &str = "config";

/// The largest file read: a configuration is a few hundred bytes, and anything far larger is a
/// mistake (the wrong file) that should not be parsed at all.
pub const MAX_FILE_BYTES: u64 = 1024 * 1024;

/// How close (Jaro similarity) an unknown key must be to a real one to be suggested.
const SUGGESTION_THRESHOLD: f64 = 0.8;

/// Width the help texts are wrapped to in `config defaults`.
const COMMENT_WIDTH: usize = 98;

/// A problem with a configuration file, naming the file.
#[derive(Debug, thiserror::Error)]
#[error("{}: {problem}", path.display())]
pub struct ConfigError {
    pub path: PathBuf,
    pub problem: Problem,
}

/// What is wrong with a configuration file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Problem {
    #[error("cannot read it: {0}")]
    Unreadable(String),
    #[error("larger than {MAX_FILE_BYTES} bytes; is it the right file?")]
    TooLarge,
    #[error("not UTF-8 text")]
    NotUtf8,
    #[error("not valid YAML: {0}")]
    Yaml(String),
    #[error(
        "must be a mapping of flag names to values (see `tfjob-operator config defaults`), not {0}"
    )]
    NotAMapping(&'static str),
    #[error("key {0} is not a flag name")]
    KeyNotAString(String),
    #[error("unknown key {key:?}{}", match suggestion {
        Some(s) => format!(" (did you mean {s:?}?)"),
        None => String::new(),
    })]
    Unknown {
        key: String,
        suggestion: Option<String>,
    },
    #[error("key {0:?} names the configuration file itself; give it on the command line")]
    ConfigItself(String),
    #[error("key {0:?} is not a setting")]
    NotASetting(String),
    #[error("key {0:?} counts repetitions; give it on the command line")]
    Counted(String),
    #[error("keys {first:?} and {second:?} both set --{flag}")]
    Duplicate {
        first: String,
        second: String,
        flag: String,
    },
    #[error("key {key:?}: {what}")]
    Shape { key: String, what: String },
    #[error("key {key:?}: invalid value {value:?}: {reason}")]
    Invalid {
        key: String,
        value: String,
        reason: String,
    },
    #[error("key {key:?} cannot be used with {other}")]
    Conflict { key: String, other: String },
    #[error("was not found in the arguments; give it as `--config FILE` or `--config=FILE`")]
    NotFoundInArguments,
}

/// Why the command line was not parsed.
#[derive(Debug, thiserror::Error)]
pub enum ParseError {
    /// A usage error, `--help` or `--version`, formatted by clap.
    #[error(transparent)]
    Clap(#[from] clap::Error),
    #[error(transparent)]
    Config(#[from] ConfigError),
}

/// One key of the file that sets a flag.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    /// As written in the file (a long name or an alias).
    key: String,
    /// The argument's id.
    id: String,
    /// The values, as they would be written after `--flag=`; empty for an empty list.
    values: Vec<String>,
    /// For a boolean flag, the value it has when not given (`false` for `--log-json`).
    flag_off: Option<&'static str>,
}

/// The flags a configuration file sets, checked against the command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    path: PathBuf,
    entries: Vec<Entry>,
}

/// What a key of the file names.
enum Key<'a> {
    Setting(&'a Arg),
    ConfigItself,
    NotASetting,
    Counted,
}

impl Settings {
    /// The settings of `text`, the contents of the file at `path`, for the (built) command
    /// `cmd`. Every key must name one of `cmd`'s flags and every value must pass that flag's
    /// value parser.
    pub fn from_yaml(path: &Path, text: &str, cmd: &Command) -> Result<Settings, ConfigError> {
        let fail = |problem| ConfigError {
            path: path.to_owned(),
            problem,
        };
        let document: Value =
            serde_yaml_ng::from_str(text).map_err(|e| fail(Problem::Yaml(e.to_string())))?;
        let mapping = match document {
            // An empty file, or one of comments only, sets nothing.
            Value::Null => serde_yaml_ng::Mapping::new(),
            Value::Mapping(m) => m,
            other => return Err(fail(Problem::NotAMapping(kind_of(&other)))),
        };
        let checker = value_checker(cmd);
        let mut seen: Vec<(String, String)> = Vec::new();
        let mut entries = Vec::new();
        for (key, value) in mapping {
            let Value::String(key) = key else {
                return Err(fail(Problem::KeyNotAString(
                    scalar_text(&key).unwrap_or_else(|| format!("of kind {}", kind_of(&key))),
                )));
            };
            let arg = match lookup(cmd, &key) {
                Some(Key::Setting(arg)) => arg,
                Some(Key::ConfigItself) => return Err(fail(Problem::ConfigItself(key))),
                Some(Key::NotASetting) => return Err(fail(Problem::NotASetting(key))),
                Some(Key::Counted) => return Err(fail(Problem::Counted(key))),
                None => {
                    let suggestion = suggest(cmd, &key);
                    return Err(fail(Problem::Unknown { key, suggestion }));
                }
            };
            let id = arg.get_id().as_str().to_owned();
            if let Some((first, _)) = seen.iter().find(|(_, other)| *other == id) {
                return Err(fail(Problem::Duplicate {
                    first: first.clone(),
                    second: key,
                    flag: arg.get_long().unwrap_or(&id).to_owned(),
                }));
            }
            seen.push((key.clone(), id.clone()));
            if value.is_null() {
                // `key:` with nothing leaves the flag at its built-in default.
                continue;
            }
            let values = values_of(arg, &key, &value).map_err(fail)?;
            let flag_off = flag_off(arg);
            match flag_off {
                Some(_) => check_boolean(&key, &values).map_err(fail)?,
                None => check_values(&checker, arg, &key, &values).map_err(fail)?,
            }
            entries.push(Entry {
                key,
                id,
                values,
                flag_off,
            });
        }
        Ok(Settings {
            path: path.to_owned(),
            entries,
        })
    }

    /// `cmd` (not yet built) with the file's values as its arguments' defaults.
    pub fn apply(&self, cmd: Command) -> Command {
        cmd.mut_args(|arg| {
            let Some(entry) = self.entries.iter().find(|e| arg.get_id() == e.id.as_str()) else {
                return arg;
            };
            let arg = match entry.flag_off {
                // A boolean flag takes no value; the file's value becomes its default, and
                // `--flag=false` lets the command line undo a `true` from the file. The value
                // stays a `bool` (what the flag's field reads) whatever parser it had.
                Some(off) => {
                    if arg.get_value_parser().type_id() == std::any::TypeId::of::<bool>() {
                        arg
                    } else {
                        arg.value_parser(clap::value_parser!(bool))
                    }
                    .action(ArgAction::Set)
                    .num_args(0..=1)
                    .require_equals(true)
                    .default_missing_value(if off == "false" { "true" } else { "false" })
                }
                None => arg,
            };
            // The file supplies the flag, so it is not missing.
            let arg = if entry.values.is_empty() {
                arg
            } else {
                arg.required(false)
            };
            arg.default_values(entry.values.clone())
        })
    }

    /// Refuses a file value that conflicts with another flag in effect, which clap does not
    /// check for default values. `cmd` is the built command, `matches` its parsed matches.
    pub fn check_conflicts(&self, cmd: &Command, matches: &ArgMatches) -> Result<(), ConfigError> {
        for entry in &self.entries {
            if matches.value_source(&entry.id) != Some(ValueSource::DefaultValue)
                || !in_effect(cmd, matches, &entry.id)
            {
                continue;
            }
            for other in conflicts_of(cmd, &entry.id) {
                let id = other.get_id().as_str();
                if !in_effect(cmd, matches, id) {
                    continue;
                }
                let long = other.get_long().unwrap_or(id);
                let described = match matches.value_source(id) {
                    Some(ValueSource::CommandLine) => format!("--{long} (on the command line)"),
                    Some(ValueSource::EnvVariable) => match other.get_env() {
                        Some(env) => format!("--{long} (from ${})", env.to_string_lossy()),
                        None => format!("--{long}"),
                    },
                    Some(ValueSource::DefaultValue) => {
                        match self.entries.iter().find(|e| e.id == id) {
                            Some(e) => format!("key {:?}", e.key),
                            // A built-in default never conflicts, as in clap.
                            None => continue,
                        }
                    }
                    _ => continue,
                };
                return Err(ConfigError {
                    path: self.path.clone(),
                    problem: Problem::Conflict {
                        key: entry.key.clone(),
                        other: described,
                    },
                });
            }
        }
        Ok(())
    }
}

/// Parses the command line `args` (program name first) into `P`, with the configuration file
/// of `--config FILE` when `subcommand` is the one run.
pub fn parse<P: Parser>(args: Vec<OsString>, subcommand: &str) -> Result<P, ParseError> {
    let mut cmd = P::command();
    let mut built = cmd.clone();
    built.build();
    let sub = built
        .find_subcommand(subcommand)
        .unwrap_or_else(|| panic!("the command has no subcommand {subcommand}"));
    let path = config_path(&built, subcommand, &args);
    let settings = match &path {
        Some(path) => Some(Settings::from_yaml(path, &read(path)?, sub)?),
        None => None,
    };
    if let Some(settings) = &settings {
        cmd = cmd.mut_subcommand(subcommand, |c| settings.apply(c));
    }
    let matches = cmd.try_get_matches_from_mut(args)?;
    if let Some(m) = matches.subcommand_matches(subcommand) {
        // The file read must be the one clap parsed: a form of the argument this scan does not
        // know would otherwise leave the file unread without a word.
        let parsed = m.try_get_one::<PathBuf>(CONFIG_ID).ok().flatten();
        if parsed != path.as_ref()
            && let Some(parsed) = parsed
        {
            return Err(ConfigError {
                path: parsed.clone(),
                problem: Problem::NotFoundInArguments,
            }
            .into());
        }
        if let Some(settings) = &settings {
            settings.check_conflicts(sub, m)?;
        }
    }
    P::from_arg_matches(&matches).map_err(|e| ParseError::Clap(e.format(&mut cmd)))
}

/// Reads the file, refusing one larger than [`MAX_FILE_BYTES`].
pub fn read(path: &Path) -> Result<String, ConfigError> {
    let fail = |problem| ConfigError {
        path: path.to_owned(),
        problem,
    };
    let file = std::fs::File::open(path).map_err(|e| fail(Problem::Unreadable(e.to_string())))?;
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| fail(Problem::Unreadable(e.to_string())))?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(fail(Problem::TooLarge));
    }
    String::from_utf8(bytes).map_err(|_| fail(Problem::NotUtf8))
}

/// The value of `--config` when `args` run `subcommand` (by name or alias) of the built `cmd`.
/// The options before the subcommand take no values (`--help`, `--version`), so the first
/// other word is the subcommand; `--` ends the options.
pub fn config_path(cmd: &Command, subcommand: &str, args: &[OsString]) -> Option<PathBuf> {
    let mut words = args.iter().skip(1).skip_while(|w| starts_with_dash(w));
    let name = words.next()?;
    if cmd.find_subcommand(name)?.get_name() != subcommand {
        return None;
    }
    let flag = format!("--{CONFIG_ID}");
    let with_equals = format!("--{CONFIG_ID}=");
    while let Some(word) = words.next() {
        let Some(text) = word.to_str() else { continue };
        if text == "--" {
            return None;
        }
        if text == flag {
            return words.next().map(PathBuf::from);
        }
        if let Some(value) = text.strip_prefix(&with_equals) {
            return Some(PathBuf::from(value));
        }
    }
    None
}

fn starts_with_dash(word: &OsStr) -> bool {
    word.to_str().is_some_and(|w| w.starts_with('-'))
}

/// [`defaults_yaml`] for `subcommand` of the top-level command `cmd`.
pub fn run_defaults_yaml(mut cmd: Command, subcommand: &str) -> String {
    cmd.build();
    let invocation = format!("{} {subcommand}", cmd.get_name());
    let sub = cmd
        .find_subcommand(subcommand)
        .unwrap_or_else(|| panic!("the command has no subcommand {subcommand}"));
    defaults_yaml(sub, &invocation)
}

/// A complete configuration file for the built command `cmd`: every key with its help as a
/// comment and its built-in default as the value, so that loading it changes nothing.
pub fn defaults_yaml(cmd: &Command, invocation: &str) -> String {
    let mut out = format!(
        "# Configuration of `{invocation}`; load it with `{invocation} --config FILE`.\n\
         # Keys are the flags' long names (an alias works too); a repeatable flag takes a list.\n\
         # A flag on the command line wins over its environment variable, which wins over this\n\
         # file, which wins over the built-in default. A key with no value leaves its flag at the\n\
         # built-in default. Every value below is the built-in default.\n"
    );
    for arg in cmd.get_arguments() {
        let Some(long) = arg.get_long() else { continue };
        let Some(Key::Setting(_)) = lookup(cmd, long) else {
            continue;
        };
        out.push('\n');
        let help = arg
            .get_long_help()
            .or(arg.get_help())
            .map(|h| h.to_string())
            .unwrap_or_default();
        let mut notes = Vec::new();
        if let Some(aliases) = arg.get_all_aliases() {
            notes.push(format!("Also as: {}.", aliases.join(", ")));
        }
        if flag_off(arg).is_none() {
            let possible: Vec<String> = arg
                .get_possible_values()
                .iter()
                .filter(|p| !p.is_hide_set())
                .map(|p| p.get_name().to_owned())
                .collect();
            if !possible.is_empty() {
                notes.push(format!("One of: {}.", possible.join(", ")));
            }
        }
        if let Some(env) = arg.get_env() {
            notes.push(format!(
                "${} wins over this key when set.",
                env.to_string_lossy()
            ));
        }
        for paragraph in help.lines().chain(notes.iter().map(String::as_str)) {
            for line in wrap(paragraph, COMMENT_WIDTH) {
                out.push_str(&format!("# {line}\n").replace("# \n", "#\n"));
            }
        }
        let defaults: Vec<String> = arg
            .get_default_values()
            .iter()
            .map(|v| v.to_string_lossy().into_owned())
            .collect();
        let value = if is_repeatable(arg) {
            let items: Vec<String> = defaults.iter().map(|v| yaml_scalar(v)).collect();
            format!(" [{}]", items.join(", "))
        } else {
            match defaults.first() {
                Some(v) => format!(" {}", yaml_scalar(v)),
                None => String::new(),
            }
        };
        out.push_str(&format!("{long}:{value}\n"));
    }
    out
}

/// `value` as a YAML scalar that reads back as the same text: plain where that is so, else
/// double-quoted (JSON's quoting is valid YAML).
fn yaml_scalar(value: &str) -> String {
    let plain = serde_yaml_ng::from_str::<Value>(value)
        .ok()
        .and_then(|v| scalar_text(&v))
        .is_some_and(|text| text == value);
    if plain && !value.contains(['\n', '#']) {
        value.to_owned()
    } else {
        serde_json::to_string(value).expect("a string serializes")
    }
}

/// Splits `text` into lines of at most `width` characters at spaces (a longer word stands on
/// its own line).
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in text.split(' ').filter(|w| !w.is_empty()) {
        if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() || lines.is_empty() {
        lines.push(line);
    }
    lines
}

/// What `key` names among `cmd`'s arguments (long names and every alias).
fn lookup<'a>(cmd: &'a Command, key: &str) -> Option<Key<'a>> {
    let arg = cmd.get_arguments().find(|a| {
        a.get_long() == Some(key) || a.get_all_aliases().is_some_and(|all| all.contains(&key))
    })?;
    Some(match arg.get_action() {
        _ if arg.get_id() == CONFIG_ID => Key::ConfigItself,
        ArgAction::Help | ArgAction::HelpShort | ArgAction::HelpLong | ArgAction::Version => {
            Key::NotASetting
        }
        ArgAction::Count => Key::Counted,
        _ => Key::Setting(arg),
    })
}

/// The settable key closest to `key`, if one is close enough to be a typo of it.
fn suggest(cmd: &Command, key: &str) -> Option<String> {
    cmd.get_arguments()
        .filter(|a| {
            matches!(
                a.get_long().and_then(|l| lookup(cmd, l)),
                Some(Key::Setting(_))
            )
        })
        .flat_map(|a| {
            a.get_long()
                .into_iter()
                .chain(a.get_all_aliases().unwrap_or_default())
        })
        .map(|name| (strsim::jaro(key, name), name))
        .filter(|(score, _)| *score >= SUGGESTION_THRESHOLD)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, name)| name.to_owned())
}

/// For a boolean flag (`--log-json`), its value when not given.
fn flag_off(arg: &Arg) -> Option<&'static str> {
    match arg.get_action() {
        ArgAction::SetTrue => Some("false"),
        ArgAction::SetFalse => Some("true"),
        _ => None,
    }
}

/// Whether the flag may be given more than once, each time adding a value.
fn is_repeatable(arg: &Arg) -> bool {
    matches!(arg.get_action(), ArgAction::Append)
}

/// The texts of a key's value: one scalar, or a list for a repeatable flag.
fn values_of(arg: &Arg, key: &str, value: &Value) -> Result<Vec<String>, Problem> {
    let shape = |what: String| Problem::Shape {
        key: key.to_owned(),
        what,
    };
    match value {
        Value::Sequence(items) if is_repeatable(arg) => items
            .iter()
            .map(|item| {
                scalar_text(item).ok_or_else(|| {
                    shape(format!(
                        "each item must be a string, number or boolean, not {}",
                        kind_of(item)
                    ))
                })
            })
            .collect(),
        Value::Sequence(_) => Err(shape(
            "takes one value, not a list (the flag is not repeatable)".to_owned(),
        )),
        other => scalar_text(other).map(|v| vec![v]).ok_or_else(|| {
            shape(format!(
                "must be a string, number or boolean{}, not {}",
                if is_repeatable(arg) {
                    ", or a list"
                } else {
                    ""
                },
                kind_of(other)
            ))
        }),
    }
}

/// The text of a YAML scalar as it would be typed after the flag.
fn scalar_text(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "empty",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Sequence(_) => "a list",
        Value::Mapping(_) => "a mapping",
        Value::Tagged(_) => "a tagged value",
    }
}

fn check_boolean(key: &str, values: &[String]) -> Result<(), Problem> {
    match values {
        [v] if v == "true" || v == "false" => Ok(()),
        _ => Err(Problem::Invalid {
            key: key.to_owned(),
            value: values.join(", "),
            reason: "expected true or false".to_owned(),
        }),
    }
}

/// `cmd` for checking one flag's values alone: nothing required, no environment read (an
/// environment variable must not decide whether the file's value is valid).
fn value_checker(cmd: &Command) -> Command {
    cmd.clone().mut_args(|a| a.required(false).env(None))
}

/// Runs `values` through the flag's own value parser by parsing `--flag=value` with `checker`.
fn check_values(checker: &Command, arg: &Arg, key: &str, values: &[String]) -> Result<(), Problem> {
    let long = arg.get_long().expect("settings have long names");
    for value in values {
        let argv = [checker.get_name().to_owned(), format!("--{long}={value}")];
        match checker.clone().try_get_matches_from(argv) {
            Ok(_) => {}
            // About other flags (a rule relating them), not this value.
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::MissingRequiredArgument
                        | ErrorKind::ArgumentConflict
                        | ErrorKind::MissingSubcommand
                ) => {}
            Err(e) => {
                return Err(Problem::Invalid {
                    key: key.to_owned(),
                    value: value.clone(),
                    reason: reason_of(&e),
                });
            }
        }
    }
    Ok(())
}

/// The part of a clap value error that says why, without clap's framing (which names the flag
/// as if it had been typed).
fn reason_of(error: &clap::Error) -> String {
    if let Some(source) = std::error::Error::source(error) {
        return source.to_string();
    }
    if let Some(ContextValue::Strings(valid)) = error.get(ContextKind::ValidValue) {
        return format!("expected one of {}", valid.join(", "));
    }
    let rendered = error.render().to_string();
    let first = rendered.lines().next().unwrap_or_default();
    first.strip_prefix("error: ").unwrap_or(first).to_owned()
}

/// The arguments of `cmd` that conflict with `id`, whichever of the two declared it (clap keeps
/// a conflict on the argument that names it).
fn conflicts_of<'a>(cmd: &'a Command, id: &str) -> Vec<&'a Arg> {
    let mut found: Vec<&Arg> = Vec::new();
    for arg in cmd.get_arguments() {
        let declared = cmd.get_arg_conflicts_with(arg);
        let other = if arg.get_id() == id {
            declared
        } else if declared.iter().any(|c| c.get_id() == id) {
            vec![arg]
        } else {
            continue;
        };
        for o in other {
            if !found.iter().any(|f| f.get_id() == o.get_id()) {
                found.push(o);
            }
        }
    }
    found
}

/// Whether the flag `id` has a value that does something: any value of an option, `true` for
/// `--log-json` (not its `false`).
fn in_effect(cmd: &Command, matches: &ArgMatches, id: &str) -> bool {
    let Some(raw) = matches.get_raw(id) else {
        return false;
    };
    let raw: Vec<&OsStr> = raw.collect();
    if raw.is_empty() {
        return false;
    }
    let off = cmd
        .get_arguments()
        .find(|a| a.get_id() == id)
        .and_then(flag_off);
    match off {
        Some(off) => raw.iter().any(|v| *v != off),
        None => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory as _;

    use crate::cli::{Cli, Command as Sub};
    use crate::run::RunArgs;

    const FILE: &str = "/etc/tfjob/config.yaml";

    fn run_command() -> Command {
        let mut cmd = Cli::command();
        cmd.build();
        cmd.find_subcommand("run").unwrap().clone()
    }

    fn settings(text: &str) -> Result<Settings, String> {
        Settings::from_yaml(Path::new(FILE), text, &run_command()).map_err(|e| e.to_string())
    }

    fn os(args: &[&str]) -> Vec<OsString> {
        args.iter().map(OsString::from).collect()
    }

    /// Parses `args` after `tfjob-operator run` with `text` as the configuration file.
    fn run_with(text: &str, args: &[&str]) -> Result<RunArgs, String> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.yaml");
        std::fs::write(&path, text).unwrap();
        let mut argv = vec![
            "tfjob-operator".to_owned(),
            "run".to_owned(),
            "--config".to_owned(),
            path.display().to_string(),
        ];
        argv.extend(args.iter().map(|a| a.to_string()));
        let argv = argv.into_iter().map(OsString::from).collect();
        match parse::<Cli>(argv, "run") {
            Ok(Cli {
                command: Sub::Run(args),
            }) => Ok(*args),
            Ok(other) => panic!("not run: {other:?}"),
            Err(e) => Err(e.to_string().replace(&path.display().to_string(), "FILE")),
        }
    }

    fn run_plain(args: &[&str]) -> RunArgs {
        let mut argv = vec!["tfjob-operator", "run"];
        argv.extend(args);
        match Cli::try_parse_from(argv).unwrap().command {
            Sub::Run(args) => *args,
            other => panic!("not run: {other:?}"),
        }
    }

    #[test]
    fn every_long_name_and_alias_of_run_is_a_key() {
        let cmd = run_command();
        for arg in cmd.get_arguments() {
            let Some(long) = arg.get_long() else { continue };
            let expected_setting = !matches!(long, "help" | "config");
            for name in std::iter::once(long).chain(arg.get_all_aliases().unwrap_or_default()) {
                assert_eq!(
                    matches!(lookup(&cmd, name), Some(Key::Setting(_))),
                    expected_setting,
                    "{name}"
                );
            }
        }
        // A sample of flags from the nested argument groups too.
        for key in [
            "controller-threads",
            "threads",
            "metrics-addr",
            "policy-allow",
            "policy-trusted-key",
            "no-configmap-policies",
        ] {
            assert!(matches!(lookup(&cmd, key), Some(Key::Setting(_))), "{key}");
        }
    }

    #[test]
    fn scalars_lists_and_booleans_become_flag_values() {
        let s = settings(
            "controller-threads: 8\nmetrics-bind-address: \":8080\"\ngang-scheduler-name: volcano\n\
             policy-namespace: [a, b]\npolicy-allow: secrets\nlog-json: true\nnamespace:\n",
        )
        .unwrap();
        let got: Vec<(&str, Vec<&str>)> = s
            .entries
            .iter()
            .map(|e| (e.id.as_str(), e.values.iter().map(String::as_str).collect()))
            .collect();
        assert_eq!(
            got,
            vec![
                ("threads", vec!["8"]),
                ("metrics_addr", vec![":8080"]),
                ("gang_scheduler_name", vec!["volcano"]),
                ("policy_namespaces", vec!["a", "b"]),
                ("policy_allow", vec!["secrets"]),
                ("log_json", vec!["true"]),
            ]
        );
    }

    #[test]
    fn unknown_keys_are_named_with_a_suggestion() {
        assert_eq!(
            settings("controler-threads: 8").unwrap_err(),
            format!(
                "{FILE}: unknown key \"controler-threads\" (did you mean \"controller-threads\"?)"
            )
        );
        assert_eq!(
            settings("metrics-adress: :1").unwrap_err(),
            format!("{FILE}: unknown key \"metrics-adress\" (did you mean \"metrics-addr\"?)")
        );
        assert_eq!(
            settings("zzz: 1").unwrap_err(),
            format!("{FILE}: unknown key \"zzz\"")
        );
        // Keys are flag names, not field names.
        assert!(
            settings("log_json: true")
                .unwrap_err()
                .contains("unknown key")
        );
    }

    #[test]
    fn the_file_itself_help_and_version_are_not_keys() {
        let err = settings("config: other.yaml").unwrap_err();
        assert!(
            err.contains("key \"config\" names the configuration file itself"),
            "{err}"
        );
        assert_eq!(
            settings("help: true").unwrap_err(),
            format!("{FILE}: key \"help\" is not a setting")
        );
        let counted = Command::new("x")
            .arg(Arg::new("verbose").long("verbose").action(ArgAction::Count))
            .arg(
                Arg::new("version")
                    .long("version")
                    .action(ArgAction::Version),
            );
        let err = Settings::from_yaml(Path::new(FILE), "verbose: 2", &counted).unwrap_err();
        assert_eq!(err.problem, Problem::Counted("verbose".into()));
        let err = Settings::from_yaml(Path::new(FILE), "version: true", &counted).unwrap_err();
        assert_eq!(err.problem, Problem::NotASetting("version".into()));
    }

    #[test]
    fn invalid_values_are_named_with_the_parsers_reason() {
        assert_eq!(
            settings("controller-threads: 0").unwrap_err(),
            format!(
                "{FILE}: key \"controller-threads\": invalid value \"0\": 0 is not in 1..=65535"
            )
        );
        let err = settings("metrics-bind-address: 8080").unwrap_err();
        assert!(
            err.starts_with(&format!(
                "{FILE}: key \"metrics-bind-address\": invalid value \"8080\": "
            )) && err.contains("HOST:PORT, :PORT or 0"),
            "{err}"
        );
        assert_refused(&[
            (
                "policy-allow: [secrets, root]",
                "key \"policy-allow\": invalid value \"root\": expected one of secrets",
            ),
            ("enable-scheme: [pytorchjob]", "TFJobs only"),
            (
                "kube-api-qps: -1",
                "key \"kube-api-qps\": invalid value \"-1\"",
            ),
            (
                "log-json: yes",
                "key \"log-json\": invalid value \"yes\": expected true or false",
            ),
            ("log-json: 1", "expected true or false"),
        ]);
    }

    /// Each file of `cases` is refused with an error containing its text.
    fn assert_refused(cases: &[(&str, &str)]) {
        for (text, expected) in cases {
            let err = settings(text).unwrap_err();
            assert!(err.contains(expected), "{text}: {err}");
        }
    }

    #[test]
    fn values_of_the_wrong_shape_are_refused() {
        assert_refused(&[
            (
                "controller-threads: [1, 2]",
                "key \"controller-threads\": takes one value, not a list",
            ),
            (
                "namespace: {a: 1}",
                "key \"namespace\": must be a string, number or boolean, not a mapping",
            ),
            (
                "policy-namespace: [[a]]",
                "each item must be a string, number or boolean, not a list",
            ),
            ("namespace: !secret x", "not a tagged value"),
        ]);
    }

    #[test]
    fn a_file_that_is_not_a_mapping_is_refused() {
        for (text, kind) in [
            ("- a\n- b\n", "a list"),
            ("just words", "a string"),
            ("8", "a number"),
        ] {
            assert_eq!(
                settings(text).unwrap_err(),
                format!(
                    "{FILE}: must be a mapping of flag names to values (see `tfjob-operator config defaults`), not {kind}"
                )
            );
        }
        let err = settings("a: [").unwrap_err();
        assert!(
            err.starts_with(&format!("{FILE}: not valid YAML: ")),
            "{err}"
        );
        let err = settings("1: x").unwrap_err();
        assert_eq!(err, format!("{FILE}: key 1 is not a flag name"));
        let err = settings("namespace: a\nnamespace: b\n").unwrap_err();
        assert!(
            err.starts_with(&format!("{FILE}: not valid YAML: ")),
            "{err}"
        );
        // Empty, or comments only: nothing set.
        assert_eq!(settings("").unwrap().entries, vec![]);
        assert_eq!(settings("# nothing\n").unwrap().entries, vec![]);
    }

    #[test]
    fn a_flag_set_under_two_names_is_refused() {
        assert_eq!(
            settings("threads: 2\ncontroller-threads: 3\n").unwrap_err(),
            format!("{FILE}: keys \"threads\" and \"controller-threads\" both set --threads")
        );
    }

    #[test]
    fn the_config_path_is_found_where_clap_would_find_it() {
        let cmd = run_command_top();
        let path = |args: &[&str]| config_path(&cmd, "run", &os(args));
        assert_eq!(
            path(&["op", "run", "--config", "a.yaml"]),
            Some("a.yaml".into())
        );
        assert_eq!(
            path(&["op", "run", "-x", "--config=b.yaml"]),
            Some("b.yaml".into())
        );
        assert_eq!(path(&["op", "run", "--", "--config", "a"]), None);
        assert_eq!(path(&["op", "render", "--config", "a"]), None);
        assert_eq!(path(&["op", "run", "--config"]), None);
        assert_eq!(path(&["op", "run", "--configs", "a"]), None);
        assert_eq!(path(&["op"]), None);
    }

    fn run_command_top() -> Command {
        let mut cmd = Cli::command();
        cmd.build();
        cmd
    }

    #[test]
    fn file_values_are_defaults_below_the_command_line() {
        let file = "controller-threads: 8\nmetrics-bind-address: 127.0.0.1:9000\n\
                    policy-namespace: [a, b]\ngang-scheduler-name: volcano\n";
        let args = run_with(file, &[]).unwrap();
        assert_eq!(args.threads, 8);
        assert_eq!(args.metrics_addr.0, Some("127.0.0.1:9000".parse().unwrap()));
        assert_eq!(args.sources.policy_namespaces, vec!["a", "b"]);
        assert_eq!(args.gang_scheduler_name.as_deref(), Some("volcano"));
        // The command line wins, under either name; a repeatable flag replaces the file's list.
        let args = run_with(
            file,
            &[
                "--threads",
                "3",
                "--metrics-addr",
                "0",
                "--policy-namespace",
                "c",
            ],
        )
        .unwrap();
        assert_eq!(args.threads, 3);
        assert_eq!(args.metrics_addr.0, None);
        assert_eq!(args.sources.policy_namespaces, vec!["c"]);
        // Keys the file leaves out keep their built-in defaults.
        assert_eq!(args.kube_api_qps, 20);
    }

    #[test]
    fn a_boolean_from_the_file_can_be_turned_off_on_the_command_line() {
        assert!(run_with("log-json: true", &[]).unwrap().log_json);
        assert!(
            !run_with("log-json: true", &["--log-json=false"])
                .unwrap()
                .log_json
        );
        assert!(
            run_with("log-json: false", &["--log-json"])
                .unwrap()
                .log_json
        );
        assert!(!run_with("log-json: false", &[]).unwrap().log_json);
    }

    #[test]
    fn conflicts_count_file_values() {
        // Both in the file.
        let err =
            run_with("no-configmap-policies: true\npolicy-namespace: [a]\n", &[]).unwrap_err();
        assert!(err.starts_with("FILE: key \""), "{err}");
        assert!(err.contains("cannot be used with key"), "{err}");
        // The file against the command line.
        let err =
            run_with("no-configmap-policies: true", &["--policy-namespace", "a"]).unwrap_err();
        assert_eq!(
            err,
            "FILE: key \"no-configmap-policies\" cannot be used with --policy-namespace (on the command line)"
        );
        // A false boolean conflicts with nothing, and the command line can lift the conflict.
        let args = run_with("no-configmap-policies: false", &["--policy-namespace", "a"]).unwrap();
        assert_eq!(args.sources.policy_namespaces, vec!["a"]);
        // `--flag=false` on the command line is still the flag given, for clap's own rules.
        let err = run_with(
            "no-configmap-policies: true",
            &["--no-configmap-policies=false", "--policy-namespace", "a"],
        )
        .unwrap_err();
        assert!(err.contains("cannot be used with"), "{err}");
        // An empty list is no value.
        assert!(run_with("no-configmap-policies: true\npolicy-namespace: []\n", &[]).is_ok());
    }

    #[test]
    fn a_required_flag_is_satisfied_by_the_file() {
        let cmd = || Command::new("x").arg(Arg::new("name").long("name").required(true));
        let mut built = cmd();
        built.build();
        let s = Settings::from_yaml(Path::new(FILE), "name: n", &built).unwrap();
        let m = s.apply(cmd()).try_get_matches_from(["x"]).unwrap();
        assert_eq!(m.get_one::<String>("name").map(String::as_str), Some("n"));
        assert!(cmd().try_get_matches_from(["x"]).is_err());
    }

    #[test]
    fn a_setfalse_flag_takes_its_value_from_the_file() {
        let cmd = || {
            Command::new("x").arg(
                Arg::new("color")
                    .long("no-color")
                    .action(ArgAction::SetFalse),
            )
        };
        let mut built = cmd();
        built.build();
        let s = Settings::from_yaml(Path::new(FILE), "no-color: false", &built).unwrap();
        let m = s.apply(cmd()).try_get_matches_from(["x"]).unwrap();
        assert_eq!(m.get_one::<bool>("color"), Some(&false));
        let m = s
            .apply(cmd())
            .try_get_matches_from(["x", "--no-color=true"])
            .unwrap();
        assert_eq!(m.get_one::<bool>("color"), Some(&true));
    }

    #[test]
    fn the_defaults_file_means_the_defaults() {
        let text = defaults_yaml(&run_command(), "tfjob-operator run");
        let loaded = run_with(&text, &[]).unwrap();
        let mut plain = run_plain(&[]);
        assert!(loaded.config.is_some());
        plain.config = loaded.config.clone();
        assert_eq!(format!("{loaded:?}"), format!("{plain:?}"));
        // Every settable key is in it, set or empty.
        let document: serde_yaml_ng::Mapping = serde_yaml_ng::from_str(&text).unwrap();
        let cmd = run_command();
        for arg in cmd.get_arguments() {
            let Some(long) = arg.get_long() else { continue };
            let listed = document.contains_key(long);
            assert_eq!(listed, !matches!(long, "help" | "config"), "{long}");
        }
        assert_eq!(document["threads"], Value::from(4));
        assert_eq!(
            document["metrics-bind-address"],
            Value::from("0.0.0.0:8080")
        );
        assert_eq!(document["log-json"], Value::from(false));
        assert_eq!(document["namespace"], Value::Null);
        assert!(text.contains("# Concurrent reconciles (never two for the same job)\n# Also as: controller-threads.\nthreads: 4\n"), "{text}");
        assert!(
            text.contains("# $KUBEFLOW_NAMESPACE wins over this key when set.\nnamespace:\n"),
            "{text}"
        );
        assert!(
            text.lines().all(|l| l.chars().count() <= COMMENT_WIDTH + 2),
            "{text}"
        );
    }

    #[test]
    fn scalars_are_rendered_to_read_back_as_written() {
        for value in [
            "4",
            ":8081",
            "0.0.0.0:8080",
            "volcano",
            "true",
            "a #b",
            "",
            "~",
            "1e3",
            "[x]",
            "a: b",
            "- x",
            "*x",
            "'q'",
            "line\nbreak",
        ] {
            let rendered = yaml_scalar(value);
            let back: Value = serde_yaml_ng::from_str(&format!("k: {rendered}")).unwrap();
            assert_eq!(
                scalar_text(&back["k"]).as_deref(),
                Some(value),
                "{value} as {rendered}"
            );
        }
        assert_eq!(yaml_scalar("4"), "4");
        assert_eq!(yaml_scalar(""), "\"\"");
    }

    #[test]
    fn help_is_wrapped_at_spaces() {
        assert_eq!(wrap("a bb ccc", 4), vec!["a bb", "ccc"]);
        assert_eq!(wrap("", 4), vec![""]);
        assert_eq!(wrap("toolongword x", 4), vec!["toolongword", "x"]);
    }

    #[test]
    fn large_unreadable_and_binary_files_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.yaml");
        let err = read(&missing).unwrap_err();
        assert!(matches!(err.problem, Problem::Unreadable(_)));
        assert!(
            err.to_string()
                .starts_with(&format!("{}: cannot read it: ", missing.display()))
        );
        let big = dir.path().join("big.yaml");
        std::fs::write(&big, vec![b'#'; MAX_FILE_BYTES as usize + 1]).unwrap();
        assert_eq!(read(&big).unwrap_err().problem, Problem::TooLarge);
        let binary = dir.path().join("binary.yaml");
        std::fs::write(&binary, [0xff, 0xfe, 0x00]).unwrap();
        assert_eq!(read(&binary).unwrap_err().problem, Problem::NotUtf8);
        assert!(matches!(
            read(dir.path()).unwrap_err().problem,
            Problem::Unreadable(_)
        ));
    }
}
