//! Baseline collective algorithms. Each is a producer of the schedule IR: it reads the topology and
//! the collective and returns a [`Schedule`] that claims that collective.

mod direct;

use crate::collective::Collective;
use crate::schedule::Schedule;
use crate::topology::Topology;
use crate::Error;

/// The algorithms collsim can generate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Algorithm {
    Ring,
    Direct,
    Rhd,
    Dbt,
    Hierarchical,
    Themis,
    Tacos,
}

impl Algorithm {
    pub const ALL: [Algorithm; 7] = [
        Algorithm::Ring,
        Algorithm::Direct,
        Algorithm::Rhd,
        Algorithm::Dbt,
        Algorithm::Hierarchical,
        Algorithm::Themis,
        Algorithm::Tacos,
    ];

    pub fn parse(text: &str) -> Result<Algorithm, Error> {
        Algorithm::ALL
            .into_iter()
            .find(|a| a.name() == text.to_ascii_lowercase())
            .ok_or_else(|| {
                Error::input(format!(
                    "unknown algorithm '{text}': expected one of ring, direct, rhd, dbt, hierarchical, \
                     themis, tacos"
                ))
            })
    }

    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Ring => "ring",
            Algorithm::Direct => "direct",
            Algorithm::Rhd => "rhd",
            Algorithm::Dbt => "dbt",
            Algorithm::Hierarchical => "hierarchical",
            Algorithm::Themis => "themis",
            Algorithm::Tacos => "tacos",
        }
    }
}

/// Generates the schedule of `algorithm` for `collective` on `topology`.
pub fn generate(
    algorithm: Algorithm,
    topology: &Topology,
    collective: &Collective,
) -> Result<Schedule, Error> {
    let _ = topology;
    let mut schedule = match algorithm {
        Algorithm::Direct => direct::generate(collective)?,
        other => {
            return Err(Error::input(format!(
                "algorithm '{}' is not available yet in this build",
                other.name()
            )))
        }
    };
    schedule.collective = Some(collective.clone());
    Ok(schedule)
}
