//! Structured logging into the operator's log, over the contract's only import.
//!
//! `fields` are key/value pairs the operator attaches to the record (policy name and digest are
//! added by the host). The host caps what one call may write, so log decisions, not documents.
//! Outside Wasm (a policy's native unit tests) the record goes to stderr instead: the import
//! exists only inside the sandbox.

pub use crate::wit::log::Level;

/// Writes one record.
pub fn log(level: Level, message: &str, fields: &[(&str, &str)]) {
    emit(level, message, fields);
}

pub fn trace(message: &str, fields: &[(&str, &str)]) {
    emit(Level::Trace, message, fields);
}

pub fn debug(message: &str, fields: &[(&str, &str)]) {
    emit(Level::Debug, message, fields);
}

pub fn info(message: &str, fields: &[(&str, &str)]) {
    emit(Level::Info, message, fields);
}

pub fn warn(message: &str, fields: &[(&str, &str)]) {
    emit(Level::Warn, message, fields);
}

pub fn error(message: &str, fields: &[(&str, &str)]) {
    emit(Level::Error, message, fields);
}

#[cfg(target_arch = "wasm32")]
fn emit(level: Level, message: &str, fields: &[(&str, &str)]) {
    let fields: Vec<(String, String)> = fields
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    crate::wit::log::log(level, message, &fields);
}

#[cfg(not(target_arch = "wasm32"))]
fn emit(level: Level, message: &str, fields: &[(&str, &str)]) {
    let fields: String = fields.iter().map(|(k, v)| format!(" {k}={v:?}")).collect();
    eprintln!("{level:?} {message}{fields}");
}
