//! Chakra execution traces (ASTRA-sim 2.x's workload input): one file per rank, `NAME.{rank}.et`
//! (optionally gzip-compressed), holding a `GlobalMetadata` record and then `Node` records, each
//! preceded by its length as a varint. The messages below follow the public Chakra schema
//! (`et_def.proto`, package `ChakraProtoMsg`): field numbers and node/collective type values are
//! those of the schema; fields collsim does not read are skipped as unknown.
//!
//! Read: compute nodes (`duration_micros`), collectives (`comm_type`, `comm_size` as int64 or
//! uint64, communicator `pg_name`), sends and receives (`comm_dst`/`comm_src`, `comm_tag`),
//! control and data dependencies. Memory and metadata nodes take no time; other node types are
//! warned about by name and take no time. collsim writes three attributes of its own, ignored by
//! other readers: `collsim_duration_ps` (exact compute time), `collsim_forward` (forward or
//! backward compute) and `collsim_group` (`data` or `model`, the group a collective's exposure is
//! charged to).

use std::collections::HashMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use prost::Message;

use super::program::{Node, Program, Task};
use super::CommGroup;
use crate::collective::CollectiveKind;
use crate::units::Time;
use crate::Error;

/// `ChakraProtoMsg.GlobalMetadata`.
#[derive(Clone, PartialEq, Message)]
pub struct GlobalMetadata {
    #[prost(string, tag = "1")]
    pub version: String,
    #[prost(message, repeated, tag = "2")]
    pub attr: Vec<AttributeProto>,
}

/// `ChakraProtoMsg.AttributeProto`, with the scalar values and the bool list.
#[derive(Clone, PartialEq, Message)]
pub struct AttributeProto {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(oneof = "Value", tags = "3, 7, 9, 11, 13, 15, 17, 27, 28, 29")]
    pub value: Option<Value>,
}

/// The `value` oneof of `AttributeProto` (the kinds collsim reads).
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum Value {
    #[prost(double, tag = "3")]
    Double(f64),
    #[prost(int32, tag = "7")]
    Int32(i32),
    #[prost(int64, tag = "9")]
    Int64(i64),
    #[prost(uint32, tag = "11")]
    Uint32(u32),
    #[prost(uint64, tag = "13")]
    Uint64(u64),
    #[prost(sint32, tag = "15")]
    Sint32(i32),
    #[prost(sint64, tag = "17")]
    Sint64(i64),
    #[prost(bool, tag = "27")]
    Bool(bool),
    #[prost(message, tag = "28")]
    BoolList(BoolList),
    #[prost(string, tag = "29")]
    String(String),
}

/// `ChakraProtoMsg.BoolList`.
#[derive(Clone, PartialEq, Message)]
pub struct BoolList {
    #[prost(bool, repeated, tag = "1")]
    pub values: Vec<bool>,
}

/// `ChakraProtoMsg.Node` (inputs, outputs and storage skipped).
#[derive(Clone, PartialEq, Message)]
pub struct ChakraNode {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(string, tag = "2")]
    pub name: String,
    #[prost(int32, tag = "3")]
    pub node_type: i32,
    #[prost(uint64, repeated, tag = "4")]
    pub ctrl_deps: Vec<u64>,
    #[prost(uint64, repeated, tag = "5")]
    pub data_deps: Vec<u64>,
    #[prost(uint64, tag = "6")]
    pub start_time_micros: u64,
    #[prost(uint64, tag = "7")]
    pub duration_micros: u64,
    #[prost(message, repeated, tag = "10")]
    pub attr: Vec<AttributeProto>,
}

/// `NodeType` values.
const METADATA_NODE: i32 = 1;
const MEM_LOAD_NODE: i32 = 2;
const MEM_STORE_NODE: i32 = 3;
const COMP_NODE: i32 = 4;
const COMM_SEND_NODE: i32 = 5;
const COMM_RECV_NODE: i32 = 6;
const COMM_COLL_NODE: i32 = 7;

/// The schema version collsim writes.
const VERSION: &str = "0.0.4";

