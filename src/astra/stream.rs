//! Collectives in ASTRA-sim's system layer: a collective cut into chunks (streams), each a list of
//! phases (one per dimension, or reduce-scatter up / all-gather down for localBWAware), queued
//! per dimension with `active-chunks-per-dimension` running at once (`Sys::generate_collective`,
//! `proceed_to_next_vnet_baseline`, `SchedulerUnit`, `insert_stream`).

use std::collections::{BTreeMap, VecDeque};

use super::algorithm::{Algorithm, Direction, LogicalDim, RingMembers, Tree};
use super::{Implementation, Optimization, Policy, Settings, SysEvent, World};
use crate::collective::CollectiveKind;
use crate::Error;

/// One rank's system layer: its tick-batched events, ready list and per-queue streams.
pub(super) struct SysState {
    pub events: BTreeMap<u64, Vec<SysEvent>>,
    ready: VecDeque<usize>,
    /// Streams per queue, in `insert_stream` order.
    active: Vec<Vec<usize>>,
    /// Streams initialised per queue.
    running: Vec<u32>,
    /// Streams a queue runs at once (`ceil(active-chunks / queues per dimension)`).
    concurrent: u32,
    priority_counter: i64,
    next_stream_id: u64,
    /// Per dimension: its queues and the three allocators of `QueueLevelHandler`.
    levels: Vec<QueueLevel>,
    /// Per collective kind and dimension: double-binary-tree phases made so far (chunks
    /// alternate between the two trees, `DoubleBinaryTreeTopology::get_topology`).
    tree_counters: Vec<(CollectiveKind, usize, u64)>,
}

struct QueueLevel {
    queues: Vec<i32>,
    allocator: usize,
    first: usize,
    last: usize,
}

impl QueueLevel {
    fn next(&mut self) -> (i32, Direction) {
        let n = self.queues.len();
        let dir = if n > 1 && self.allocator >= n / 2 {
            Direction::Anticlockwise
        } else {
            Direction::Clockwise
        };
        let q = self.queues[self.allocator];
        self.allocator += 1;
        if self.allocator >= n {
            self.allocator = 0;
        }
        (q, dir)
    }

    fn next_first(&mut self) -> (i32, Direction) {
        let q = self.queues[self.first];
        self.first += 1;
        if self.first >= self.queues.len() / 2 {
            self.first = 0;
        }
        (q, Direction::Clockwise)
    }

    fn next_last(&mut self) -> (i32, Direction) {
        let q = self.queues[self.last];
        self.last += 1;
        if self.last >= self.queues.len() {
            self.last = self.queues.len() / 2;
        }
        (q, Direction::Anticlockwise)
    }
}

/// Queues per dimension: ASTRA-sim's `--num-queues-per-dim` default.
const QUEUES_PER_DIM: usize = 1;

impl SysState {
    /// Whether the next double-binary-tree phase of a `kind` collective on dimension `dim` runs
    /// on the tree rooted at the highest id (every other one does, the first included).
    fn next_tree(&mut self, kind: CollectiveKind, dim: usize) -> bool {
        let at = match self
            .tree_counters
            .iter()
            .position(|&(k, d, _)| k == kind && d == dim)
        {
            Some(at) => at,
            None => {
                self.tree_counters.push((kind, dim, 0));
                self.tree_counters.len() - 1
            }
        };
        let count = &mut self.tree_counters[at].2;
        *count += 1;
        (*count - 1).is_multiple_of(2)
    }

    pub fn new(settings: &Settings, physical_dims: &[u32]) -> SysState {
        let levels = (0..physical_dims.len())
            .map(|d| QueueLevel {
                queues: (0..QUEUES_PER_DIM)
                    .map(|i| (d * QUEUES_PER_DIM + i) as i32)
                    .collect(),
                allocator: 0,
                first: 0,
                last: QUEUES_PER_DIM / 2,
            })
            .collect();
        SysState {
            events: BTreeMap::new(),
            ready: VecDeque::new(),
            active: vec![Vec::new(); physical_dims.len() * QUEUES_PER_DIM],
            running: vec![0; physical_dims.len() * QUEUES_PER_DIM],
            concurrent: settings.active_chunks.div_ceil(QUEUES_PER_DIM as u32),
            priority_counter: 0,
            next_stream_id: 0,
            levels,
            tree_counters: Vec::new(),
        }
    }
}

