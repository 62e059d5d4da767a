//! Schedule files. CSV: header `id,src,dst,bytes,deps` (deps joined by `;`), optional `chunk`
//! (`k` or a half-open range `lo..hi`), `op` (`copy`/`reduce`), `route` (the nodes a transfer
//! passes from src to dst, joined by `;`; empty for the topology's routing) and `wait` (a
//! duration such as `2500ps`: the row is a local wait on its src, src = dst and 0 bytes, e.g. the
//! pacing ForestColl's schedules use). JSON: `{"transfers": [{"id", "src", "dst", "bytes", "deps",
//! "chunk", "op", "route", "wait"}]}`. Both are written streaming, row by row.
//!
//! A schedule that implements a collective records it, so the file alone can be validated and
//! simulated again: JSON `"collective": {"kind", "size", "chunks", "npus", "root"}` before the
//! transfers, CSV a first line `# collective: kind=all-gather size=1024 chunks=4 npus=0;1;2
//! root=0` (`chunks` counts the pieces the transfers name per NPU, which an algorithm may cut
//! finer than asked).

use std::fs::File;
use std::io::{BufReader, BufWriter, Write};
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::assembly::{Assembler, Claim, TransferIds};
use super::{Op, Schedule, Transfer, TransferIndex};
use crate::units::{parse_bytes, parse_time, Time};
use crate::Error;

/// A transfer as read from a file, before dependency ids are resolved to list positions.
pub(super) struct RawTransfer {
    pub id: u64,
    pub transfer: Transfer,
    pub deps: Vec<u64>,
    pub pieces: Option<(u32, u32)>,
    pub op: Op,
    pub route: Vec<u32>,
    pub wait: Option<Time>,
}

/// Reads a schedule from `.csv`, `.json` or `.parquet` (chosen by extension).
pub fn load_schedule_file(path: &Path) -> Result<Schedule, Error> {
    let shown = path.display().to_string();
    let file = File::open(path).map_err(|e| {
        Error::input(format!(
            "{shown}: cannot open schedule: {}",
            crate::io_words(&e)
        ))
    })?;
    let (mut schedule, claim) = match path.extension().and_then(|e| e.to_str()) {
        Some("csv") => {
            let (raw, claim) = read_csv(&shown, file)?;
            (assemble(&shown, raw)?, claim)
        }
        Some("json") => {
            let (raw, claim) = read_json(&shown, file)?;
            (assemble(&shown, raw)?, claim)
        }
        Some("parquet") => {
            crate::read_untrusted(&shown, || super::parquet::read_parquet(&shown, file))?
        }
        _ => {
            return Err(Error::input(format!(
                "{shown}: unknown schedule format; use a .csv, .json or .parquet file"
            )))
        }
    };
    schedule.collective = claim.map(|c| c.collective(&shown)).transpose()?;
    Ok(schedule)
}

fn assemble(file: &str, raw: Vec<RawTransfer>) -> Result<Schedule, Error> {
    let ids = TransferIds::of(file, raw.iter().map(|r| r.id), raw.len())?;
    let mut schedule = Assembler::new(file, ids, raw.len());
    for r in raw {
        schedule.row(
            r.id,
            r.transfer,
            r.deps.iter().copied(),
            r.pieces,
            r.op,
            &r.route,
            r.wait,
        )?;
    }
    Ok(schedule.finish())
}

fn parse_pieces(text: &str) -> Option<(u32, u32)> {
    let text = text.trim();
    match text.split_once("..") {
        Some((lo, hi)) => Some((lo.trim().parse().ok()?, hi.trim().parse().ok()?)),
        None => {
            let k: u32 = text.parse().ok()?;
            Some((k, k.checked_add(1)?))
        }
    }
}

fn parse_op(text: &str) -> Option<Op> {
    match text.trim().to_ascii_lowercase().as_str() {
        "" | "copy" => Some(Op::Copy),
        "reduce" => Some(Op::Reduce),
        _ => None,
    }
}

const REQUIRED: [&str; 5] = ["id", "src", "dst", "bytes", "deps"];
const OPTIONAL: [&str; 4] = ["chunk", "op", "route", "wait"];

