//! Import: any MSCCL XML file in the export's layout as a schedule, checked as it is read.

use std::collections::HashMap;
use std::path::Path;

use quick_xml::events::attributes::Attribute;
use quick_xml::events::{BytesStart, Event};
use quick_xml::Reader;

use super::layout::{coll_name, Buffer, Layout, ORDER_ATTRIBUTE};
use crate::collective::{Collective, CollectiveKind};
use crate::schedule::{Op, Schedule, Transfer, TransferIndex};
use crate::Error;

/// A step as read from a file.
#[derive(Clone, Debug)]
struct ReadStep {
    kind: String,
    order: Option<u64>,
    /// The source buffer and offset as written (checked against the buffer's chunks).
    src: Option<(Buffer, i64)>,
    dst: (Buffer, u32),
    raw_dstoff: i64,
    count: u32,
    /// (depid, deps) as written; `dep` once checked.
    raw_dep: (i64, i64),
    dep: Option<(usize, usize)>,
}

struct ReadBlock {
    send: i64,
    recv: i64,
    chan: i64,
    steps: Vec<ReadStep>,
}

fn attributes(file: &str, e: &BytesStart) -> Result<HashMap<String, String>, Error> {
    e.attributes()
        .map(|a| {
            let a: Attribute = a.map_err(|err| Error::input(format!("{file}: {err}")))?;
            let key = String::from_utf8_lossy(a.key.as_ref()).into_owned();
            let value = a
                .unescape_value()
                .map_err(|err| Error::input(format!("{file}: {err}")))?
                .into_owned();
            Ok((key, value))
        })
        .collect()
}

fn field<T: std::str::FromStr>(
    file: &str,
    element: &str,
    attrs: &HashMap<String, String>,
    key: &str,
) -> Result<T, Error> {
    let text = attrs.get(key).ok_or_else(|| {
        Error::input(format!(
            "{file}: <{element}> lacks the mandatory attribute '{key}'"
        ))
    })?;
    text.trim().parse().map_err(|_| {
        Error::input(format!(
            "{file}: <{element}> attribute {key}='{text}' is not valid"
        ))
    })
}

/// What an MSCCL algorithm's `<algo>` element states: its collective, GPUs and chunks per loop.
/// Every version of the format the executors read names these (and `name`, `nchannels`);
/// `proto`, `inplace`, `outofplace`, `minBytes` and `maxBytes` came and went between versions
/// (msccl-tools' early files carry only `inplace`), and collsim's model needs none of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Claim {
    pub kind: CollectiveKind,
    pub ngpus: u32,
    pub chunks_per_loop: u32,
}

impl Claim {
    fn of(file: &str, algo: &HashMap<String, String>) -> Result<Claim, Error> {
        for key in ["name", "nchannels"] {
            field::<String>(file, "algo", algo, key)?;
        }
        let coll: String = field(file, "algo", algo, "coll")?;
        let kind = [
            CollectiveKind::AllGather,
            CollectiveKind::ReduceScatter,
            CollectiveKind::AllReduce,
            CollectiveKind::Broadcast,
            CollectiveKind::Reduce,
            CollectiveKind::AllToAll,
        ]
        .into_iter()
        .find(|&k| coll_name(k) == Some(coll.as_str()))
        .ok_or_else(|| {
            Error::input(format!(
                "{file}: coll='{coll}' is not a collective collsim imports (allgather, \
                 reducescatter, allreduce, broadcast, reduce, alltoall)"
            ))
        })?;
        let ngpus: u32 = field(file, "algo", algo, "ngpus")?;
        let chunks_per_loop: u32 = field(file, "algo", algo, "nchunksperloop")?;
        if ngpus == 0 || chunks_per_loop == 0 {
            return Err(Error::input(format!(
                "{file}: ngpus={ngpus} nchunksperloop={chunks_per_loop}: both must be at least 1"
            )));
        }
        Ok(Claim {
            kind,
            ngpus,
            chunks_per_loop,
        })
    }

