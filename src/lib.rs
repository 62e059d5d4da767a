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
        if message.contains(['\n', '\r']) {
            Error::Input(message.replace('\n', "\\n").replace('\r', "\\r"))
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
