//! The Chakra runtime as ASTRA-sim's workload layer runs it (astra-sim/workload `Workload`,
//! `HardwareResource`): a node is issued once every node it depends on has finished, lowest id
//! first, when its resource is free: one compute node and one communication node (collective or
//! send) at a time per rank, receives without limit. A compute node takes its duration (1 ns when
//! it records none); a rank's exposed communication is its finish time less its compute.

use std::collections::BTreeSet;

use super::{Handler, SysEvent, World};
use crate::workload::program::{Node, Task};
use crate::Error;

/// Tags of sends and receives a workload names lie below ASTRA-sim's collective tags.
const NATIVE_TAGS: u64 = 500_000_000;

/// What wakes a rank's workload.
#[derive(Clone, Copy, Debug)]
pub(super) enum Call {
    /// The start of the run (`Workload::fire`).
    Start,
    /// A node finished (compute, send, receive or a whole collective).
    Finished(u32),
}

/// One rank's progress through its nodes.
pub(super) struct Runtime<'a> {
    nodes: &'a [Node],
    parents_left: Vec<u32>,
    children: Vec<Vec<u32>>,
    /// Nodes whose dependencies have all finished and that are not yet issued, by node id.
    free: BTreeSet<(u64, u32)>,
    ongoing: usize,
    compute_busy: bool,
    comm_busy: bool,
    /// Compute issued so far (ASTRA-sim's `tics_gpu_ops`).
    pub compute_ns: u64,
    /// When the last node finished.
    pub finished: Option<u64>,
    done: Vec<bool>,
}

impl<'a> Runtime<'a> {
    pub fn new(nodes: &'a [Node]) -> Runtime<'a> {
        let mut children = vec![Vec::new(); nodes.len()];
        let mut parents_left = vec![0; nodes.len()];
        for (i, node) in nodes.iter().enumerate() {
            parents_left[i] = node.deps.len() as u32;
            for &d in &node.deps {
                children[d as usize].push(i as u32);
            }
        }
        let free = nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| n.deps.is_empty())
            .map(|(i, n)| (n.id, i as u32))
            .collect();
        Runtime {
            nodes,
            parents_left,
            children,
            free,
            ongoing: 0,
            compute_busy: false,
            comm_busy: false,
            compute_ns: 0,
            finished: None,
            done: vec![false; nodes.len()],
        }
    }

    fn available(&self, i: u32) -> bool {
        match self.nodes[i as usize].task {
            Task::Compute { .. } => !self.compute_busy,
            Task::Recv { .. } => true,
            _ => !self.comm_busy,
        }
    }

    fn occupy(&mut self, i: u32, busy: bool) {
        match self.nodes[i as usize].task {
            Task::Compute { .. } => self.compute_busy = busy,
            Task::Recv { .. } => {}
            _ => self.comm_busy = busy,
        }
    }

    fn finish_node(&mut self, i: u32) {
        self.ongoing -= 1;
        self.done[i as usize] = true;
        for &c in &self.children[i as usize] {
            self.parents_left[c as usize] -= 1;
            if self.parents_left[c as usize] == 0 {
                self.free.insert((self.nodes[c as usize].id, c));
            }
        }
    }

    /// Why a rank that never finished is stuck, for the error.
    pub fn stuck_reason(&self, nodes: &[Node]) -> String {
        let left = self.done.iter().filter(|d| !**d).count();
        match self.done.iter().position(|d| !d) {
            Some(i) => format!(
                "{left} node(s) never ran to the end, the first node {} ({}): its peer never \
                 sent or received the matching message, or a node it waits for never finished",
                nodes[i].id, nodes[i].name
            ),
            None => "every node finished but its resources were never released".into(),
        }
    }
}

impl World<'_> {
    /// `Workload::call`: a finished node frees its resource and children; free nodes issue.
    pub(super) fn workload_call(&mut self, rank: usize, call: Call) -> Result<(), Error> {
        if self.runtimes[rank].finished.is_some() {
            return Ok(());
        }
        if let Call::Finished(node) = call {
            let runtime = &mut self.runtimes[rank];
            runtime.occupy(node, false);
            runtime.finish_node(node);
        }
        self.issue_free_nodes(rank)?;
        let r = &self.runtimes[rank];
        if r.free.is_empty() && r.ongoing == 0 && !r.compute_busy && !r.comm_busy {
            self.runtimes[rank].finished = Some(self.now);
        }
        Ok(())
    }

    /// `issue_dep_free_nodes`: the free nodes as they are now, lowest id first.
    fn issue_free_nodes(&mut self, rank: usize) -> Result<(), Error> {
        let free: Vec<(u64, u32)> = self.runtimes[rank].free.iter().copied().collect();
        for key in free {
            let runtime = &self.runtimes[rank];
            if !runtime.free.contains(&key) || !runtime.available(key.1) {
                continue;
            }
            self.issue(rank, key)?;
        }
        Ok(())
    }

    fn issue(&mut self, rank: usize, (id, i): (u64, u32)) -> Result<(), Error> {
        let runtime = &mut self.runtimes[rank];
        runtime.free.remove(&(id, i));
        runtime.ongoing += 1;
        runtime.occupy(i, true);
        let nodes = runtime.nodes;
        let node = &nodes[i as usize];
        let me = rank as u32;
        match &node.task {
            Task::Compute { duration, .. } => {
                let ns = (duration.ps() / 1000).max(1);
                runtime.compute_ns += ns;
                self.register(rank, ns, SysEvent::NodeDone(i));
            }
            Task::Collective {
                kind, bytes, times, ..
            } => {
                if *times != 1 {
                    return Err(Error::input(format!(
                        "rank {rank}, node {id} ({}): a collective repeated {times} times in one \
                         node has no ASTRA-sim equivalent",
                        node.name
                    )));
                }
                if !super::runs(*kind) {
                    return Err(Error::input(format!(
                        "rank {rank}, node {id} ({}): ASTRA-sim's system layer runs all-reduce, \
                         all-gather, reduce-scatter and all-to-all, not {}",
                        node.name,
                        kind.name()
                    )));
                }
                let (kind, bytes) = (*kind, *bytes);
                self.generate_collective(rank, i, kind, bytes, 0)?;
            }
            Task::Send { peer, bytes, tag } => {
                let (peer, bytes, tag) = (*peer, *bytes, tag % NATIVE_TAGS);
                self.send(tag, me, peer, bytes, Handler::Node { rank, node: i })?;
            }
            Task::Recv { peer, bytes, tag } => {
                let (peer, bytes, tag) = (*peer, *bytes, tag % NATIVE_TAGS);
                self.recv(tag, peer, me, bytes, Handler::Node { rank, node: i });
            }
            Task::Nop => {
                // Metadata and other nodes are skipped on the spot (`skip_invalid`): their
                // children become free but wait for the next issue, as in ASTRA-sim.
                runtime.finish_node(i);
                runtime.occupy(i, false);
            }
        }
        Ok(())
    }
}