    /// Chunks per NPU (`--chunks`) of the collective the file states: each GPU's share of a loop
    /// for the collectives whose buffer holds every GPU's pieces, the loop itself for rooted ones.
    pub fn chunks(&self, file: &str) -> Result<u32, Error> {
        let per_gpu = match self.kind {
            CollectiveKind::Broadcast | CollectiveKind::Reduce => 1,
            _ => self.ngpus,
        };
        if !self.chunks_per_loop.is_multiple_of(per_gpu) {
            return Err(Error::input(format!(
                "{file}: nchunksperloop={} does not divide among ngpus={} GPUs",
                self.chunks_per_loop, self.ngpus
            )));
        }
        Ok(self.chunks_per_loop / per_gpu)
    }
}

/// Reads what the `<algo>` element of the MSCCL algorithm at `path` states, so a command can
/// take the collective and its chunking from the file.
pub fn read_msccl_claim(path: &Path) -> Result<Claim, Error> {
    let file = path.display().to_string();
    let text = crate::read_text(path, "cannot open schedule")?;
    let mut reader = Reader::from_str(&text);
    loop {
        match reader
            .read_event()
            .map_err(|e| Error::input(format!("{file}: malformed XML: {e}")))?
        {
            Event::Eof => return Err(Error::input(format!("{file}: no <algo> element"))),
            Event::Start(e) | Event::Empty(e) if e.name().as_ref() == b"algo" => {
                return Claim::of(&file, &attributes(&file, &e)?)
            }
            _ => {}
        }
    }
}

/// Reads an MSCCL XML algorithm implementing `c` (its size and chunking come from the command
/// line; the file gives chunks, not bytes) as a schedule claiming `c`.
pub fn load_msccl(path: &Path, c: &Collective) -> Result<Schedule, Error> {
    parse_msccl(
        &path.display().to_string(),
        &crate::read_text(path, "cannot open schedule")?,
        c,
    )
}

/// Parses MSCCL XML `text` (named `file` in errors); see [`load_msccl`].
pub fn parse_msccl(file: &str, text: &str, c: &Collective) -> Result<Schedule, Error> {
    let mut reader = Reader::from_str(text);
    reader.config_mut().trim_text(true);
    let mut algo: Option<HashMap<String, String>> = None;
    let mut gpus: Vec<(u32, Vec<ReadBlock>)> = Vec::new();
    loop {
        let event = reader
            .read_event()
            .map_err(|e| Error::input(format!("{file}: malformed XML: {e}")))?;
        match event {
            Event::Eof => break,
            Event::Start(e) | Event::Empty(e) => {
                let attrs = attributes(file, &e)?;
                match e.name().as_ref() {
                    b"algo" => algo = Some(attrs),
                    b"gpu" => gpus.push((field(file, "gpu", &attrs, "id")?, Vec::new())),
                    b"tb" => {
                        let gpu = gpus
                            .last_mut()
                            .ok_or_else(|| Error::input(format!("{file}: <tb> outside a <gpu>")))?;
                        gpu.1.push(ReadBlock {
                            send: field(file, "tb", &attrs, "send")?,
                            recv: field(file, "tb", &attrs, "recv")?,
                            chan: field(file, "tb", &attrs, "chan")?,
                            steps: Vec::new(),
                        });
                    }
                    b"step" => {
                        let tb = gpus
                            .last_mut()
                            .and_then(|g| g.1.last_mut())
                            .ok_or_else(|| {
                                Error::input(format!("{file}: <step> outside a <tb>"))
                            })?;
                        let depid: i64 = field(file, "step", &attrs, "depid")?;
                        let deps: i64 = field(file, "step", &attrs, "deps")?;
                        let dstbuf: String = field(file, "step", &attrs, "dstbuf")?;
                        let dst = Buffer::parse(&dstbuf).ok_or_else(|| {
                            Error::input(format!("{file}: unknown buffer '{dstbuf}'"))
                        })?;
                        let dstoff: i64 = field(file, "step", &attrs, "dstoff")?;
                        let src = match attrs.get("srcbuf").and_then(|b| Buffer::parse(b)) {
                            Some(b) => Some((b, field(file, "step", &attrs, "srcoff")?)),
                            None => None,
                        };
                        tb.steps.push(ReadStep {
                            order: attrs.get(ORDER_ATTRIBUTE).and_then(|v| v.parse().ok()),
                            kind: field(file, "step", &attrs, "type")?,
                            src,
                            dst: (dst, dstoff.clamp(0, u32::MAX as i64) as u32),
                            raw_dstoff: dstoff,
                            count: field(file, "step", &attrs, "cnt")?,
                            raw_dep: (depid, deps),
                            dep: None,
                        });
                    }
                    _ => {}
                }
            }
            _ => {}
        }
    }
    let algo = algo.ok_or_else(|| Error::input(format!("{file}: no <algo> element")))?;
    let claim = Claim::of(file, &algo)?;
    if claim.kind != c.kind {
        return Err(Error::input(format!(
            "{file}: the algorithm is a '{}', but --collective says {}",
            coll_name(claim.kind).unwrap_or_default(),
            c.kind
        )));
    }
    let ngpus = claim.ngpus;
    if ngpus != c.ranks() || gpus.len() as u32 != ngpus {
        return Err(Error::input(format!(
            "{file}: ngpus={ngpus} with {} <gpu> elements, but the collective has {} NPUs",
            gpus.len(),
            c.ranks()
        )));
    }
    // A file may cut the buffer finer than --chunks (e.g. a bidirectional ring halves each
    // chunk): the schedule then claims the same collective with that finer chunking.
    let per_loop = claim.chunks_per_loop;
    let (i_chunks, o_chunks) = Layout { c }.chunks();
    let expected = i_chunks.max(o_chunks);
    if per_loop == 0 || !per_loop.is_multiple_of(expected) {
        return Err(Error::input(format!(
            "{file}: nchunksperloop={per_loop}, but {} with --chunks {} has {expected} chunks per \
             loop (or a multiple)",
            c.kind, c.chunks
        )));
    }
    let c = &Collective {
        chunks: c.chunks * (per_loop / expected),
        ..c.clone()
    };
    let layout = Layout { c };
    gpus.sort_by_key(|g| g.0);
    check_indices(file, c, &layout, &mut gpus)?;
    build_schedule(file, c, &layout, &gpus)
}

