//! The algorithms that move one phase of a chunk, as ASTRA-sim writes them
//! (astraccl/native_collectives): `Ring`, `AllToAll` (direct, a ring that changes peer every
//! packet), `HalvingDoubling` (the same packet machinery with a peer at doubling distance), and
//! `DoubleBinaryTreeAllReduce` (a state machine on one of two binary trees), with their logical
//! topologies (`RingTopology`, `BinaryTree`).

use std::collections::VecDeque;

use super::{Bundle, Handler, Implementation, World};
use crate::collective::CollectiveKind;
use crate::Error;

/// ASTRA-sim's tag base for messages of collectives (`FrontEndSendRecvType::COLLECTIVE`).
const COLLECTIVE_TAG: u64 = 500_000_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Direction {
    Clockwise,
    Anticlockwise,
}

/// One dimension of a collective's logical topology (`GeneralComplexTopology`).
#[derive(Clone, Debug)]
pub(super) enum LogicalDim {
    /// A ring of members (ring, direct and halving-doubling run on it).
    Ring(RingMembers),
    /// The two trees of a double binary tree (`DoubleBinaryTreeTopology`): the root at the
    /// highest id, and at the lowest; chunks alternate between them.
    Trees { max: Tree, min: Tree },
}

impl LogicalDim {
    pub fn members(&self) -> u32 {
        match self {
            LogicalDim::Ring(r) => r.size,
            LogicalDim::Trees { min, .. } => min.size,
        }
    }
}

/// The logical ring of one dimension (`RingTopology`): `size` members `offset` apart from
/// `base`, in ring order.
#[derive(Clone, Debug)]
pub(super) struct RingMembers {
    base: u32,
    offset: u32,
    size: u32,
}

impl RingMembers {
    /// The ring through `id` of `size` members `offset` apart.
    pub fn new(id: u32, size: u32, offset: u32) -> RingMembers {
        let index = (id % (offset * size)) / offset;
        RingMembers {
            base: id - index * offset,
            offset,
            size,
        }
    }

    fn index(&self, id: u32) -> u32 {
        (id - self.base) / self.offset
    }

    fn receiver(&self, id: u32, dir: Direction) -> u32 {
        let (n, i) = (self.size, self.index(id));
        let next = match dir {
            Direction::Clockwise => (i + 1) % n,
            Direction::Anticlockwise => (i + n - 1) % n,
        };
        self.base + next * self.offset
    }

    fn sender(&self, id: u32, dir: Direction) -> u32 {
        let flipped = match dir {
            Direction::Clockwise => Direction::Anticlockwise,
            Direction::Anticlockwise => Direction::Clockwise,
        };
        self.receiver(id, flipped)
    }
}

/// A binary tree over `size` members `stride` apart from `start` (`BinaryTree`): a complete
/// tree below the root, ids given in order of an in-order walk.
#[derive(Clone, Debug)]
pub(super) struct Tree {
    size: u32,
    /// Per member index: (parent, left child, right child) as member ids.
    links: Vec<(Option<u32>, Option<u32>, Option<u32>)>,
    start: u32,
    stride: u32,
}