/// `CollectiveCommType` value to collsim's collective (a barrier runs as a one-byte all-reduce).
fn collective_of(value: i64) -> Option<CollectiveKind> {
    use CollectiveKind::*;
    Some(match value {
        0 | 9 => AllReduce,
        1 => Reduce,
        2 => AllGather,
        3 => Gather,
        4 => Scatter,
        5 => Broadcast,
        6 => AllToAll,
        7 | 8 => ReduceScatter,
        _ => return None,
    })
}

fn comm_type_of(kind: CollectiveKind) -> i64 {
    use CollectiveKind::*;
    match kind {
        AllReduce => 0,
        Reduce => 1,
        AllGather => 2,
        Gather => 3,
        Scatter => 4,
        Broadcast => 5,
        AllToAll => 6,
        ReduceScatter => 7,
    }
}

/// The trace files of `path`: a directory holding one set of `NAME.{rank}.et[.gz]` files, or the
/// prefix `DIR/NAME` of such a set. None when `path` names no traces.
pub fn find_traces(path: &Path) -> Result<Option<Vec<PathBuf>>, Error> {
    let (dir, prefix) = if path.is_dir() {
        (path.to_path_buf(), None)
    } else {
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
        match name {
            Some(n) if !path.exists() => (dir, Some(n)),
            _ => return Ok(None),
        }
    };
    let entries = std::fs::read_dir(&dir).map_err(|e| Error::io(dir.display(), e))?;
    let mut found: HashMap<String, Vec<(u32, PathBuf)>> = HashMap::new();
    for entry in entries {
        let entry = entry.map_err(|e| Error::io(dir.display(), e))?;
        let file = entry.file_name().to_string_lossy().into_owned();
        let stem = file
            .strip_suffix(".et")
            .or_else(|| file.strip_suffix(".et.gz"));
        let Some((name, rank)) = stem.and_then(|s| s.rsplit_once('.')) else {
            continue;
        };
        let Ok(rank) = rank.parse::<u32>() else {
            continue;
        };
        if prefix.as_deref().is_none_or(|p| p == name) {
            found
                .entry(name.to_string())
                .or_default()
                .push((rank, entry.path()));
        }
    }
    if found.is_empty() {
        return match prefix {
            Some(_) => Ok(None),
            None => Err(Error::input(format!(
                "{}: no Chakra traces (NAME.RANK.et) in this folder",
                path.display()
            ))),
        };
    }
    if found.len() > 1 {
        let mut names: Vec<&String> = found.keys().collect();
        names.sort();
        return Err(Error::input(format!(
            "{}: traces of several workloads ({}): give DIR/NAME",
            path.display(),
            names
                .iter()
                .map(|n| n.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    let (name, mut files) = found.into_iter().next().expect("one set");
    files.sort();
    for (expected, (rank, _)) in files.iter().enumerate() {
        if *rank != expected as u32 {
            return Err(Error::input(format!(
                "{}: trace of rank {expected} ({name}.{expected}.et) is missing",
                dir.display()
            )));
        }
    }
    Ok(Some(files.into_iter().map(|(_, p)| p).collect()))
}

/// Which field gives a compute node its duration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Durations {
    /// collsim's own `collsim_duration_ps` where a trace has it (traces collsim wrote keep the
    /// picoseconds), else `duration_micros`.
    Exact,
    /// `duration_micros` only, whole microseconds, as ASTRA-sim reads every trace.
    Recorded,
}

/// Reads the traces of `files` (rank `r` from `files[r]`) as a program named `name`; warnings
/// about node types collsim does not model go to `warn`.
pub fn load_traces(
    files: &[PathBuf],
    name: &str,
    durations: Durations,
    warn: &mut dyn FnMut(String),
) -> Result<Program, Error> {
    let ranks = files
        .iter()
        .map(|f| read_rank(f, files.len(), durations, warn))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Program {
        name: name.to_string(),
        ranks,
        ..Program::default()
    })
}

/// The workload name of a trace set: the `NAME` of `NAME.0.et`.
pub fn trace_name(first: &Path) -> String {
    let file = first
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let stem = file
        .strip_suffix(".et.gz")
        .or_else(|| file.strip_suffix(".et"))
        .unwrap_or(&file);
    stem.rsplit_once('.')
        .map_or(stem.to_string(), |(n, _)| n.to_string())
}

fn read_rank(
    path: &Path,
    ranks: usize,
    durations: Durations,
    warn: &mut dyn FnMut(String),
) -> Result<Vec<Node>, Error> {
    let shown = path.display().to_string();
    let raw = std::fs::read(path).map_err(|e| Error::io(&shown, e))?;
    let bytes = if raw.starts_with(&[0x1f, 0x8b]) {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(&raw[..])
            .read_to_end(&mut out)
            .map_err(|e| Error::input(format!("{shown}: not a readable gzip file: {e}")))?;
        out
    } else {
        raw
    };
    let mut records = Records {
        rest: &bytes[..],
        shown: &shown,
        count: 0,
    };
    let bad = |what: String| Error::input(format!("{shown}: {what}"));
    let metadata = records
        .next(None)?
        .ok_or_else(|| bad("empty: a trace starts with its global metadata".into()))?;
    GlobalMetadata::decode(metadata)
        .map_err(|e| bad(format!("the global metadata record does not decode: {e}")))?;
    let mut raw_nodes = Vec::new();
    let mut last_id = None;
    while let Some(record) = records.next(last_id)? {
        let node = ChakraNode::decode(record).map_err(|e| {
            bad(format!(
                "node record {} (after node {}) does not decode: {e}",
                raw_nodes.len(),
                last_id.map_or("none".into(), |i: u64| i.to_string())
            ))
        })?;
        last_id = Some(node.id);
        raw_nodes.push(node);
    }
    let mut index: HashMap<u64, u32> = HashMap::with_capacity(raw_nodes.len());
    for (i, n) in raw_nodes.iter().enumerate() {
        if index.insert(n.id, i as u32).is_some() {
            return Err(bad(format!("node id {} appears twice", n.id)));
        }
    }
    let mut unknown: Vec<i32> = Vec::new();
    raw_nodes
        .into_iter()
        .map(|n| {
            let mut deps = Vec::with_capacity(n.ctrl_deps.len() + n.data_deps.len());
            for d in n.ctrl_deps.iter().chain(&n.data_deps) {
                let &i = index.get(d).ok_or_else(|| {
                    bad(format!(
                        "node {} ({}) depends on node {d}, which the trace does not have",
                        n.id, n.name
                    ))
                })?;
                if !deps.contains(&i) {
                    deps.push(i);
                }
            }
            let task = task_of(&n, ranks, durations)
                .map_err(|why| bad(format!("node {} ({}): {why}", n.id, n.name)))?;
            if task.is_none() && !unknown.contains(&n.node_type) {
                unknown.push(n.node_type);
                warn(format!(
                    "{shown}: node {} ({}) has type {}, which collsim does not model: it takes \
                     no time (as do later nodes of that type)",
                    n.id, n.name, n.node_type
                ));
            }
            Ok(Node {
                id: n.id,
                name: n.name,
                task: task.unwrap_or(Task::Nop),
                deps,
            })
        })
        .collect()
}

/// Length-delimited records of one file.
struct Records<'a> {
    rest: &'a [u8],
    shown: &'a str,
    count: usize,
}

impl<'a> Records<'a> {
    /// The next record, None at the end of the file; an error when it is cut short.
    fn next(&mut self, after: Option<u64>) -> Result<Option<&'a [u8]>, Error> {
        if self.rest.is_empty() {
            return Ok(None);
        }
        let truncated = || {
            Error::input(format!(
                "{}: record {} (after node {}) is truncated",
                self.shown,
                self.count,
                after.map_or("none".into(), |i| i.to_string())
            ))
        };
        let mut cursor = self.rest;
        let len = prost::encoding::decode_varint(&mut cursor).map_err(|_| truncated())? as usize;
        if len > cursor.len() {
            return Err(truncated());
        }
        let (record, rest) = cursor.split_at(len);
        self.rest = rest;
        self.count += 1;
        Ok(Some(record))
    }
}

fn attribute<'n>(node: &'n ChakraNode, name: &str) -> Option<&'n Value> {
    node.attr
        .iter()
        .find(|a| a.name == name)
        .and_then(|a| a.value.as_ref())
}