fn read_csv(file: &str, reader: File) -> Result<(Vec<RawTransfer>, Option<Claim>), Error> {
    use std::io::{BufRead, Read};
    let mut reader = BufReader::with_capacity(1 << 20, reader);
    let mut first = String::new();
    reader
        .read_line(&mut first)
        .map_err(|e| Error::input(format!("{file}: {e}")))?;
    let (claim, header) = if first.starts_with('#') {
        (
            Some(Claim::parse_line(file, first.trim_end())?),
            String::new(),
        )
    } else {
        (None, first)
    };
    // Fields are trimmed as they are read: the csv crate's own trimming rebuilds every record,
    // which was a fifth of reading a million-line schedule.
    let mut csv = csv::ReaderBuilder::new().from_reader(std::io::Cursor::new(header).chain(reader));
    let headers: csv::StringRecord = csv
        .headers()
        .map_err(|e| Error::input(format!("{file}: {e}")))?
        .iter()
        .map(str::trim)
        .collect();
    if headers.iter().all(|h| h.is_empty()) {
        return Err(Error::input(format!(
            "{file}: the file is empty; a schedule CSV starts with the header \
             id,src,dst,bytes,deps"
        )));
    }
    let column = |name: &str| headers.iter().position(|h| h == name);
    for h in headers.iter() {
        if !REQUIRED.contains(&h) && !OPTIONAL.contains(&h) {
            return Err(Error::input(format!(
                "{file}: unknown column '{h}' (expected id,src,dst,bytes,deps and optionally \
                 chunk,op,route,wait)"
            )));
        }
    }
    let mut cols = [0usize; 5];
    for (slot, name) in cols.iter_mut().zip(REQUIRED) {
        *slot = column(name).ok_or_else(|| {
            Error::input(format!(
                "{file}: missing column '{name}' (header must include id,src,dst,bytes,deps)"
            ))
        })?;
    }
    let (chunk_col, op_col, route_col) = (column("chunk"), column("op"), column("route"));
    let wait_col = column("wait");
    let mut out = Vec::new();
    let mut record = csv::StringRecord::new();
    loop {
        match csv.read_record(&mut record) {
            Ok(true) => {}
            Ok(false) => break,
            Err(e) => return Err(Error::input(format!("{file}: {e}"))),
        }
        let line = record.position().map_or(0, |p| p.line());
        let field = |c: usize| record.get(c).map_or("", str::trim);
        let bad = |name: &str, why: &str| {
            Error::input(format!(
                "{file}: line {line}: field '{name}' = '{}': {why}",
                field(column(name).unwrap_or(0))
            ))
        };
        let number = |c: usize, name: &str| -> Result<u64, Error> {
            field(c)
                .parse::<u64>()
                .map_err(|_| bad(name, "expected a non-negative integer"))
        };
        let id = number(cols[0], "id")?;
        let src = number(cols[1], "src")?;
        let dst = number(cols[2], "dst")?;
        let bytes = parse_bytes(field(cols[3])).map_err(|e| bad("bytes", &e.to_string()))?;
        let deps: Vec<u64> = id_list(field(cols[4]))
            .ok_or_else(|| bad("deps", "expected transfer ids joined by ';'"))?;
        let pieces = match chunk_col.map(field).filter(|s| !s.is_empty()) {
            Some(s) => Some(parse_pieces(s).ok_or_else(|| bad("chunk", "expected k or lo..hi"))?),
            None => None,
        };
        let op = parse_op(op_col.map(field).unwrap_or(""))
            .ok_or_else(|| bad("op", "expected copy or reduce"))?;
        let npu = |v: u64, name: &str| u32::try_from(v).map_err(|_| bad(name, "NPU id too large"));
        let route: Vec<u32> = id_list(route_col.map(field).unwrap_or(""))
            .ok_or_else(|| bad("route", "expected node ids joined by ';'"))?;
        let wait = match wait_col.map(field).filter(|s| !s.is_empty()) {
            Some(s) => Some(parse_time(s).map_err(|e| bad("wait", &e.to_string()))?),
            None => None,
        };
        out.push(RawTransfer {
            id,
            transfer: Transfer {
                src: npu(src, "src")?,
                dst: npu(dst, "dst")?,
                bytes,
            },
            deps,
            pieces,
            op,
            route,
            wait,
        });
    }
    Ok((out, claim))
}

