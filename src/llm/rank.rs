//! The pieces every per-rank program of a training iteration is built from: a rank's node
//! list with its one stream, collectives, and seconds as the engine's time.

use crate::collective::CollectiveKind;
use crate::units::Time;
use crate::workload::{CommGroup, Node, Task};

/// Seconds as the engine's time (picoseconds).
pub(super) fn seconds(s: f64) -> Time {
    Time::from_ps((s * 1e12).round() as u64)
}

/// Builds one rank's node list.
pub(super) struct RankBuilder {
    pub(super) nodes: Vec<Node>,
    /// Whether nodes keep their names (only the ranks a timeline shows need them: names cost
    /// memory on thousands of ranks).
    pub(super) named: bool,
    /// The last node on the rank's stream.
    pub(super) last: Option<u32>,
}

impl RankBuilder {
    /// A step's name, made only on the ranks that keep names.
    pub(super) fn label(&self, make: impl FnOnce() -> String) -> String {
        if self.named {
            make()
        } else {
            String::new()
        }
    }

    pub(super) fn add(&mut self, name: &str, task: Task, deps: Vec<u32>) -> u32 {
        let id = self.nodes.len() as u32;
        self.nodes.push(Node {
            id: id as u64,
            name: if self.named {
                name.to_string()
            } else {
                String::new()
            },
            task,
            deps,
        });
        id
    }

    /// Adds a node on the stream: after the stream's last node and `extra`.
    pub(super) fn then(&mut self, name: &str, task: Task, extra: &[u32]) -> u32 {
        let mut deps: Vec<u32> = self.last.into_iter().collect();
        deps.extend_from_slice(extra);
        let id = self.add(name, task, deps);
        self.last = Some(id);
        id
    }
}

/// A collective run once.
pub(super) fn collective(
    kind: CollectiveKind,
    bytes: u64,
    communicator: &str,
    group: CommGroup,
) -> Task {
    repeated(kind, bytes, communicator, group, 1)
}

/// A collective run `times` times in a row.
pub(super) fn repeated(
    kind: CollectiveKind,
    bytes: u64,
    communicator: &str,
    group: CommGroup,
    times: u32,
) -> Task {
    Task::Collective {
        kind,
        bytes,
        communicator: communicator.to_string(),
        group,
        times,
    }
}