/// Checks every index and offset of the file against its declared sizes: GPU ids, the peers of
/// thread blocks, step dependencies, and buffer offsets; fills in each step's checked `dep`.
fn check_indices(
    file: &str,
    c: &Collective,
    layout: &Layout,
    gpus: &mut [(u32, Vec<ReadBlock>)],
) -> Result<(), Error> {
    let n = c.ranks();
    if let Some((id, _)) = gpus.iter().find(|(id, _)| *id >= n) {
        return Err(Error::input(format!(
            "{file}: <gpu> id {id} is outside 0..{} (ngpus={n})",
            n - 1
        )));
    }
    // Sorted, in range and as many as ngpus: a repeat is the only way to miss an id.
    if let Some(w) = gpus.windows(2).find(|w| w[0].0 == w[1].0) {
        return Err(Error::input(format!(
            "{file}: <gpu> id {} appears twice",
            w[0].0
        )));
    }
    let (i_chunks, o_chunks) = layout.chunks();
    let size_of = |b: Buffer| match b {
        Buffer::Input => Some(i_chunks as i64),
        Buffer::Output => Some(o_chunks as i64),
        _ => None,
    };
    for (gpu, blocks) in gpus.iter_mut() {
        let gpu = *gpu;
        let block_steps: Vec<usize> = blocks.iter().map(|b| b.steps.len()).collect();
        for (b, tb) in blocks.iter_mut().enumerate() {
            for (peer, what) in [(tb.send, "send"), (tb.recv, "recv")] {
                if peer != -1 && (peer < 0 || peer >= n as i64 || peer == gpu as i64) {
                    return Err(Error::input(format!(
                        "{file}: GPU {gpu} thread block {b}: {what}={peer} names no other GPU \
                         (-1 or 0..{} but {gpu})",
                        n - 1
                    )));
                }
            }
            for (s, step) in tb.steps.iter_mut().enumerate() {
                let at = format!("{file}: GPU {gpu} thread block {b} step {s}");
                let (depid, deps) = step.raw_dep;
                step.dep = match depid {
                    -1 => None,
                    d if d < 0 || d as usize >= block_steps.len() => {
                        return Err(Error::input(format!(
                            "{at}: depid={d} names no thread block (GPU {gpu} has {})",
                            block_steps.len()
                        )))
                    }
                    d => {
                        let steps = block_steps[d as usize];
                        if deps < 0 || deps as usize >= steps {
                            return Err(Error::input(format!(
                                "{at}: deps={deps} names no step of thread block {d} (it has \
                                 {steps})"
                            )));
                        }
                        Some((d as usize, deps as usize))
                    }
                };
                if step.kind == "nop" {
                    continue;
                }
                if step.count == 0 {
                    return Err(Error::input(format!("{at}: cnt=0 moves nothing")));
                }
                let places = [
                    ("src", step.src),
                    ("dst", Some((step.dst.0, step.raw_dstoff))),
                ];
                for (end, place) in places {
                    let Some((buffer, offset)) = place else {
                        continue;
                    };
                    if buffer == Buffer::Output && layout.in_place() {
                        return Err(Error::input(format!(
                            "{at}: {end}buf=o, but {} runs in place: its chunks live in the \
                             input buffer",
                            c.kind
                        )));
                    }
                    let Some(size) = size_of(buffer) else {
                        continue;
                    };
                    if offset < 0 || offset + step.count as i64 > size {
                        return Err(Error::input(format!(
                            "{at}: {end}off={offset} cnt={} leaves the {} buffer of {size} chunks",
                            step.count,
                            buffer.name()
                        )));
                    }
                }
            }
        }
    }
    Ok(())
}

