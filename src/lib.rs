//! collsim: a congestion-aware simulator and synthesizer for collective-communication algorithms.
//!
//! Data flows topology -> schedule -> simulation -> report. Algorithms and the synthesizer produce
//! schedules; the simulator consumes only the schedule IR and knows nothing of algorithms.

pub mod algorithms;
pub mod astra;
pub mod bound;
pub mod cli;
pub mod collective;
pub mod experiment;
pub mod flow;
pub mod forest;
pub mod llm;
pub mod memory;
pub mod nccl;
pub mod priority;
pub mod report;
pub mod schedule;
pub mod sim;
pub mod synth;
pub mod system;
pub mod topology;
pub mod units;
pub mod workload;
pub mod yaml;

/// Writes `text` to `path` beside it first and renames it over: an interrupted write leaves no
/// half file where a result was.
pub fn write_replacing(path: &std::path::Path, text: &str) -> Result<(), Error> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = path.with_file_name(format!(".{name}.partial"));
    std::fs::write(&tmp, text).map_err(|e| Error::io(tmp.display(), e))?;
    std::fs::rename(&tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        Error::io(path.display(), e)
    })
}

/// A single output file named by `flag` may not replace one of the run's own `inputs`, nor any
/// existing file without `--force`.
pub fn check_output_file(
    path: &std::path::Path,
    flag: &str,
    inputs: &[(&std::path::Path, &str)],
    force: bool,
) -> Result<(), Error> {
    if !path.exists() {
        return Ok(());
    }
    let same = |a: &std::path::Path, b: &std::path::Path| matches!((a.canonicalize(), b.canonicalize()), (Ok(x), Ok(y)) if x == y);
    if let Some((_, input_flag)) = inputs.iter().find(|(i, _)| same(i, path)) {
        return Err(Error::input(format!(
            "{flag} {}: is this run's own {input_flag}; give another file name",
            path.display()
        )));
    }
    if !force {
        return Err(Error::input(format!(
            "{flag} {}: the file exists; give --force to replace it, or another name",
            path.display()
        )));
    }
    Ok(())
}

/// Errors collsim reports to its user. `Input` covers everything wrong with what the user gave
/// (files, flags, schedules); the command line maps it to exit status 2.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Input(String),
    #[error("{path}: {}", io_words(.source))]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// A broken invariant of collsim itself (a bug): never a number it would print.
    #[error("internal error, please report: {0}")]
    Internal(String),
}

impl Error {
    /// An input error. Its message is one line: line breaks in quoted input are shown as `\n`.
    pub fn input(message: impl Into<String>) -> Error {
        let message: String = message.into();
        if message.chars().any(char::is_control) {
            // Control characters from input (line breaks, escape sequences) are shown escaped.
            Error::Input(
                message
                    .chars()
                    .map(|c| {
                        if c.is_control() {
                            c.escape_default().to_string()
                        } else {
                            c.to_string()
                        }
                    })
                    .collect(),
            )
        } else {
            Error::Input(message)
        }
    }

    /// A failure to read or write `path`, reported as exit status 2 like any input error.
    pub fn io(path: impl std::fmt::Display, source: std::io::Error) -> Error {
        Error::Io {
            path: path.to_string(),
            source,
        }
    }
}

/// Readers of untrusted binary input running now (see `read_untrusted`).
static UNTRUSTED_READERS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Whether a reader of untrusted binary input is running: a panic then is the file's fault, and
/// the binary's panic hook lets `read_untrusted` turn it into an input error.
pub fn reading_untrusted() -> bool {
    UNTRUSTED_READERS.load(std::sync::atomic::Ordering::SeqCst) > 0
}

/// Runs a third-party reader on untrusted input (a Parquet file): a panic inside it (a corrupt
/// file the library does not check) becomes an input error naming `what`.
pub(crate) fn read_untrusted<T>(
    what: &str,
    read: impl FnOnce() -> Result<T, Error>,
) -> Result<T, Error> {
    use std::sync::atomic::Ordering;
    UNTRUSTED_READERS.fetch_add(1, Ordering::SeqCst);
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(read));
    UNTRUSTED_READERS.fetch_sub(1, Ordering::SeqCst);
    result.unwrap_or_else(|payload| {
        let message = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_default();
        Err(Error::input(format!(
            "{what}: the file is corrupt (its reader failed: {message})"
        )))
    })
}

/// A YAML value as a user wrote it, for messages: `50`, `true`, `a list`, not `Number(50)`.
pub(crate) fn yaml_words(value: &serde_yaml::Value) -> String {
    use serde_yaml::Value;
    match value {
        Value::Null => "an empty value".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => format!("'{}'", s.escape_default()),
        Value::Sequence(_) => "a list".into(),
        Value::Mapping(_) => "a mapping".into(),
        Value::Tagged(t) => format!("a value tagged {}", t.tag),
    }
}

/// A text file's contents; the error names the file, what failed (`cannot read the log`) and
/// why, in plain words.
pub(crate) fn read_text(path: &std::path::Path, failure: &str) -> Result<String, Error> {
    std::fs::read_to_string(path)
        .map_err(|e| Error::input(format!("{}: {failure}: {}", path.display(), io_words(&e))))
}

/// An I/O error in words: "permission denied", not "Permission denied (os error 13)".
pub(crate) fn io_words(e: &std::io::Error) -> String {
    use std::io::ErrorKind as K;
    let words = match e.kind() {
        K::NotFound => "no such file or folder".to_string(),
        K::PermissionDenied => "permission denied".to_string(),
        K::AlreadyExists => "already exists".to_string(),
        K::NotADirectory => "a file stands where a folder is needed".to_string(),
        K::IsADirectory => "is a folder, not a file".to_string(),
        K::StorageFull => "no space left on the device".to_string(),
        K::ReadOnlyFilesystem => "the file system is read-only".to_string(),
        _ => e.to_string(),
    };
    match words.find(" (os error") {
        Some(i) => words[..i].to_string(),
        None => words,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_panicking_reader_of_untrusted_input_is_an_input_error() {
        let result: Result<(), super::Error> =
            super::read_untrusted("f.parquet", || panic!("index out of bounds"));
        let err = result.unwrap_err();
        assert!(matches!(err, super::Error::Input(_)));
        assert!(err.to_string().contains("f.parquet") && err.to_string().contains("corrupt"));
        assert!(!super::reading_untrusted());
    }
}