impl Tree {
    /// `root_max`: the root has only a left subtree (it gets the highest id); otherwise only a
    /// right one (the lowest). ASTRA-sim builds these for power-of-two sizes only.
    pub fn new(size: u32, start: u32, stride: u32, root_max: bool) -> Result<Tree, Error> {
        if !size.is_power_of_two() {
            return Err(Error::input(format!(
                "doubleBinaryTree over {size} NPUs: ASTRA-sim's binary trees need a power of two"
            )));
        }
        // Nodes of a complete tree: (parent, left, right) by node index; node 0 is the root.
        let mut nodes: Vec<(Option<usize>, Option<usize>, Option<usize>)> =
            vec![(None, None, None)];
        fn grow(
            nodes: &mut Vec<(Option<usize>, Option<usize>, Option<usize>)>,
            parent: usize,
            depth: u32,
        ) -> usize {
            let me = nodes.len();
            nodes.push((Some(parent), None, None));
            if depth > 1 {
                let left = grow(nodes, me, depth - 1);
                let right = grow(nodes, me, depth - 1);
                nodes[me].1 = Some(left);
                nodes[me].2 = Some(right);
            }
            me
        }
        let depth = 1 + size.ilog2();
        if depth > 1 {
            let sub = grow(&mut nodes, 0, depth - 1);
            if root_max {
                nodes[0].1 = Some(sub);
            } else {
                nodes[0].2 = Some(sub);
            }
        }
        // In-order walk: ids start, start + stride, ...
        let mut id_of = vec![0u32; nodes.len()];
        let mut next = start;
        let mut stack = Vec::new();
        let mut at = Some(0usize);
        while at.is_some() || !stack.is_empty() {
            while let Some(n) = at {
                stack.push(n);
                at = nodes[n].1;
            }
            let n = stack.pop().expect("not empty");
            id_of[n] = next;
            next += stride;
            at = nodes[n].2;
        }
        let mut links = vec![(None, None, None); size as usize];
        for (n, &(p, l, r)) in nodes.iter().enumerate() {
            let index = ((id_of[n] - start) / stride) as usize;
            links[index] = (
                p.map(|p| id_of[p]),
                l.map(|l| id_of[l]),
                r.map(|r| id_of[r]),
            );
        }
        Ok(Tree {
            size,
            links,
            start,
            stride,
        })
    }

    fn of(&self, id: u32) -> (Option<u32>, Option<u32>, Option<u32>) {
        self.links[((id - self.start) / self.stride) as usize]
    }
}

/// One phase's algorithm on one rank.
pub(super) enum Algorithm {
    Ring(Ring),
    Tree(TreeAllReduce),
}

impl Algorithm {
    /// The algorithm `implementation` names for a `kind` phase of `size` bytes on `dim`.
    pub fn new(
        kind: CollectiveKind,
        id: u32,
        dim: &LogicalDim,
        size: u64,
        direction: Direction,
        implementation: Implementation,
        use_max_tree: bool,
    ) -> Result<Algorithm, Error> {
        Ok(match dim {
            LogicalDim::Ring(members) => Algorithm::Ring(Ring::new(
                kind,
                id,
                members.clone(),
                size,
                direction,
                implementation,
            )?),
            LogicalDim::Trees { max, min } => {
                let tree = if use_max_tree { max } else { min };
                Algorithm::Tree(TreeAllReduce::new(id, tree, size))
            }
        })
    }

    /// The bytes the phase leaves each rank for the next phase.
    pub fn final_size(&self) -> u64 {
        match self {
            Algorithm::Ring(r) => r.final_size,
            Algorithm::Tree(t) => t.size,
        }
    }
}

/// How `HalvingDoubling` moves its peer after each packet.
struct Halving {
    rank_offset: i64,
    multiplier: f64,
    index: i64,
}

/// ASTRA-sim's `Ring`; `AllToAll` (direct) and `HalvingDoubling` as the variations they are.
pub(super) struct Ring {
    kind: CollectiveKind,
    direct: bool,
    halving: Option<Halving>,
    id: u32,
    members: RingMembers,
    direction: Direction,
    nodes: u32,
    receiver: u32,
    sender: u32,
    parallel_reduce: u32,
    stream_count: u32,
    remained_per_message: u32,
    remained_per_max_count: u32,
    msg_size: u64,
    final_size: u64,
    /// (source, destination, bytes) of the packets not yet sent.
    packets: VecDeque<(u32, u32, u64)>,
    free_packets: u32,
    zero_latency: u32,
    non_zero_latency: u32,
    toggle: bool,
    total_received: u32,
    processed: bool,
    middle_point: u32,
}

/// What an algorithm step asks of the world.
enum Step {
    Nothing,
    /// Release the locked packets as a bundle of `size` bytes.
    Release {
        processed: bool,
        size: u64,
    },
}