/// Per GPU, thread block and step: its place in an order the GPU can run its steps in (each
/// block's steps in sequence, each step after the one it depends on; among steps free to go,
/// lower blocks first). A GPU whose steps wait for each other in a circle would deadlock.
fn run_order(file: &str, gpus: &[(u32, Vec<ReadBlock>)]) -> Result<Vec<Vec<Vec<usize>>>, Error> {
    let mut runs = Vec::with_capacity(gpus.len());
    for (gpu, blocks) in gpus {
        let mut waiting: Vec<Vec<u32>> = Vec::with_capacity(blocks.len());
        let mut after: HashMap<(usize, usize), Vec<(usize, usize)>> = HashMap::new();
        for (b, tb) in blocks.iter().enumerate() {
            waiting.push(
                tb.steps
                    .iter()
                    .enumerate()
                    .map(|(s, step)| (s > 0) as u32 + step.dep.is_some() as u32)
                    .collect(),
            );
            for (s, step) in tb.steps.iter().enumerate() {
                if let Some(dep) = step.dep {
                    after.entry(dep).or_default().push((b, s));
                }
            }
        }
        let mut place: Vec<Vec<usize>> = blocks.iter().map(|b| vec![0; b.steps.len()]).collect();
        let mut ready: std::collections::BTreeSet<(usize, usize)> = (0..blocks.len())
            .filter(|&b| waiting[b].first() == Some(&0))
            .map(|b| (b, 0))
            .collect();
        let mut placed = 0;
        while let Some((b, s)) = ready.pop_first() {
            place[b][s] = placed;
            placed += 1;
            let next = (s + 1 < blocks[b].steps.len()).then_some((b, s + 1));
            for (nb, ns) in next
                .into_iter()
                .chain(after.remove(&(b, s)).into_iter().flatten())
            {
                waiting[nb][ns] -= 1;
                if waiting[nb][ns] == 0 {
                    ready.insert((nb, ns));
                }
            }
        }
        if let Some((b, s)) = waiting
            .iter()
            .enumerate()
            .find_map(|(b, w)| w.iter().position(|&n| n > 0).map(|s| (b, s)))
        {
            return Err(Error::input(format!(
                "{file}: GPU {gpu} thread block {b} step {s} waits, through its dependencies, \
                 for a step that runs after it (its block runs in step order): the GPU would \
                 deadlock"
            )));
        }
        runs.push(place);
    }
    Ok(runs)
}