/// An integer attribute in any of the schema's integer encodings.
fn integer(node: &ChakraNode, name: &str) -> Option<i128> {
    Some(match attribute(node, name)? {
        Value::Int32(v) | Value::Sint32(v) => *v as i128,
        Value::Int64(v) | Value::Sint64(v) => *v as i128,
        Value::Uint32(v) => *v as i128,
        Value::Uint64(v) => *v as i128,
        _ => return None,
    })
}

fn text<'n>(node: &'n ChakraNode, name: &str) -> Option<&'n str> {
    match attribute(node, name)? {
        Value::String(s) => Some(s),
        _ => None,
    }
}

/// What a node does; None for node types collsim does not model.
fn task_of(n: &ChakraNode, ranks: usize, durations: Durations) -> Result<Option<Task>, String> {
    let size = || -> Result<u64, String> {
        let v = integer(n, "comm_size").ok_or("no comm_size attribute")?;
        u64::try_from(v).map_err(|_| format!("comm_size {v} is negative"))
    };
    let rank = |name: &str| -> Result<u32, String> {
        let v = integer(n, name).ok_or(format!("no {name} attribute"))?;
        match u32::try_from(v) {
            Ok(r) if (r as usize) < ranks => Ok(r),
            _ => Err(format!("{name} {v} is not one of the {ranks} ranks")),
        }
    };
    let tag = || integer(n, "comm_tag").unwrap_or(0) as u64;
    Ok(Some(match n.node_type {
        COMP_NODE => {
            let exact = match durations {
                Durations::Exact => integer(n, "collsim_duration_ps"),
                Durations::Recorded => None,
            };
            let duration = match exact {
                Some(ps) if ps >= 0 && ps <= u64::MAX as i128 => Time(ps as u64),
                _ => Time::from_ns(n.duration_micros.saturating_mul(1000)),
            };
            let forward = matches!(attribute(n, "collsim_forward"), Some(Value::Bool(true)));
            Task::Compute { duration, forward }
        }
        COMM_COLL_NODE => {
            let code = integer(n, "comm_type").ok_or("no comm_type attribute")?;
            let kind = collective_of(code as i64)
                .ok_or(format!("comm_type {code} is no collective type"))?;
            let bytes = if code == 9 {
                size().unwrap_or(1).max(1)
            } else {
                size()?
            };
            let group = match text(n, "collsim_group") {
                Some("model") => CommGroup::Model,
                Some("tensor") => CommGroup::Tensor,
                Some("pipeline") => CommGroup::Pipeline,
                Some("expert") => CommGroup::Expert,
                Some("context") => CommGroup::Context,
                _ => CommGroup::Data,
            };
            Task::Collective {
                kind,
                bytes,
                communicator: text(n, "pg_name").unwrap_or("").to_string(),
                group,
                times: match integer(n, "collsim_times") {
                    None => 1,
                    Some(t) if (1..=u32::MAX as i128).contains(&t) => t as u32,
                    Some(t) => return Err(format!("collsim_times {t} is not a positive count")),
                },
            }
        }
        COMM_SEND_NODE => Task::Send {
            peer: rank("comm_dst")?,
            bytes: size()?,
            tag: tag(),
        },
        COMM_RECV_NODE => Task::Recv {
            peer: rank("comm_src")?,
            bytes: size()?,
            tag: tag(),
        },
        METADATA_NODE | MEM_LOAD_NODE | MEM_STORE_NODE => Task::Nop,
        _ => return Ok(None),
    }))
}