impl Ring {
    fn new(
        kind: CollectiveKind,
        id: u32,
        members: RingMembers,
        size: u64,
        direction: Direction,
        implementation: Implementation,
    ) -> Result<Ring, Error> {
        let nodes = members.size;
        let log2 = (nodes as f64).log2();
        let mut stream_count = match kind {
            CollectiveKind::AllReduce => 2 * (nodes - 1),
            CollectiveKind::AllToAll => (nodes - 1) * nodes / 2,
            _ => nodes - 1,
        };
        let mut msg_size = match kind {
            CollectiveKind::AllGather => size,
            _ => size / nodes as u64,
        };
        let final_size = match kind {
            CollectiveKind::AllGather => size * nodes as u64,
            CollectiveKind::ReduceScatter => size / nodes as u64,
            _ => size,
        };
        let mut parallel_reduce = 1;
        let mut direct = false;
        let mut halving = None;
        let mut receiver = members.receiver(id, direction);
        let mut sender = members.sender(id, direction);
        match implementation {
            Implementation::Ring { .. } => {}
            Implementation::Direct { window, .. } => {
                direct = true;
                parallel_reduce = window.map_or(nodes - 1, |w| w.min(nodes - 1));
                if kind == CollectiveKind::AllToAll {
                    stream_count = nodes - 1;
                }
            }
            Implementation::HalvingDoubling { .. } => {
                let (rank_offset, multiplier) = match kind {
                    CollectiveKind::AllReduce => {
                        stream_count = (2.0 * log2) as u32;
                        msg_size = size / 2;
                        (1, 2.0)
                    }
                    CollectiveKind::ReduceScatter => {
                        stream_count = log2 as u32;
                        msg_size = size / 2;
                        (1, 2.0)
                    }
                    CollectiveKind::AllGather => {
                        stream_count = log2 as u32;
                        msg_size = size;
                        (nodes as i64 / 2, 0.5)
                    }
                    _ => {
                        return Err(Error::input(format!(
                            "halvingDoubling runs all-reduce, reduce-scatter and all-gather in \
                             ASTRA-sim, not {kind}"
                        )))
                    }
                };
                let h = Halving {
                    rank_offset,
                    multiplier,
                    index: members.index(id) as i64,
                };
                (receiver, sender) = h.peer(id, &members);
                halving = Some(h);
            }
            Implementation::DoubleBinaryTree => {
                return Err(Error::Internal(
                    "a double binary tree was asked for on a ring".into(),
                ))
            }
        }
        Ok(Ring {
            kind,
            direct,
            halving,
            id,
            receiver,
            sender,
            members,
            direction,
            nodes,
            parallel_reduce,
            stream_count,
            remained_per_message: 1,
            remained_per_max_count: 1,
            msg_size,
            final_size,
            packets: VecDeque::new(),
            free_packets: 0,
            zero_latency: 0,
            non_zero_latency: 0,
            toggle: false,
            total_received: 0,
            processed: false,
            middle_point: nodes - 1,
        })
    }

    fn non_zero_latency_packets(&self) -> u32 {
        if self.halving.is_some() {
            ((self.nodes as f64).log2() - self.parallel_reduce as f64) as u32
        } else if self.direct {
            // Every dimension is "NA" (not local) in ASTRA-sim 2.x's logical topologies.
            self.parallel_reduce
        } else {
            (self.nodes - 1) * self.parallel_reduce
        }
    }

