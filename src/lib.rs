//! collsim: a congestion-aware simulator and synthesizer for collective-communication algorithms.
//!
//! Data flows topology -> schedule -> simulation -> report. Algorithms and the synthesizer produce
//! schedules; the simulator consumes only the schedule IR and knows nothing of algorithms.

pub mod algorithms;
pub mod bound;
pub mod cli;
pub mod collective;
pub mod experiment;
pub mod flow;
pub mod forest;
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
    #[error("{path}: {source}")]
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
    pub fn input(message: impl Into<String>) -> Error {
        Error::Input(message.into())
    }

    pub fn io(path: impl std::fmt::Display, source: std::io::Error) -> Error {
        Error::Io {
            path: path.to_string(),
            source,
        }
    }
}
