//! Export: a schedule that claims a collective as the executor's thread blocks and steps.

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;

use quick_xml::events::{BytesEnd, BytesStart, Event};
use quick_xml::Writer;

use super::layout::{
    coll_name, Buffer, Layout, Slot, StepRef, MAX_COUNT, MAX_STEPS, ORDER_ATTRIBUTE,
};
use crate::collective::{Collective, CollectiveKind};
use crate::schedule::{Op, Schedule, TransferIndex};
use crate::Error;

/// One step of a thread block.
#[derive(Clone, Debug)]
struct Step {
    kind: &'static str,
    src: (Buffer, u32),
    dst: (Buffer, u32),
    count: u32,
    /// (thread block, step) this step waits for.
    dep: Option<(usize, usize)>,
    has_dep: bool,
    /// For send steps: the transfer's position in the schedule (see [`ORDER_ATTRIBUTE`]).
    order: Option<u32>,
}

#[derive(Clone, Debug)]
struct ThreadBlock {
    send: i64,
    recv: i64,
    steps: Vec<Step>,
}

/// Per GPU: thread blocks, and the index of each by (send peer, recv peer).
#[derive(Default)]
struct Gpu {
    blocks: Vec<ThreadBlock>,
    index: HashMap<(i64, i64), usize>,
}

impl Gpu {
    fn block(&mut self, send: i64, recv: i64) -> usize {
        let blocks = &mut self.blocks;
        *self.index.entry((send, recv)).or_insert_with(|| {
            blocks.push(ThreadBlock {
                send,
                recv,
                steps: Vec::new(),
            });
            blocks.len() - 1
        })
    }

    /// Appends `step` to block `tb`, waiting for every step in `deps` (nops carry all but one).
    fn push(&mut self, tb: usize, mut step: Step, deps: &[(usize, usize)]) -> usize {
        for &(b, s) in deps {
            self.blocks[b].steps[s].has_dep = true;
        }
        if let Some((&last, rest)) = deps.split_last() {
            for &dep in rest {
                self.blocks[tb].steps.push(Step {
                    kind: "nop",
                    src: (Buffer::Input, 0),
                    dst: (Buffer::Input, 0),
                    count: 0,
                    dep: Some(dep),
                    has_dep: false,
                    order: None,
                });
            }
            step.dep = Some(last);
        }
        self.blocks[tb].steps.push(step);
        self.blocks[tb].steps.len() - 1
    }
}

/// Writes `schedule`, which implements `c`, as an MSCCL XML algorithm named `name`.
pub fn write_msccl(
    schedule: &Schedule,
    c: &Collective,
    name: &str,
    path: &Path,
) -> Result<(), Error> {
    let text = msccl_xml(schedule, c, name)?;
    crate::write_replacing(path, &text)
}