    /// `insert_packet`: the next packet, and whether the locked ones go out as a bundle.
    fn insert_packet(&mut self) -> Result<Step, Error> {
        if self.zero_latency == 0 && self.non_zero_latency == 0 {
            self.zero_latency = self.parallel_reduce;
            self.non_zero_latency = self.non_zero_latency_packets();
            self.toggle = !self.toggle;
        }
        if self.zero_latency > 0 {
            self.packets
                .push_back((self.sender, self.receiver, self.msg_size));
            self.processed = false;
            let step = self.process_max_count();
            self.zero_latency -= 1;
            return Ok(step);
        }
        if self.non_zero_latency > 0 {
            self.packets
                .push_back((self.sender, self.receiver, self.msg_size));
            self.processed = self.kind == CollectiveKind::ReduceScatter
                || (self.kind == CollectiveKind::AllReduce && self.toggle);
            let step = self.process_max_count();
            self.non_zero_latency -= 1;
            return Ok(step);
        }
        Err(Error::Internal(
            "ASTRA-sim ring: a packet was asked for with none left to inject".into(),
        ))
    }

    fn process_max_count(&mut self) -> Step {
        if self.remained_per_max_count > 0 {
            self.remained_per_max_count -= 1;
        }
        if self.remained_per_max_count != 0 {
            return Step::Nothing;
        }
        self.remained_per_max_count = 1;
        let step = Step::Release {
            processed: self.processed,
            size: self.msg_size,
        };
        if let Some(h) = &mut self.halving {
            h.rank_offset = (h.rank_offset as f64 * h.multiplier) as i64;
            self.msg_size = (self.msg_size as f64 / h.multiplier) as u64;
            if h.rank_offset == self.nodes as i64 && self.kind == CollectiveKind::AllReduce {
                h.multiplier = 0.5;
                h.rank_offset = (h.rank_offset as f64 * h.multiplier) as i64;
                self.msg_size = (self.msg_size as f64 / h.multiplier) as u64;
            }
            (self.receiver, self.sender) = h.peer(self.id, &self.members);
        } else if self.direct {
            self.receiver = self.members.receiver(self.receiver, self.direction);
            if self.receiver == self.id {
                self.receiver = self.members.receiver(self.receiver, self.direction);
            }
            self.sender = self.members.sender(self.sender, self.direction);
            if self.sender == self.id {
                self.sender = self.members.sender(self.sender, self.direction);
            }
        }
        step
    }

    fn process_stream_count(&mut self) {
        if self.remained_per_message > 0 {
            self.remained_per_message -= 1;
        }
        if self.remained_per_message == 0 && self.stream_count > 0 {
            self.stream_count -= 1;
            if self.stream_count > 0 {
                self.remained_per_message = 1;
            }
        }
    }
}