fn attr(name: &str, value: Value) -> AttributeProto {
    AttributeProto {
        name: name.to_string(),
        value: Some(value),
    }
}

/// The Chakra node of a program node.
fn chakra_node(node: &Node) -> ChakraNode {
    let mut n = ChakraNode {
        id: node.id,
        name: node.name.clone(),
        data_deps: node.deps.iter().map(|&d| d as u64).collect(),
        ..ChakraNode::default()
    };
    match &node.task {
        Task::Compute { duration, forward } => {
            n.node_type = COMP_NODE;
            n.duration_micros = (duration.ps() + 500_000) / 1_000_000;
            n.attr = vec![
                attr("is_cpu_op", Value::Bool(false)),
                attr("collsim_duration_ps", Value::Uint64(duration.ps())),
                attr("collsim_forward", Value::Bool(*forward)),
            ];
        }
        Task::Collective {
            kind,
            bytes,
            communicator,
            group,
            times,
        } => {
            n.node_type = COMM_COLL_NODE;
            n.attr = vec![
                attr("is_cpu_op", Value::Bool(false)),
                attr("comm_type", Value::Int64(comm_type_of(*kind))),
                attr("comm_size", Value::Int64(*bytes as i64)),
                attr("pg_name", Value::String(communicator.clone())),
                attr("collsim_group", Value::String(group.name().into())),
            ];
            if *times != 1 {
                n.attr
                    .push(attr("collsim_times", Value::Int64(*times as i64)));
            }
        }
        Task::Send { peer, bytes, tag } | Task::Recv { peer, bytes, tag } => {
            let send = matches!(node.task, Task::Send { .. });
            n.node_type = if send { COMM_SEND_NODE } else { COMM_RECV_NODE };
            n.attr = vec![
                attr("is_cpu_op", Value::Bool(false)),
                attr(
                    if send { "comm_dst" } else { "comm_src" },
                    Value::Int64(*peer as i64),
                ),
                attr("comm_size", Value::Int64(*bytes as i64)),
                attr("comm_tag", Value::Int64(*tag as i64)),
            ];
        }
        Task::Nop => n.node_type = METADATA_NODE,
    }
    n
}