/// The MSCCL XML text of `schedule` (see [`write_msccl`]).
pub fn msccl_xml(schedule: &Schedule, c: &Collective, name: &str) -> Result<String, Error> {
    let coll = coll_name(c.kind)
        .filter(|_| c.kind != CollectiveKind::AllToAll)
        .ok_or_else(|| {
            Error::input(format!(
            "MSCCL export supports all-gather, reduce-scatter, all-reduce, broadcast and reduce, \
             not {}",
            c.kind
        ))
        })?;
    if !schedule.deps_point_backwards() {
        return Err(Error::input(
            "MSCCL export needs every dependency to name an earlier transfer",
        ));
    }
    let layout = Layout { c };
    let n = c.ranks() as usize;
    let mut rank_of: HashMap<u32, u32> = HashMap::new();
    for (r, &v) in c.npus.iter().enumerate() {
        rank_of.insert(v, r as u32);
    }
    let mut gpus: Vec<Gpu> = (0..n).map(|_| Gpu::default()).collect();
    // Local copies that need no transfer go first, on a block of their own; sends of a rank's
    // own pieces read the copy (one step reads one buffer, and a send may mix own and received
    // pieces), so they wait for it.
    let mut first_copy: Vec<Option<(StepRef, (u32, u32))>> = vec![None; n];
    for (r, gpu) in gpus.iter_mut().enumerate() {
        for copy in layout.copies(r as u32).into_iter().filter(|c| !c.after) {
            let (lo, hi) = copy.pieces;
            let tb = gpu.block(-1, -1);
            let step = gpu.push(tb, local_copy(copy.from, copy.to, hi - lo)?, &[]);
            first_copy[r] = Some(((tb, step), (lo, hi)));
        }
    }
    // Where each transfer's receive step is, and which received pieces each rank holds.
    let mut receive_step: Vec<(usize, usize)> = Vec::with_capacity(schedule.len());
    let mut received: HashMap<(u32, u32), Vec<TransferIndex>> = HashMap::new();
    // Waits only time a schedule (pacing, compute): they are left out, and whatever waits for
    // one waits for what it waited for instead.
    let mut behind_wait: HashMap<TransferIndex, Vec<TransferIndex>> = HashMap::new();
    for t in 0..schedule.len() as TransferIndex {
        let deps: Vec<TransferIndex> = schedule
            .deps(t)
            .iter()
            .flat_map(|d| match behind_wait.get(d) {
                Some(real) => real.clone(),
                None => vec![*d],
            })
            .collect();
        if schedule.wait(t).is_some() {
            behind_wait.insert(t, deps);
            receive_step.push((usize::MAX, usize::MAX));
            continue;
        }
        let tr = schedule.transfer(t);
        let bad = |what: &str| Error::input(format!("transfer {}: {what}", schedule.id(t)));
        let (a, b) = match (rank_of.get(&tr.src), rank_of.get(&tr.dst)) {
            (Some(&a), Some(&b)) => (a, b),
            _ => return Err(bad("an NPU outside the collective")),
        };
        let (lo, hi) = schedule
            .pieces(t)
            .filter(|&(lo, hi)| hi > lo)
            .ok_or_else(|| bad("no piece range; MSCCL steps move named chunks"))?;
        if hi - lo >= MAX_COUNT {
            return Err(bad(&format!(
                "{} chunks in one step; the MSCCL executor takes fewer than {MAX_COUNT}",
                hi - lo
            )));
        }
        let (mut at_src, mut at_dst) = (Vec::new(), Vec::new());
        for &d in &deps {
            let arrived_at = rank_of[&schedule.transfer(d).dst];
            if arrived_at == a {
                at_src.push(receive_step[d as usize]);
            } else if arrived_at == b {
                at_dst.push(receive_step[d as usize]);
            } else {
                return Err(bad(&format!(
                    "it waits for transfer {} on another NPU; MSCCL dependencies stay on one GPU",
                    schedule.id(d)
                )));
            }
        }
        let from = layout.working(lo);
        if let Some((step, (own_lo, own_hi))) = first_copy[a as usize] {
            if lo < own_hi && own_lo < hi {
                at_src.push(step);
            }
        }
        let send = Step {
            kind: "s",
            src: from,
            dst: from,
            count: hi - lo,
            dep: None,
            has_dep: false,
            order: Some(t),
        };
        let gpu = &mut gpus[a as usize];
        let tb = gpu.block(b as i64, -1);
        gpu.push(tb, send, &at_src);
        let to = layout.working(lo);
        let recv = Step {
            kind: if schedule.op(t) == Op::Reduce {
                "rrc"
            } else {
                "r"
            },
            src: to,
            dst: to,
            count: hi - lo,
            dep: None,
            has_dep: false,
            order: None,
        };
        let gpu = &mut gpus[b as usize];
        let tb = gpu.block(-1, a as i64);
        let step = gpu.push(tb, recv, &at_dst);
        receive_step.push((tb, step));
        for p in lo..hi {
            received.entry((b, p)).or_default().push(t);
        }
    }
    // Copies that finish the collective wait for every receive into their pieces.
    for (r, gpu) in gpus.iter_mut().enumerate() {
        for copy in layout.copies(r as u32).into_iter().filter(|c| c.after) {
            let (lo, hi) = copy.pieces;
            let mut deps: Vec<StepRef> = (lo..hi)
                .flat_map(|p| received.get(&(r as u32, p)).into_iter().flatten())
                .map(|&t| receive_step[t as usize])
                .collect();
            deps.sort_unstable();
            deps.dedup();
            let tb = gpu.block(-2, -2);
            gpu.push(tb, local_copy(copy.from, copy.to, hi - lo)?, &deps);
        }
    }
    render(c, coll, name, &layout, &gpus)
}

