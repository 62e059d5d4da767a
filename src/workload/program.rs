//! Per-rank programs and their execution on the event engine: the one model behind `collsim
//! train`, whether the iteration comes from a workload file (every rank running the same
//! program) or from Chakra execution traces (one program per rank).
//!
//! A rank's program is a DAG of nodes: compute (a wait of its duration on the rank's NPU),
//! collectives on a communicator, point-to-point sends and receives, and no-ops. Compute runs one
//! node at a time per rank, in the order the nodes become ready. The `k`-th collective of a
//! communicator on each of its members is one collective: it starts once every member has reached
//! it (its dependencies done on every member) and runs the chosen algorithm's schedule on the
//! members; the `k`-th send from rank `a` to `b` with a tag is the `k`-th receive at `b` from `a`
//! with that tag, one message that leaves once the send's dependencies are done. Collectives that
//! overlap share the network.

use std::collections::BTreeSet;

use super::CommGroup;
use crate::collective::CollectiveKind;
use crate::topology::NodeId;
use crate::units::Time;
use crate::Error;

/// What a node does.
#[derive(Clone, Debug, PartialEq)]
pub enum Task {
    /// Compute of `duration`; `forward` sorts it into the breakdown's forward or backward compute.
    Compute {
        duration: Time,
        forward: bool,
    },
    /// A collective among the ranks whose programs name `communicator`, run `times` times in a
    /// row (each after the one before); `group` is the kind of group its exposure is charged to.
    Collective {
        kind: CollectiveKind,
        bytes: u64,
        communicator: String,
        group: CommGroup,
        times: u32,
    },
    Send {
        peer: u32,
        bytes: u64,
        tag: u64,
    },
    Recv {
        peer: u32,
        bytes: u64,
        tag: u64,
    },
    /// Takes no time (memory and metadata nodes, and nodes of unknown types).
    Nop,
}

impl Task {
    pub(super) fn is_communication(&self) -> bool {
        matches!(
            self,
            Task::Collective { .. } | Task::Send { .. } | Task::Recv { .. }
        )
    }

    /// The group kind this communication's exposure is charged to (messages: `pipeline`).
    pub(super) fn group_name(&self) -> &'static str {
        match self {
            Task::Collective { group, .. } => group.name(),
            _ => "pipeline",
        }
    }

    /// The column this communication's exposure is charged to in `ranks.csv`.
    pub(super) fn kind_name(&self) -> &'static str {
        match self {
            Task::Collective { kind, .. } => kind.name(),
            Task::Send { .. } | Task::Recv { .. } => "send-recv",
            _ => "none",
        }
    }
}

/// One node of a rank's program.
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    /// The node's id in its trace (reported in errors).
    pub id: u64,
    pub name: String,
    pub task: Task,
    /// Positions in the rank's node list of the nodes this one waits for.
    pub deps: Vec<u32>,
}

/// What every rank runs: rank `r` runs `ranks[r]` on NPU `npus[r]`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Program {
    pub name: String,
    pub ranks: Vec<Vec<Node>>,
    /// Communicators whose collectives follow one another on every member (each waits for the
    /// previous one to end), as the program's maker promises. One whose links no other
    /// communication uses runs each collective in the time it takes alone on an idle network,
    /// computed once per size instead of simulated transfer by transfer: exact, since nothing
    /// else can be on those links and a collective starts on every member at once.
    pub serial_communicators: BTreeSet<String>,
}

impl Program {
    /// Refuses a placement that gives the ranks more or fewer NPUs than there are ranks.
    pub fn check_placement(&self, npus: &[NodeId]) -> Result<(), Error> {
        if npus.len() != self.ranks.len() {
            return Err(Error::input(format!(
                "{}: {} ranks on {} NPUs",
                self.name,
                self.ranks.len(),
                npus.len()
            )));
        }
        Ok(())
    }
}