/// Writes `program` as Chakra traces `NAME.{rank}.et` (gzip-compressed `.et.gz` when `gzip`),
/// each to the path `path_for` gives its name, returning the names written. A workload name
/// that is not one plain file name (`../victim`) is refused.
pub fn write_traces(
    program: &Program,
    path_for: &mut dyn FnMut(&str) -> PathBuf,
    gzip: bool,
) -> Result<Vec<String>, Error> {
    file_name_safe(&program.name)?;
    let mut files = Vec::with_capacity(program.ranks.len());
    for (r, nodes) in program.ranks.iter().enumerate() {
        let ext = if gzip { "et.gz" } else { "et" };
        let name = format!("{}.{r}.{ext}", program.name);
        let path = path_for(&name);
        let mut bytes = Vec::new();
        let metadata = GlobalMetadata {
            version: VERSION.into(),
            attr: Vec::new(),
        };
        metadata
            .encode_length_delimited(&mut bytes)
            .expect("a Vec grows");
        for node in nodes {
            chakra_node(node)
                .encode_length_delimited(&mut bytes)
                .expect("a Vec grows");
        }
        let io = |e| Error::io(path.display(), e);
        let mut file = std::io::BufWriter::new(std::fs::File::create(&path).map_err(io)?);
        if gzip {
            let mut z = flate2::write::GzEncoder::new(file, flate2::Compression::default());
            z.write_all(&bytes).map_err(io)?;
            z.finish().map_err(io)?.flush().map_err(io)?;
        } else {
            file.write_all(&bytes).map_err(io)?;
            file.flush().map_err(io)?;
        }
        files.push(name);
    }
    Ok(files)
}

/// A workload's name becomes trace file names: it must stay one plain name inside the folder.
fn file_name_safe(name: &str) -> Result<(), Error> {
    let plain = !name.is_empty()
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | '.' | '+'));
    if plain {
        return Ok(());
    }
    Err(Error::input(format!(
        "workload name '{}' cannot name trace files: letters, digits, '-', '_', '+' and '.' \
         only, not starting with '.' (the files must stay inside --out)",
        name.escape_default()
    )))
}