fn local_copy(from: Slot, to: Slot, count: u32) -> Result<Step, Error> {
    if count >= MAX_COUNT {
        return Err(Error::input(format!(
            "a local copy of {count} chunks; the MSCCL executor takes fewer than {MAX_COUNT} per step"
        )));
    }
    Ok(Step {
        kind: "cpy",
        src: from,
        dst: to,
        count,
        dep: None,
        has_dep: false,
        order: None,
    })
}

fn render(
    c: &Collective,
    coll: &str,
    name: &str,
    layout: &Layout,
    gpus: &[Gpu],
) -> Result<String, Error> {
    let (i_chunks, o_chunks) = layout.chunks();
    let mut w = Writer::new_with_indent(Vec::new(), b' ', 2);
    let io = |e: std::io::Error| Error::input(format!("writing MSCCL XML: {e}"));
    let max_bytes = i64::MAX.to_string();
    let algo = BytesStart::new("algo").with_attributes([
        ("name", name),
        ("proto", "Simple"),
        ("nchannels", "1"),
        ("nchunksperloop", &i_chunks.max(o_chunks).to_string()),
        ("ngpus", &c.ranks().to_string()),
        ("coll", coll),
        ("inplace", if layout.in_place() { "1" } else { "0" }),
        ("outofplace", if layout.in_place() { "0" } else { "1" }),
        ("minBytes", "0"),
        ("maxBytes", &max_bytes),
    ]);
    w.write_event(Event::Start(algo)).map_err(io)?;
    for (id, gpu) in gpus.iter().enumerate() {
        let element = BytesStart::new("gpu").with_attributes([
            ("id", id.to_string().as_str()),
            ("i_chunks", &i_chunks.to_string()),
            ("o_chunks", &o_chunks.to_string()),
            ("s_chunks", "0"),
        ]);
        w.write_event(Event::Start(element)).map_err(io)?;
        for (tb_id, tb) in gpu.blocks.iter().enumerate() {
            if tb.steps.len() > MAX_STEPS {
                return Err(Error::input(format!(
                    "GPU {id} thread block {tb_id} needs {} steps; the MSCCL executor allows \
                     {MAX_STEPS} (use fewer chunks)",
                    tb.steps.len()
                )));
            }
            let element = BytesStart::new("tb").with_attributes([
                ("id", tb_id.to_string().as_str()),
                ("send", &tb.send.max(-1).to_string()),
                ("recv", &tb.recv.max(-1).to_string()),
                ("chan", "0"),
            ]);
            w.write_event(Event::Start(element)).map_err(io)?;
            for (s, step) in tb.steps.iter().enumerate() {
                let (depid, deps) = step.dep.map_or((-1, -1), |(b, s)| (b as i64, s as i64));
                let mut element = BytesStart::new("step").with_attributes([
                    ("s", s.to_string().as_str()),
                    ("type", step.kind),
                    ("srcbuf", step.src.0.name()),
                    ("srcoff", &step.src.1.to_string()),
                    ("dstbuf", step.dst.0.name()),
                    ("dstoff", &step.dst.1.to_string()),
                    ("cnt", &step.count.to_string()),
                    ("depid", &depid.to_string()),
                    ("deps", &deps.to_string()),
                    ("hasdep", if step.has_dep { "1" } else { "0" }),
                ]);
                if let Some(order) = step.order {
                    element.push_attribute((ORDER_ATTRIBUTE, order.to_string().as_str()));
                }
                w.write_event(Event::Empty(element)).map_err(io)?;
            }
            w.write_event(Event::End(BytesEnd::new("tb"))).map_err(io)?;
        }
        w.write_event(Event::End(BytesEnd::new("gpu")))
            .map_err(io)?;
    }
    w.write_event(Event::End(BytesEnd::new("algo")))
        .map_err(io)?;
    let mut text = w.into_inner();
    writeln!(text).map_err(io)?;
    String::from_utf8(text).map_err(|e| Error::input(format!("writing MSCCL XML: {e}")))
}