/// Pairs sends with receives per connection and turns step dependencies into transfer ones.
fn build_schedule(
    file: &str,
    c: &Collective,
    layout: &Layout,
    gpus: &[(u32, Vec<ReadBlock>)],
) -> Result<Schedule, Error> {
    const SENDS: [&str; 4] = ["s", "rcs", "rrs", "rrcs"];
    const RECEIVES: [&str; 5] = ["r", "rcs", "rrc", "rrs", "rrcs"];
    const LOCAL: [&str; 3] = ["re", "cpy", "nop"];
    // Per connection (src, dst, chan): the (gpu, tb, step) of its sends and of its receives.
    type Spot = (usize, usize, usize);
    let mut sends: HashMap<(u32, u32, i64), Vec<Spot>> = HashMap::new();
    let mut receives: HashMap<(u32, u32, i64), Vec<Spot>> = HashMap::new();
    for (g, (gpu, blocks)) in gpus.iter().enumerate() {
        for (b, tb) in blocks.iter().enumerate() {
            for (s, step) in tb.steps.iter().enumerate() {
                let kind = step.kind.as_str();
                if SENDS.contains(&kind) {
                    sends
                        .entry((*gpu, tb.send as u32, tb.chan))
                        .or_default()
                        .push((g, b, s));
                }
                if RECEIVES.contains(&kind) {
                    receives
                        .entry((tb.recv as u32, *gpu, tb.chan))
                        .or_default()
                        .push((g, b, s));
                }
            }
        }
    }
    // Transfers: one per matched send/receive, keyed by both ends' steps. The k-th send on a
    // connection meets its k-th receive in the order each GPU runs its steps, which matters
    // where several thread blocks share a connection (msccl-tools' early files do).
    let runs = run_order(file, gpus)?;
    for list in sends.values_mut().chain(receives.values_mut()) {
        list.sort_by_key(|&(g, b, s)| runs[g][b][s]);
    }
    let mut transfers: Vec<(Spot, Spot)> = Vec::new();
    let mut keys: Vec<_> = sends.keys().copied().collect();
    keys.sort_unstable();
    for key in keys {
        let (out, inc) = (&sends[&key], receives.get(&key).map_or(&[][..], |v| v));
        if out.len() != inc.len() {
            return Err(Error::input(format!(
                "{file}: GPU {} sends {} time(s) to GPU {} on channel {}, which receives {}",
                key.0,
                out.len(),
                key.1,
                key.2,
                inc.len()
            )));
        }
        transfers.extend(out.iter().copied().zip(inc.iter().copied()));
    }
    let by_receive: HashMap<Spot, usize> = transfers
        .iter()
        .enumerate()
        .map(|(i, &(_, r))| (r, i))
        .collect();
    // The transfers a step waits for: its own dependency and those of the nops just before it,
    // through local steps to the receives behind them. A local step also runs after every
    // earlier step of its thread block (the executor runs a block's steps in order), so what
    // those received is behind it too.
    let waits = |spot: Spot| -> Vec<usize> {
        let mut found = Vec::new();
        let mut stack = vec![spot];
        let mut seen = std::collections::HashSet::new();
        while let Some((g, b, s)) = stack.pop() {
            let steps = &gpus[g].1[b].steps;
            if s > 0 && LOCAL.contains(&steps[s].kind.as_str()) {
                let before = (g, b, s - 1);
                if seen.insert(before) {
                    match by_receive.get(&before) {
                        Some(&t) => found.push(t),
                        None => stack.push(before),
                    }
                }
            }
            let mut k = s;
            loop {
                if let Some((db, ds)) = steps[k].dep {
                    let target = (g, db, ds);
                    if seen.insert(target) {
                        match by_receive.get(&target) {
                            Some(&t) => found.push(t),
                            None => stack.push(target),
                        }
                    }
                }
                if k == 0 || steps[k - 1].kind != "nop" {
                    break;
                }
                k -= 1;
            }
        }
        found
    };
    let mut deps: Vec<Vec<usize>> = Vec::with_capacity(transfers.len());
    for (t, &(send, recv)) in transfers.iter().enumerate() {
        let mut d = waits(send);
        d.extend(waits(recv));
        // A step that receives and sends forwards what it received.
        if let Some(&incoming) = by_receive.get(&send) {
            if incoming != t {
                d.push(incoming);
            }
        }
        d.sort_unstable();
        d.dedup();
        deps.push(d);
    }
    // List order: dependencies first; among ready transfers, earlier steps first.
    let mut order: Vec<usize> = Vec::with_capacity(transfers.len());
    let mut waiting: Vec<usize> = deps.iter().map(Vec::len).collect();
    let mut dependents: Vec<Vec<usize>> = vec![Vec::new(); transfers.len()];
    for (t, d) in deps.iter().enumerate() {
        for &x in d {
            dependents[x].push(t);
        }
    }
    let ordered = transfers
        .iter()
        .all(|&((g, b, s), _)| gpus[g].1[b].steps[s].order.is_some());
    let key = |t: usize| {
        let ((g, b, s), _) = transfers[t];
        let order = if ordered {
            gpus[g].1[b].steps[s].order.unwrap_or(0)
        } else {
            0
        };
        // The executor runs a GPU's thread blocks at once; a link serves one message at a
        // time, so blocks of one channel take turns (one step each, peer after peer) rather
        // than one block's steps going first.
        (order, s, gpus[g].1[b].chan, g, b)
    };
    /// Issue order of a transfer: its collsim order, step, channel, GPU and thread block.
    type IssueKey = (u64, usize, i64, usize, usize);
    let mut ready: std::collections::BTreeSet<(IssueKey, usize)> = (0..transfers.len())
        .filter(|&t| waiting[t] == 0)
        .map(|t| (key(t), t))
        .collect();
    while let Some((_, t)) = ready.pop_first() {
        order.push(t);
        for &x in &dependents[t] {
            waiting[x] -= 1;
            if waiting[x] == 0 {
                ready.insert((key(x), x));
            }
        }
    }
    if order.len() != transfers.len() {
        return Err(Error::input(format!(
            "{file}: the step dependencies form a cycle"
        )));
    }
    let mut position = vec![0 as TransferIndex; transfers.len()];
    for (i, &t) in order.iter().enumerate() {
        position[t] = i as TransferIndex;
    }
    // Local steps that read a scratch chunk, by (GPU, chunk): what a receive into scratch is for.
    let mut readers: HashMap<(usize, u32), Vec<Spot>> = HashMap::new();
    for (g, (_, blocks)) in gpus.iter().enumerate() {
        for (b, tb) in blocks.iter().enumerate() {
            for (s, step) in tb.steps.iter().enumerate() {
                if let (true, Some((Buffer::Scratch, off))) =
                    (["re", "cpy"].contains(&step.kind.as_str()), step.src)
                {
                    readers
                        .entry((g, off.clamp(0, u32::MAX as i64) as u32))
                        .or_default()
                        .push((g, b, s));
                }
            }
        }
    }
    let at = |(g, b, s): Spot| format!("{file}: GPU {} thread block {b} step {s}", gpus[g].0);
    // Where transfer `t` lands: its first piece and how it is combined there. A chunk received
    // into scratch lands where the one local step that waits for it puts it (`re` reduces it
    // into place, `cpy` copies it), and must be the piece found there.
    // The place a step sends from: what it received for the forwarding kinds that store it
    // first (rcs, rrcs), its source otherwise (rrs sends the sum without storing it).
    let sent_from = |(g, b, s): Spot| -> Option<u32> {
        let step = &gpus[g].1[b].steps[s];
        let (buffer, off) = match step.kind.as_str() {
            "rcs" | "rrcs" => (step.dst.0, step.dst.1 as i64),
            _ => step.src?,
        };
        layout.piece(gpus[g].0, buffer, off.clamp(0, u32::MAX as i64) as u32)
    };
    let landing = |t: usize| -> Result<(u32, Op), Error> {
        let (send, recv) = transfers[t];
        let step = &gpus[recv.0].1[recv.1].steps[recv.2];
        let rank = gpus[recv.0].0;
        // rrs reduces what arrives with its source and sends the sum on; the others store it
        // at their destination.
        let kept = match (step.kind.as_str(), step.src) {
            ("rrs", Some((buffer, off))) => (buffer, off.clamp(0, u32::MAX as i64) as u32),
            _ => step.dst,
        };
        if let Some(lo) = layout.piece(rank, kept.0, kept.1) {
            if let Some(sent) = sent_from(send).filter(|&p| p != lo) {
                return Err(Error::input(format!(
                    "{} sends piece {sent}, which {} takes as piece {lo}",
                    at(send),
                    at(recv).split_once(": ").map_or("", |(_, step)| step)
                )));
            }
            let op = if step.kind.starts_with("rr") {
                Op::Reduce
            } else {
                Op::Copy
            };
            return Ok((lo, op));
        }
        if step.kind != "r" {
            return Err(Error::input(format!(
                "{}: a '{}' step into the scratch buffer; import models scratch chunks received \
                 whole (r) and then reduced (re) or copied (cpy) into place",
                at(recv),
                step.kind
            )));
        }
        let sent = &gpus[send.0].1[send.1].steps[send.2];
        let carried = match sent.src {
            Some((buffer, off)) if buffer != Buffer::Scratch => {
                layout.piece(gpus[send.0].0, buffer, off as u32)
            }
            _ => None,
        }
        .ok_or_else(|| {
            Error::input(format!(
                "{}: sends from the scratch buffer into another GPU's scratch; import models \
                 scratch chunks that are reduced or copied into place where they arrive",
                at(send)
            ))
        })?;
        // The local steps that wait for the receive and read its chunks, one after another
        // (one step for the whole receive, or several for parts of it, as RCCL's all-pairs
        // files reduce each chunk in a thread block of its own): each must put its chunks where
        // the carried pieces lie, all in one way.
        let (first, end) = (step.dst.1, step.dst.1 + step.count);
        let mut chunk = first;
        let mut op = None;
        while chunk < end {
            let mut found = readers
                .get(&(recv.0, chunk))
                .into_iter()
                .flatten()
                .filter(|&&r| waits(r).contains(&t));
            let (Some(&reader), None) = (found.next(), found.next()) else {
                return Err(Error::input(format!(
                    "{}: receives into scratch chunk {chunk}, which not exactly one local step \
                     (re or cpy) that waits for it reads",
                    at(recv)
                )));
            };
            let local = &gpus[reader.0].1[reader.1].steps[reader.2];
            let target = layout.piece(rank, local.dst.0, local.dst.1);
            let piece = carried + (chunk - first);
            if chunk + local.count > end || target != Some(piece) {
                return Err(Error::input(format!(
                    "{}: puts scratch chunks {chunk}..{} (piece {piece} from GPU {}, {} \
                     chunk(s)) where {} chunk(s) of another place lie",
                    at(reader),
                    chunk + local.count,
                    gpus[send.0].0,
                    end - chunk,
                    local.count
                )));
            }
            let reads = if local.kind == "re" {
                Op::Reduce
            } else {
                Op::Copy
            };
            if op.is_some_and(|o| o != reads) {
                return Err(Error::input(format!(
                    "{}: copies part of a received scratch block that other steps reduce",
                    at(reader)
                )));
            }
            op = Some(reads);
            chunk += local.count;
        }
        Ok((carried, op.unwrap_or(Op::Copy)))
    };
    let mut schedule = Schedule::with_capacity(transfers.len());
    for &t in &order {
        let ((sg, _, _), (rg, rb, rs)) = transfers[t];
        let step = &gpus[rg].1[rb].steps[rs];
        let rank = gpus[rg].0;
        let (lo, op) = landing(t)?;
        let hi = lo + step.count;
        if step.count == 0 || hi > c.piece_count() {
            return Err(Error::input(format!(
                "{file}: GPU {rank} step {rs} of thread block {rb} receives chunks {lo}..{hi}, \
                 outside the {} chunks of the collective",
                c.piece_count()
            )));
        }
        let transfer = Transfer {
            src: c.npus[gpus[sg].0 as usize],
            dst: c.npus[rank as usize],
            bytes: c.piece_bytes(lo, hi),
        };
        let d: Vec<TransferIndex> = deps[t].iter().map(|&x| position[x]).collect();
        schedule.push_data(transfer, &d, (lo, hi), op);
    }
    schedule.collective = Some(c.clone());
    Ok(schedule)
}
