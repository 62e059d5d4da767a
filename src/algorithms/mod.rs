//! Baseline collective algorithms. Each is a producer of the schedule IR: it reads the topology and
//! the collective and returns a [`Schedule`] that claims that collective.

pub(crate) mod builder;
mod collectives;
mod dbt;
mod direct;
mod hierarchical;
mod rhd;
mod ring;

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

/// Generates the schedule of `algorithm` for `collective` on `topology`. The schedule claims the
/// collective (possibly cut into finer pieces than the user's chunks, which validation accounts for).
pub fn generate(
    algorithm: Algorithm,
    topology: &Topology,
    collective: &Collective,
) -> Result<Schedule, Error> {
    match algorithm {
        Algorithm::Ring => ring::generate(collective, topology.is_bidirectional()),
        Algorithm::Direct => direct::generate(collective),
        Algorithm::Rhd => rhd::generate(collective),
        Algorithm::Dbt => dbt::generate(collective),
        Algorithm::Hierarchical => hierarchical::generate(topology, collective),
        Algorithm::Themis => hierarchical::generate_ordered(
            topology,
            collective,
            hierarchical::DimensionOrder::Themis,
        ),
        // The synthesizer is a producer of its own (crate::synth), run by the experiment layer.
        Algorithm::Tacos => Err(Error::input(
            "tacos is synthesized, not generated: use `collsim synthesize` or `--algorithm tacos`",
        )),
    }
}