impl Halving {
    /// The peer `rank_offset` away, clockwise or back by the parity of `index / rank_offset`
    /// (`specify_direction`): it is both receiver and sender.
    fn peer(&self, id: u32, members: &RingMembers) -> (u32, u32) {
        let dir = if self.rank_offset == 0 || (self.index / self.rank_offset) % 2 == 0 {
            Direction::Clockwise
        } else {
            Direction::Anticlockwise
        };
        let mut at = id;
        for _ in 0..self.rank_offset {
            at = members.receiver(at, dir);
        }
        (at, at)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TreeState {
    Begin,
    WaitingForTwoChildData,
    WaitingForOneChildData,
    SendingDataToParent,
    WaitingDataFromParent,
    SendingDataToChilds,
    End,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TreeRole {
    Root,
    Intermediate,
    Leaf,
}

/// ASTRA-sim's `DoubleBinaryTreeAllReduce`: reduce up one tree, broadcast back down.
pub(super) struct TreeAllReduce {
    size: u64,
    state: TreeState,
    role: TreeRole,
    parent: Option<u32>,
    left: Option<u32>,
    right: Option<u32>,
    reductions: u32,
}

impl TreeAllReduce {
    fn new(id: u32, tree: &Tree, size: u64) -> TreeAllReduce {
        let (parent, left, right) = tree.of(id);
        let role = match (parent, left, right) {
            (None, _, _) => TreeRole::Root,
            (_, None, None) => TreeRole::Leaf,
            _ => TreeRole::Intermediate,
        };
        TreeAllReduce {
            size,
            state: TreeState::Begin,
            role,
            parent,
            left,
            right,
            reductions: 0,
        }
    }
}

/// What woke an algorithm.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Wake {
    Init,
    General,
    Received,
}

impl World<'_> {
    /// `StreamBaseline::init`: the phase's algorithm starts.
    pub(super) fn algorithm_init(&mut self, s: usize) -> Result<(), Error> {
        self.with_algorithm(s, Wake::Init)
    }

    /// `StreamBaseline::call(General)`: a bundle came back.
    pub(super) fn stream_general(&mut self, s: usize) -> Result<(), Error> {
        self.with_algorithm(s, Wake::General)
    }

    /// `StreamBaseline::consume`: a packet arrived.
    pub(super) fn stream_received(&mut self, s: usize) -> Result<(), Error> {
        self.with_algorithm(s, Wake::Received)
    }

    /// Runs the stream's current algorithm; when it ends its phase (`exit`) the stream moves on.
    fn with_algorithm(&mut self, s: usize, wake: Wake) -> Result<(), Error> {
        let Some((serial, mut algorithm)) = self.take_algorithm(s) else {
            return Ok(());
        };
        let exit = match &mut algorithm {
            Algorithm::Ring(ring) => self.ring_run(s, ring, wake)?,
            Algorithm::Tree(tree) => self.tree_run(s, tree, wake)?,
        };
        if exit {
            return self.proceed_to_next_phase(s);
        }
        self.put_back_algorithm(s, serial, algorithm);
        Ok(())
    }

    fn ring_run(&mut self, s: usize, ring: &mut Ring, wake: Wake) -> Result<bool, Error> {
        match wake {
            Wake::Init => {
                for _ in 0..ring.parallel_reduce {
                    let step = ring.insert_packet()?;
                    self.step(s, step);
                }
                Ok(false)
            }
            Wake::Received => {
                ring.total_received += 1;
                let step = ring.insert_packet()?;
                self.step(s, step);
                Ok(false)
            }
            Wake::General => {
                ring.free_packets += 1;
                if ring.direct
                    && ring.kind == CollectiveKind::AllReduce
                    && ring.stream_count <= ring.middle_point
                {
                    if ring.total_received < ring.middle_point {
                        return Ok(false);
                    }
                    for _ in 0..ring.parallel_reduce {
                        self.ring_ready(s, ring)?;
                    }
                } else {
                    self.ring_ready(s, ring)?;
                }
                Ok(ring.stream_count == 0 && ring.free_packets == ring.parallel_reduce)
            }
        }
    }

    fn step(&mut self, s: usize, step: Step) {
        if let Step::Release { processed, size } = step {
            self.bundle(s, processed, size);
        }
    }

    fn bundle(&mut self, s: usize, needs_processing: bool, size: u64) {
        let rank = self.streams[s].as_ref().expect("a live stream").rank;
        self.release_bundle(
            rank,
            Bundle {
                stream: s,
                needs_processing,
                size,
            },
        );
    }

    fn tags(&self, s: usize) -> (u64, u32) {
        let stream = self.streams[s].as_ref().expect("a live stream");
        (
            COLLECTIVE_TAG + stream.stream_id % COLLECTIVE_TAG,
            stream.rank as u32,
        )
    }

    /// `Ring::ready`: sends the front packet and posts its receive.
    fn ring_ready(&mut self, s: usize, ring: &mut Ring) -> Result<(), Error> {
        if ring.packets.is_empty() || ring.stream_count == 0 || ring.free_packets == 0 {
            return Ok(());
        }
        let (src, dst, size) = *ring.packets.front().expect("not empty");
        let (tag, id) = self.tags(s);
        self.send(tag, id, dst, size, Handler::Nobody)?;
        self.recv(tag, src, id, size, Handler::Stream(s));
        ring.process_stream_count();
        ring.packets.pop_front();
        ring.free_packets -= 1;
        Ok(())
    }

    /// `DoubleBinaryTreeAllReduce::run`, its branches in ASTRA-sim's order.
    fn tree_run(&mut self, s: usize, t: &mut TreeAllReduce, wake: Wake) -> Result<bool, Error> {
        use TreeRole::*;
        use TreeState::*;
        let (tag, _) = self.tags(s);
        let id = self.tags(s).1;
        let size = t.size;
        let received = wake == Wake::Received;
        let only_child = t.left.or(t.right);
        match (t.state, t.role) {
            (Begin, Leaf) => {
                self.bundle(s, false, size);
                t.state = SendingDataToParent;
            }
            (SendingDataToParent, Leaf) => {
                let parent = t.parent.expect("a leaf has a parent");
                self.send(tag, id, parent, size, Handler::Nobody)?;
                self.recv(tag, parent, id, size, Handler::Stream(s));
                t.state = WaitingDataFromParent;
            }
            (WaitingDataFromParent, Leaf) => {
                self.bundle(s, false, size);
                t.state = End;
            }
            (End, Leaf) => return Ok(true),
            (Begin, Intermediate) => {
                t.state = WaitingForTwoChildData;
                let (l, r) = (
                    t.left.expect("two children"),
                    t.right.expect("two children"),
                );
                self.recv(tag, l, id, size, Handler::Stream(s));
                self.recv(tag, r, id, size, Handler::Stream(s));
            }
            (WaitingForTwoChildData, Intermediate) if received => {
                self.bundle(s, true, size);
                t.state = WaitingForOneChildData;
            }
            (WaitingForOneChildData, Intermediate) if received => {
                self.bundle(s, true, size);
                t.state = SendingDataToParent;
            }
            (_, Intermediate) if t.reductions < 1 && wake == Wake::General => t.reductions += 1,
            (SendingDataToParent, Intermediate) => {
                t.state = WaitingDataFromParent;
                let parent = t.parent.expect("an intermediate node has a parent");
                self.send(tag, id, parent, size, Handler::Nobody)?;
                self.recv(tag, parent, id, size, Handler::Stream(s));
            }
            (WaitingDataFromParent, Intermediate) if received => {
                self.bundle(s, true, size);
                t.state = SendingDataToChilds;
            }
            (SendingDataToChilds, Intermediate) => {
                let (l, r) = (
                    t.left.expect("two children"),
                    t.right.expect("two children"),
                );
                self.send(tag, id, l, size, Handler::Nobody)?;
                self.send(tag, id, r, size, Handler::Nobody)?;
                return Ok(true);
            }
            (Begin, Root) => {
                t.state = WaitingForOneChildData;
                let child = only_child.expect("the root has a child");
                self.recv(tag, child, id, size, Handler::Stream(s));
            }
            (WaitingForOneChildData, Root) => {
                self.bundle(s, true, size);
                t.state = SendingDataToChilds;
            }
            (SendingDataToChilds, Root) => {
                let child = only_child.expect("the root has a child");
                self.send(tag, id, child, size, Handler::Nobody)?;
                return Ok(true);
            }
            _ => {}
        }
        Ok(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trees_number_their_nodes_in_order_with_the_root_at_either_end() {
        // 8 members: below the root a complete tree of 7, walked in order.
        let max = Tree::new(8, 0, 1, true).unwrap();
        assert_eq!(max.of(7), (None, Some(3), None));
        assert_eq!(max.of(3), (Some(7), Some(1), Some(5)));
        assert_eq!(max.of(0), (Some(1), None, None));
        let min = Tree::new(8, 0, 1, false).unwrap();
        assert_eq!(min.of(0), (None, None, Some(4)));
        assert_eq!(min.of(4), (Some(0), Some(2), Some(6)));
        assert_eq!(min.of(7), (Some(6), None, None));
        // A stride: the second dimension of a 4 x 2 network, members 1 and 5 of rank 1's tree.
        let strided = Tree::new(2, 1, 4, false).unwrap();
        assert_eq!(strided.of(1), (None, None, Some(5)));
        assert!(Tree::new(6, 0, 1, true).is_err());
    }
}