#[derive(Deserialize)]
#[serde(untagged)]
enum JsonPieces {
    One(u32),
    Range(String),
    Pair([u32; 2]),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonTransfer {
    id: u64,
    src: u32,
    dst: u32,
    bytes: u64,
    #[serde(default)]
    deps: Vec<u64>,
    #[serde(default)]
    chunk: Option<JsonPieces>,
    #[serde(default)]
    op: Option<String>,
    #[serde(default)]
    route: Vec<u32>,
    #[serde(default)]
    wait: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonSchedule {
    #[serde(default)]
    collective: Option<Claim>,
    transfers: Vec<JsonTransfer>,
}

fn read_json(file: &str, reader: File) -> Result<(Vec<RawTransfer>, Option<Claim>), Error> {
    let parsed: JsonSchedule = serde_json::from_reader(BufReader::with_capacity(1 << 20, reader))
        .map_err(|e| Error::input(format!("{file}: {e}")))?;
    let claim = parsed.collective;
    let raw = parsed
        .transfers
        .into_iter()
        .map(|t| {
            let pieces = match t.chunk {
                None => None,
                Some(JsonPieces::One(k)) => Some((k, k + 1)),
                Some(JsonPieces::Pair([lo, hi])) => Some((lo, hi)),
                Some(JsonPieces::Range(s)) => Some(parse_pieces(&s).ok_or_else(|| {
                    Error::input(format!(
                        "{file}: transfer {}: chunk '{s}' should be k or lo..hi",
                        t.id
                    ))
                })?),
            };
            let wait =
                match &t.wait {
                    Some(text) => Some(parse_time(text).map_err(|e| {
                        Error::input(format!("{file}: transfer {}: wait: {e}", t.id))
                    })?),
                    None => None,
                };
            let op = parse_op(t.op.as_deref().unwrap_or("")).ok_or_else(|| {
                Error::input(format!(
                    "{file}: transfer {}: op should be copy or reduce",
                    t.id
                ))
            })?;
            Ok(RawTransfer {
                id: t.id,
                transfer: Transfer {
                    src: t.src,
                    dst: t.dst,
                    bytes: t.bytes,
                },
                deps: t.deps,
                pieces,
                op,
                route: t.route,
                wait,
            })
        })
        .collect::<Result<Vec<_>, Error>>()?;
    Ok((raw, claim))
}

/// A wait's duration, exactly: whole picoseconds.
fn wait_text(t: Time) -> String {
    format!("{}ps", t.ps())
}

fn pieces_text(p: (u32, u32)) -> String {
    if p.1 == p.0 + 1 {
        p.0.to_string()
    } else {
        format!("{}..{}", p.0, p.1)
    }
}

fn create(path: &Path) -> Result<BufWriter<File>, Error> {
    Ok(BufWriter::with_capacity(
        1 << 20,
        File::create(path).map_err(|e| Error::io(path.display(), e))?,
    ))
}

/// Writes the schedule as CSV, one row per transfer.
pub fn write_schedule_csv(schedule: &Schedule, path: &Path) -> Result<(), Error> {
    let io = |e: std::io::Error| Error::io(path.display(), e);
    let mut w = create(path)?;
    if let Some(c) = &schedule.collective {
        writeln!(w, "{}", Claim::of(c).line()).map_err(io)?;
    }
    let extra = schedule.has_pieces();
    let routed = schedule.has_routes();
    let waits = schedule.has_waits();
    writeln!(
        w,
        "id,src,dst,bytes,deps{}{}{}",
        if extra { ",chunk,op" } else { "" },
        if routed { ",route" } else { "" },
        if waits { ",wait" } else { "" }
    )
    .map_err(io)?;
    for i in 0..schedule.len() as TransferIndex {
        let t = schedule.transfer(i);
        let deps: Vec<String> = schedule
            .deps(i)
            .iter()
            .map(|&d| schedule.id(d).to_string())
            .collect();
        write!(
            w,
            "{},{},{},{},{}",
            schedule.id(i),
            t.src,
            t.dst,
            t.bytes,
            deps.join(";")
        )
        .map_err(io)?;
        if let Some(p) = schedule.pieces(i) {
            write!(w, ",{},{}", pieces_text(p), schedule.op(i).name()).map_err(io)?;
        }
        if routed {
            let route: Vec<String> = schedule
                .route(i)
                .unwrap_or(&[])
                .iter()
                .map(u32::to_string)
                .collect();
            write!(w, ",{}", route.join(";")).map_err(io)?;
        }
        if waits {
            let wait = schedule.wait(i).map(wait_text).unwrap_or_default();
            write!(w, ",{wait}").map_err(io)?;
        }
        writeln!(w).map_err(io)?;
    }
    w.flush().map_err(io)
}

#[derive(Serialize)]
struct JsonOut<'a> {
    id: u64,
    src: u32,
    dst: u32,
    bytes: u64,
    deps: Vec<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    chunk: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    op: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    route: Option<&'a [u32]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    wait: Option<String>,
}

/// Writes the schedule as JSON, streaming one transfer object per line.
pub fn write_schedule_json(schedule: &Schedule, path: &Path) -> Result<(), Error> {
    let io = |e: std::io::Error| Error::io(path.display(), e);
    let mut w = create(path)?;
    write!(w, "{{").map_err(io)?;
    if let Some(c) = &schedule.collective {
        write!(w, "\"collective\": ").map_err(io)?;
        serde_json::to_writer(&mut w, &Claim::of(c))
            .map_err(|e| Error::io(path.display(), e.into()))?;
        writeln!(w, ",").map_err(io)?;
    }
    writeln!(w, "\"transfers\": [").map_err(io)?;
    for i in 0..schedule.len() as TransferIndex {
        let t = schedule.transfer(i);
        let row = JsonOut {
            id: schedule.id(i),
            src: t.src,
            dst: t.dst,
            bytes: t.bytes,
            deps: schedule.deps(i).iter().map(|&d| schedule.id(d)).collect(),
            chunk: schedule.pieces(i).map(pieces_text),
            op: schedule.pieces(i).map(|_| schedule.op(i).name()),
            route: schedule.route(i),
            wait: schedule.wait(i).map(wait_text),
        };
        serde_json::to_writer(&mut w, &row).map_err(|e| Error::io(path.display(), e.into()))?;
        writeln!(
            w,
            "{}",
            if i as usize + 1 < schedule.len() {
                ","
            } else {
                ""
            }
        )
        .map_err(io)?;
    }
    writeln!(w, "]}}").map_err(io)?;
    w.flush().map_err(io)
}

/// Ids joined by ';' (the `deps` and `route` cells), blanks ignored; None if one is not a number.
fn id_list<T: std::str::FromStr>(cell: &str) -> Option<Vec<T>> {
    cell.split(';')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collective::{Collective, CollectiveKind};

    fn sample() -> Schedule {
        let mut s = Schedule::new();
        s.push_data(
            Transfer {
                src: 0,
                dst: 1,
                bytes: 10,
            },
            &[],
            (0, 1),
            Op::Copy,
        );
        s.push_data(
            Transfer {
                src: 1,
                dst: 2,
                bytes: 20,
            },
            &[0],
            (0, 2),
            Op::Reduce,
        );
        s.set_route(1, &[1, 4, 2]);
        s.push_wait(2, Time::from_ps(2_500_001), &[1]);
        s.set_id(0, 5);
        s.set_id(1, 9);
        s.collective =
            Some(Collective::new(CollectiveKind::AllGather, vec![0, 1, 2], 30, 1, None).unwrap());
        s
    }

    #[test]
    fn csv_json_and_parquet_round_trip() {
        let dir = std::env::temp_dir().join(format!("collsim-io-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for name in ["s.csv", "s.json", "s.parquet"] {
            let path = dir.join(name);
            let s = sample();
            match name {
                "s.csv" => write_schedule_csv(&s, &path).unwrap(),
                "s.json" => write_schedule_json(&s, &path).unwrap(),
                _ => super::super::write_schedule_parquet(&s, &path).unwrap(),
            }
            let back = load_schedule_file(&path).unwrap();
            assert_eq!(back.collective, s.collective);
            assert!(back.transfers().eq(s.transfers()));
            assert_eq!(back.deps(1), &[0]);
            assert_eq!(back.id(1), 9);
            assert_eq!(back.pieces(1), Some((0, 2)));
            assert_eq!(back.op(1), Op::Reduce);
            assert_eq!(back.route(0), None);
            assert_eq!(back.route(1), Some(&[1, 4, 2][..]));
            assert_eq!(back.wait(1), None);
            assert_eq!(back.wait(2), Some(Time::from_ps(2_500_001)));
            assert_eq!(back.deps(2), &[1]);
        }
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn piece_ranges_parse() {
        assert_eq!(parse_pieces("4"), Some((4, 5)));
        assert_eq!(parse_pieces("2..6"), Some((2, 6)));
        assert_eq!(parse_pieces("x"), None);
    }
}
