//! Communication sketches (TACCL, Shah et al., NSDI'23): what a researcher tells the synthesizer
//! about the schedule to look for, so that it searches a smaller space. collsim reads the
//! logical topology part, the links the schedule may use (for instance: only one GPU of each box
//! talks across boxes), and the chunk partitioning; the synthesizer (greedy or integer program)
//! then plans on the network those links leave, and every transfer travels a path inside it, so
//! the other links carry nothing. TACCL's switch-hyperedge policy and its symmetry hints are not
//! read.
//!
//! ```yaml
//! sketch:
//!   description: 2 x 8 A100, only GPUs 0 and 8 use their NICs
//!   drop:                      # links that carry nothing: both ways between the two node sets
//!     - {between: "1-7,9-15", and: "19-25,27-33"}
//!   keep:                      # or: only these links (both ways), every other carries nothing
//!     - {between: "0-15", and: "16,17"}
//!   chunks: 2                  # chunks per NPU unless --chunks says otherwise
//! ```

use std::collections::BTreeSet;
use std::path::Path;

use serde::Deserialize;

use crate::topology::{NodeId, Topology};
use crate::Error;

/// A sketch read from a file.
#[derive(Clone, Debug, PartialEq)]
pub struct Sketch {
    /// Where it was read from, for errors.
    pub file: String,
    pub description: Option<String>,
    /// When present, only links matching one of these rules may carry data.
    keep: Option<Vec<Between>>,
    /// Links matching one of these rules carry nothing.
    drop: Vec<Between>,
    /// Chunks per NPU, where the command line gives none.
    pub chunks: Option<u32>,
}

/// Every link, either way, between a node of one set and a node of the other.
#[derive(Clone, Debug, PartialEq)]
struct Between {
    one: BTreeSet<NodeId>,
    other: BTreeSet<NodeId>,
}

impl Between {
    fn matches(&self, a: NodeId, b: NodeId) -> bool {
        (self.one.contains(&a) && self.other.contains(&b))
            || (self.one.contains(&b) && self.other.contains(&a))
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    sketch: RawSketch,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSketch {
    description: Option<String>,
    keep: Option<Vec<RawBetween>>,
    #[serde(default)]
    drop: Vec<RawBetween>,
    chunks: Option<u32>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBetween {
    between: String,
    and: String,
}

impl Sketch {
    /// Reads a sketch file.
    pub fn load(path: &Path) -> Result<Sketch, Error> {
        let file = path.display().to_string();
        let text = crate::read_text(path, "cannot read sketch")?;
        Sketch::parse(&file, &text)
    }

    /// Parses the YAML `text` of a sketch read from `file`.
    pub fn parse(file: &str, text: &str) -> Result<Sketch, Error> {
        let raw: RawFile = crate::yaml::from_str(file, text)?;
        let raw = raw.sketch;
        let rules = |list: &[RawBetween], field: &str| -> Result<Vec<Between>, Error> {
            list.iter()
                .enumerate()
                .map(|(i, r)| {
                    Ok(Between {
                        one: node_set(file, &format!("{field}[{i}].between"), &r.between)?,
                        other: node_set(file, &format!("{field}[{i}].and"), &r.and)?,
                    })
                })
                .collect()
        };
        if raw.chunks == Some(0) {
            return Err(Error::input(format!("{file}: chunks must be at least 1")));
        }
        Ok(Sketch {
            file: file.to_string(),
            description: raw.description,
            keep: raw.keep.as_deref().map(|k| rules(k, "keep")).transpose()?,
            drop: rules(&raw.drop, "drop")?,
            chunks: raw.chunks,
        })
    }

    /// Whether the link `a -> b` may carry data.
    pub fn allows(&self, a: NodeId, b: NodeId) -> bool {
        let kept = self
            .keep
            .as_ref()
            .is_none_or(|rules| rules.iter().any(|r| r.matches(a, b)));
        kept && !self.drop.iter().any(|r| r.matches(a, b))
    }

    /// `topology` with only the links the sketch allows (node ids unchanged), or an error when
    /// they leave some NPU unable to reach another.
    pub fn restrict(&self, topology: &Topology) -> Result<Topology, Error> {
        let dropped: Vec<(NodeId, NodeId)> = topology
            .links()
            .iter()
            .filter(|l| !self.allows(l.src, l.dst))
            .map(|l| (l.src, l.dst))
            .collect();
        if dropped.len() == topology.links().len() {
            return Err(Error::input(format!(
                "{}: the sketch leaves none of {}'s links",
                self.file,
                topology.name()
            )));
        }
        let mut restricted = topology.clone();
        restricted.remove(&[], &dropped).map_err(|e| {
            Error::input(format!(
                "{}: the links the sketch leaves do not connect the NPUs of {}: {e}",
                self.file,
                topology.name()
            ))
        })?;
        Ok(restricted)
    }
}

/// A set of node ids written `0-7,16,18-25`.
fn node_set(file: &str, field: &str, text: &str) -> Result<BTreeSet<NodeId>, Error> {
    let bad = || {
        Error::input(format!(
            "{file}: {field}: '{text}' is not a list of node ids and ranges (e.g. 0-7,16)"
        ))
    };
    let mut set = BTreeSet::new();
    for item in text.split(',').map(str::trim) {
        let (a, b) = match item.split_once('-') {
            Some((a, b)) => (a.trim(), b.trim()),
            None => (item, item),
        };
        let (a, b): (NodeId, NodeId) =
            (a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?);
        if a > b || b - a > 1 << 24 {
            return Err(bad());
        }
        set.extend(a..=b);
    }
    Ok(set)
}

/// Gives every transfer of `schedule` that has no route of its own the shortest path in
/// `restricted` (the network a sketch leaves), so that the simulation on the whole topology
/// keeps it inside the sketch.
pub fn pin_routes(
    restricted: &Topology,
    schedule: &mut crate::schedule::Schedule,
) -> Result<(), Error> {
    let router = crate::topology::Router::new(restricted, restricted.active_npus())?;
    let mut routes = Vec::new();
    for t in 0..schedule.len() as crate::schedule::TransferIndex {
        if schedule.route(t).is_some() || schedule.wait(t).is_some() {
            continue;
        }
        let transfer = schedule.transfer(t);
        let (mut at, dst) = (transfer.src, transfer.dst);
        let mut route = vec![at];
        while at != dst {
            at = restricted.link(router.next_link(at, dst)).dst;
            route.push(at);
        }
        routes.push((t, route));
    }
    schedule.add_routes(&routes);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_read_both_ways_and_drop_wins() {
        let s = Sketch::parse(
            "s.yml",
            "sketch:\n  keep:\n    - {between: '0-3', and: '8'}\n  drop:\n    - {between: '2', and: '8'}\n  chunks: 2\n",
        )
        .unwrap();
        assert!(s.allows(0, 8) && s.allows(8, 3));
        assert!(!s.allows(2, 8) && !s.allows(8, 2));
        assert!(!s.allows(0, 1));
        assert_eq!(s.chunks, Some(2));
    }

    #[test]
    fn bad_sketches_name_the_field() {
        let err = Sketch::parse(
            "s.yml",
            "sketch:\n  drop:\n    - {between: 'x', and: '1'}\n",
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("s.yml") && err.contains("drop[0].between"),
            "{err}"
        );
        let err = Sketch::parse("s.yml", "sketch:\n  links: []\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("s.yml") && err.contains("links"), "{err}");
    }
}