/// One chunk of a collective on one rank (`StreamBaseline`).
pub(super) struct Stream {
    pub rank: usize,
    pub stream_id: u64,
    /// The workload node whose collective this chunk belongs to, and how many chunks it has.
    collective: usize,
    phases: VecDeque<Phase>,
    current: Option<Phase>,
    queue: i32,
    priority: i64,
    initialized: bool,
    steps_finished: u32,
    /// Counts phase changes, so an algorithm that ended its phase is not put back.
    serial: u32,
}

struct Phase {
    queue: i32,
    /// None while the algorithm runs (taken out of the stream).
    algorithm: Option<Algorithm>,
}

/// A collective's chunks on one rank, and the node told when all have finished (`DataSet`).
pub(super) struct Collective {
    pub rank: usize,
    pub node: u32,
    pub total: u32,
    pub finished: u32,
}

impl World<'_> {
    fn stream(&mut self, s: usize) -> &mut Stream {
        self.streams[s].as_mut().expect("a live stream")
    }

    /// `Sys::generate_collective`: the chunks of a `kind` collective of `size` bytes.
    pub(super) fn generate_collective(
        &mut self,
        rank: usize,
        node: u32,
        kind: CollectiveKind,
        mut size: u64,
        explicit_priority: i64,
    ) -> Result<(), Error> {
        let settings = self.settings;
        let implementations = settings.implementation(kind)?.to_vec();
        let total_nodes: u64 = self.physical_dims.iter().map(|&d| d as u64).product();
        let mut chunk = size / settings.splits as u64;
        if kind != CollectiveKind::AllGather && total_nodes > chunk {
            chunk = total_nodes;
            size = settings.splits as u64 * chunk;
        }
        // The logical topology (GeneralComplexTopology): one ring or pair of trees per dimension
        // the list names, or one ring over every NPU for the `one*` forms.
        let id = rank as u32;
        let mut dims: Vec<(LogicalDim, Implementation)> = Vec::new();
        let mut offset = 1;
        let last = implementations.len() - 1;
        for (d, &imp) in implementations.iter().enumerate() {
            if imp.whole() {
                let total = total_nodes as u32;
                dims.push((
                    LogicalDim::Ring(RingMembers::new(id % total, total, 1)),
                    imp,
                ));
                break;
            }
            let Some(&size_d) = self.physical_dims.get(d) else {
                return Err(Error::input(format!(
                    "the system file's '{}-implementation' names {} dimensions; the network has {}",
                    kind.name(),
                    implementations.len(),
                    self.physical_dims.len()
                )));
            };
            let dim = match imp {
                Implementation::DoubleBinaryTree => {
                    let start = if d == last {
                        id % offset
                    } else {
                        (id - id % (offset * size_d)) + id % offset
                    };
                    LogicalDim::Trees {
                        max: Tree::new(size_d, start, offset, true)?,
                        min: Tree::new(size_d, start, offset, false)?,
                    }
                }
                _ => LogicalDim::Ring(RingMembers::new(id, size_d, offset)),
            };
            dims.push((dim, imp));
            offset *= size_d;
        }
        let priority = {
            let sys = &mut self.sys[rank];
            match settings.policy {
                Policy::Lifo => {
                    sys.priority_counter += 1;
                    sys.priority_counter - 1
                }
                Policy::Fifo => {
                    sys.priority_counter -= 1;
                    sys.priority_counter + 1
                }
                Policy::Explicit => explicit_priority,
            }
        };
        let collective = self.collectives.len();
        self.collectives.push(Some(Collective {
            rank,
            node,
            total: 0,
            finished: 0,
        }));
        let mut count = 0;
        let mut active = true;
        while size > 0 {
            count += 1;
            let mut mapper: Vec<usize> = (0..dims.len()).collect();
            if kind == CollectiveKind::AllGather {
                mapper.reverse();
            }
            size = size.saturating_sub(chunk);
            let mut remain = chunk;
            let mut phases = VecDeque::new();
            let involved = |d: usize| dims[d].0.members() > 1;
            let mut push = |world: &mut World, k: CollectiveKind, d: usize, which: u8| {
                let level = &mut world.sys[rank].levels[d];
                let (queue, dir) = match which {
                    0 => level.next(),
                    1 => level.next_first(),
                    _ => level.next_last(),
                };
                let (dim, imp) = &dims[d];
                let use_max_tree = match dim {
                    LogicalDim::Trees { .. } => world.sys[rank].next_tree(kind, d),
                    LogicalDim::Ring(_) => false,
                };
                let algorithm = Algorithm::new(k, id, dim, remain, dir, *imp, use_max_tree)?;
                remain = algorithm.final_size();
                phases.push_back(Phase {
                    queue,
                    algorithm: Some(algorithm),
                });
                Ok::<(), Error>(())
            };
            if kind != CollectiveKind::AllReduce || settings.optimization == Optimization::Baseline
            {
                for &d in &mapper {
                    if involved(d) {
                        push(self, kind, d, 0)?;
                    }
                }
            } else {
                let last_active = (0..mapper.len())
                    .rfind(|&i| involved(mapper[i]))
                    .unwrap_or(0);
                for &d in &mapper[..last_active] {
                    if involved(d) {
                        push(self, CollectiveKind::ReduceScatter, d, 1)?;
                    }
                }
                let mut i = last_active;
                while i > 0 && !involved(mapper[i]) {
                    i -= 1;
                }
                if involved(mapper[i]) {
                    push(self, CollectiveKind::AllReduce, mapper[i], 1)?;
                }
                for &d in mapper[..i].iter().rev() {
                    if involved(d) {
                        push(self, CollectiveKind::AllGather, d, 2)?;
                    }
                }
            }
            if phases.is_empty() {
                active = false;
                break;
            }
            let stream_id = self.sys[rank].next_stream_id;
            self.sys[rank].next_stream_id += 1;
            let s = self.streams.len();
            self.streams.push(Some(Stream {
                rank,
                stream_id,
                collective,
                phases,
                current: None,
                queue: -1,
                priority,
                initialized: false,
                steps_finished: 0,
                serial: 0,
            }));
            self.insert_stream_ready(rank, s);
            self.schedule_ready(rank)?;
        }
        let data = self.collectives[collective].as_mut().expect("just made");
        if active {
            data.total = count;
        } else {
            // Nothing to move (one NPU): ASTRA-sim never finishes such a collective either.
            return Err(Error::input(format!(
                "a {} over a single NPU: ASTRA-sim's system layer has no phase to run for it",
                kind.name()
            )));
        }
        Ok(())
    }

    /// `insert_stream` into the ready list: behind initialised streams and those of at least
    /// its priority (ASTRA-sim 2.x always schedules within a dimension this way).
    fn insert_stream_ready(&mut self, rank: usize, s: usize) {
        let priority = self.stream(s).priority;
        let at = self.sys[rank]
            .ready
            .iter()
            .position(|&o| {
                let o = self.streams[o].as_ref().expect("a live stream");
                !o.initialized && o.priority < priority
            })
            .unwrap_or(self.sys[rank].ready.len());
        self.sys[rank].ready.insert(at, s);
    }

    fn insert_stream_active(&mut self, rank: usize, queue: usize, s: usize) {
        let priority = self.stream(s).priority;
        let list = &self.sys[rank].active[queue];
        let at = list
            .iter()
            .position(|&o| {
                let o = self.streams[o].as_ref().expect("a live stream");
                !o.initialized && o.priority < priority
            })
            .unwrap_or(list.len());
        self.sys[rank].active[queue].insert(at, s);
    }

    /// `Sys::schedule`: every ready stream enters its first phase (ASTRA-sim's thresholds on
    /// first-phase and running streams are 10^8).
    fn schedule_ready(&mut self, rank: usize) -> Result<(), Error> {
        let mut count = self.sys[rank].ready.len();
        while count > 0 {
            let s = *self.sys[rank].ready.front().expect("counted");
            self.proceed_to_next_phase(s)?;
            self.sys[rank].ready.pop_front();
            count -= 1;
        }
        Ok(())
    }

    /// `proceed_to_next_vnet_baseline`: the stream leaves its phase for the next, or finishes.
    pub(super) fn proceed_to_next_phase(&mut self, s: usize) -> Result<(), Error> {
        let (rank, previous, done) = {
            let stream = self.stream(s);
            stream.serial += 1;
            let previous = stream.queue;
            let current = stream.current.take();
            (stream.rank, previous, current.map(|p| p.queue))
        };
        let finished = self.stream(s).phases.is_empty();
        if finished {
            let collective = self.stream(s).collective;
            self.collective_stream_finished(collective)?;
        }
        if previous >= 0 {
            if let Some(queue) = done {
                let list = &mut self.sys[rank].active[queue as usize];
                if let Some(at) = list.iter().position(|&o| o == s) {
                    list.remove(at);
                }
            }
        }
        if finished {
            self.streams[s] = None;
            if previous >= 0 {
                self.stream_removed(rank, previous as usize)?;
            }
            return Ok(());
        }
        let queue = {
            let stream = self.stream(s);
            stream.steps_finished += 1;
            let mut phase = stream.phases.pop_front().expect("not finished");
            phase.queue = phase.queue.abs();
            stream.queue = phase.queue;
            stream.initialized = false;
            let queue = phase.queue as usize;
            stream.current = Some(phase);
            queue
        };
        self.insert_stream_active(rank, queue, s);
        if previous >= 0 {
            self.stream_removed(rank, previous as usize)?;
        }
        self.start_waiting(rank, queue)
    }

    /// `SchedulerUnit::notify_stream_removed`.
    fn stream_removed(&mut self, rank: usize, queue: usize) -> Result<(), Error> {
        self.sys[rank].running[queue] -= 1;
        self.schedule_ready(rank)?;
        self.start_waiting(rank, queue)
    }

    /// `notify_stream_added`: streams of `queue` start until the queue runs its share.
    fn start_waiting(&mut self, rank: usize, queue: usize) -> Result<(), Error> {
        loop {
            let sys = &self.sys[rank];
            let running = sys.running[queue] as usize;
            if running >= sys.active[queue].len() || sys.running[queue] >= sys.concurrent {
                return Ok(());
            }
            let s = sys.active[queue][running];
            self.sys[rank].running[queue] += 1;
            self.stream_init(s)?;
        }
    }

    fn stream_init(&mut self, s: usize) -> Result<(), Error> {
        self.stream(s).initialized = true;
        self.algorithm_init(s)
    }

    /// The stream's current algorithm, taken out to run, with the stream's phase serial.
    pub(super) fn take_algorithm(&mut self, s: usize) -> Option<(u32, Algorithm)> {
        let stream = self.streams[s].as_mut()?;
        let serial = stream.serial;
        let algorithm = stream.current.as_mut()?.algorithm.take()?;
        Some((serial, algorithm))
    }

    /// Puts a run algorithm back, unless its stream has moved on to another phase meanwhile.
    pub(super) fn put_back_algorithm(&mut self, s: usize, serial: u32, algorithm: Algorithm) {
        if let Some(stream) = self.streams[s].as_mut() {
            if stream.serial == serial {
                if let Some(phase) = stream.current.as_mut() {
                    phase.algorithm = Some(algorithm);
                }
            }
        }
    }

    /// `DataSet::notify_stream_finished`: the last chunk tells the workload.
    fn collective_stream_finished(&mut self, collective: usize) -> Result<(), Error> {
        let data = self.collectives[collective]
            .as_mut()
            .expect("a live collective");
        data.finished += 1;
        if data.finished < data.total {
            return Ok(());
        }
        let (rank, node) = (data.rank, data.node);
        self.collectives[collective] = None;
        self.workload_call(rank, super::workload::Call::Finished(node))
    }
}
