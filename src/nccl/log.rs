//! Measured nccl-tests results: the log `all_reduce_perf` and friends print (the out-of-place
//! columns of each data row), or a Markdown table: `size | time | algbw | busbw` rows, or any
//! columns its header names, in Markdown or CSV (a size, and a time, algbw or busbw, the first
//! of each: nccl-tests' out-of-place ones; sizes in bytes or as `1M`, `1MiB`; the missing
//! figures follow from the others; an operation column picks the rows). A log holding several
//! tests marks each with its name (`# ... all_gather_perf ...`, `## all_gather, 8 ranks`); rows
//! belong to the last name seen.

use std::path::Path;

use crate::collective::CollectiveKind;
use crate::Error;

/// nccl-tests' names of the operations, as `OP` takes them.
pub const OPS: [&str; 6] = [
    "all_reduce",
    "all_gather",
    "reduce_scatter",
    "alltoall",
    "broadcast",
    "reduce",
];

/// nccl-tests' data types as its rows print them (`test_typenames`), each with the other names
/// `-d` takes for it and its bytes.
const TYPES: [(&str, &[&str], u64); 12] = [
    ("int8", &["char"], 1),
    ("uint8", &[], 1),
    ("int32", &["int"], 4),
    ("uint32", &[], 4),
    ("int64", &[], 8),
    ("uint64", &[], 8),
    ("half", &["float16"], 2),
    ("float", &["float32"], 4),
    ("double", &["float64"], 8),
    ("bfloat16", &[], 2),
    ("f8e4m3", &[], 1),
    ("f8e5m2", &[], 1),
];

/// nccl-tests' printed names of its data types, for error messages: `int8, ... or f8e5m2`.
pub fn datatype_names() -> String {
    let names: Vec<&str> = TYPES.iter().map(|t| t.0).collect();
    let (last, rest) = names.split_last().expect("a type");
    format!("{} or {last}", rest.join(", "))
}

/// The data type `-d` names: the name nccl-tests prints in its rows, and its bytes.
pub fn datatype(name: &str) -> Option<(&'static str, u64)> {
    TYPES
        .iter()
        .find(|(printed, others, _)| *printed == name || others.contains(&name))
        .map(|&(printed, _, bytes)| (printed, bytes))
}

/// The collective of an nccl-tests operation name.
pub fn kind(op: &str) -> Result<CollectiveKind, Error> {
    Ok(match op {
        "all_reduce" => CollectiveKind::AllReduce,
        "all_gather" => CollectiveKind::AllGather,
        "reduce_scatter" => CollectiveKind::ReduceScatter,
        "alltoall" => CollectiveKind::AllToAll,
        "broadcast" => CollectiveKind::Broadcast,
        "reduce" => CollectiveKind::Reduce,
        _ => {
            return Err(Error::input(format!(
                "unknown nccl-tests operation '{op}': expected one of {}",
                OPS.join(", ")
            )))
        }
    })
}

/// The operations a log names in its headers, in order (empty when it names none).
pub fn ops(path: &Path) -> Result<Vec<&'static str>, Error> {
    let text = crate::read_text(path, "cannot read the log")?;
    let mut found = Vec::new();
    for line in text.lines().map(str::trim) {
        if let Some(op) = is_header(line).then(|| named_op(line)).flatten() {
            if !found.contains(&op) {
                found.push(op);
            }
        }
    }
    Ok(found)
}

/// How a measured log says it was run, beside its rows.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Header {
    /// GPUs each thread drove ([`gpus_per_thread_in`]).
    pub gpus_per_thread: Option<u32>,
    /// The GPU its first rank ran on ([`device_name_in`]).
    pub device: Option<String>,
}

/// The log at `path`'s [`Header`], its text read once.
pub fn header(path: &Path) -> Result<Header, Error> {
    let text = crate::read_text(path, "cannot read the log")?;
    Ok(Header {
        gpus_per_thread: gpus_per_thread_in(&text),
        device: device_name_in(&text),
    })
}

/// GPUs each thread drove when the log was taken, as its own text says: nccl-tests' header
/// (`# nThread 1 nGpus 8 ...`) or the command quoted with it (`all_reduce_perf ... -g 8`); `None`
/// when it says neither.
fn gpus_per_thread_in(text: &str) -> Option<u32> {
    for line in text.lines() {
        let words: Vec<&str> = line
            .split(|c: char| c.is_whitespace() || "()[],;:`'\"".contains(c))
            .filter(|w| !w.is_empty())
            .collect();
        let flag = if line.contains("nGpus") {
            "nGpus"
        } else if line.contains("_perf") {
            "-g"
        } else {
            continue;
        };
        let value = words
            .windows(2)
            .find(|pair| pair[0] == flag)
            .and_then(|pair| pair[1].parse::<u32>().ok());
        if value.is_some() {
            return value;
        }
    }
    None
}

/// The GPU a raw nccl-tests log says its first rank ran on: the name after the bus id of its
/// device list (`#  Rank  0 Group  0 Pid 1887 on host device  0 [0x8d] NVIDIA H100 80GB HBM3`);
/// None when the log lists no devices (a table copied out of one).
fn device_name_in(text: &str) -> Option<String> {
    text.lines().find_map(|line| {
        let listed = line.trim_start_matches(|c: char| c == '#' || c.is_whitespace());
        if !listed.starts_with("Rank") {
            return None;
        }
        let device = &line[line.find(" device ")?..];
        let name = device[device.find(']')? + 1..].trim();
        (!name.is_empty()).then(|| name.to_string())
    })
}

/// One measured size.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Row {
    pub size: u64,
    pub time_us: f64,
    pub algbw: f64,
    pub busbw: f64,
    /// Whether the row's redop column names a reduction (`sum`, `max`, ...) or `none`; `None`
    /// where the row has no such column (a Markdown table).
    pub reduces: Option<bool>,
    /// The data type the row names (nccl-tests' name), where it names one.
    pub datatype: Option<&'static str>,
    /// 1-based line in the log.
    pub line: usize,
}

impl Row {
    /// The one of time and algbw a table left out (NaN), from the other: algbw = size / time.
    fn complete(&mut self) {
        let size = self.size as f64;
        if self.time_us.is_nan() && self.algbw > 0.0 {
            self.time_us = size / (self.algbw * 1e3);
        } else if self.algbw.is_nan() && self.time_us > 0.0 {
            self.algbw = size / (self.time_us * 1e3);
        }
    }
}

/// [`read`], refusing a log that ran on another number of ranks than the `gpus` it is to be
/// held against (as [`ranks`] reads it off the log's own bandwidths).
pub fn read_for(path: &Path, op: &str, datatype: &str, gpus: u32) -> Result<Vec<Row>, Error> {
    let mut rows = read(path, op, datatype)?;
    holds_op(&rows, op, path)?;
    // A table without algbw or busbw: the missing one by nccl-tests' factor at these ranks.
    let factor = kind(op)?.busbw_factor(gpus);
    rows.retain_mut(|r| {
        if r.busbw.is_nan() {
            r.busbw = r.algbw * factor;
        }
        if r.algbw.is_nan() {
            r.algbw = r.busbw / factor;
            r.complete();
        }
        // A busbw of 0.00 with no time column says nothing of the time.
        r.time_us.is_finite()
    });
    if rows.is_empty() {
        return Err(Error::input(format!(
            "{}: no {op} row gives a time (a time or algbw column, or a busbw above 0)",
            path.display()
        )));
    }
    match ranks(&rows, kind(op)?) {
        Some(n) if n != gpus => {
            let part = if n < gpus {
                format!(" (or --gpus {n}, the first {n} GPUs of one box)")
            } else {
                String::new()
            };
            Err(Error::input(format!(
                "{}: its {op} busbw / algbw ratio says {n} ranks ran it, but the topology has \
                 {gpus} GPUs: hold it against a system of {n} GPUs{part}",
                path.display()
            )))
        }
        _ => Ok(rows),
    }
}

/// Refuses rows that cannot be `op`'s, for logs that do not name their operation: a row whose
/// redop column names a reduction where `op` has none (all_gather, alltoall and broadcast print
/// `none`) or `none` where it reduces, or a busbw / algbw ratio outside what nccl-tests' factor
/// gives `op` at any rank count (all-reduce 2(n-1)/n, from 1 to 2; all-gather, reduce-scatter
/// and all-to-all (n-1)/n, from 1/2 to 1; broadcast and reduce 1).
fn holds_op(rows: &[Row], op: &str, path: &Path) -> Result<(), Error> {
    let kind = kind(op)?;
    let reducing = matches!(
        kind,
        CollectiveKind::AllReduce | CollectiveKind::ReduceScatter | CollectiveKind::Reduce
    );
    if let Some(row) = rows
        .iter()
        .find(|r| r.reduces.is_some_and(|r| r != reducing))
    {
        let named = if reducing { "none" } else { "a reduction" };
        return Err(Error::input(format!(
            "{}:{}: the redop column holds {named}, which no {op} row does: the log holds \
             another operation",
            path.display(),
            row.line
        )));
    }
    let Some((row, ratio, blur)) = bus_ratio(rows) else {
        return Ok(());
    };
    let (low, high) = (kind.busbw_factor(2), kind.busbw_factor(u32::MAX));
    if ratio < low - blur || ratio > high + blur {
        return Err(Error::input(format!(
            "{}:{}: busbw / algbw is {ratio:.3}, which no {op} gives (nccl-tests' factor lies \
             between {low} and {high:.0}): the log holds another operation",
            path.display(),
            row.line
        )));
    }
    Ok(())
}

/// nccl-tests' busbw / algbw at the row of the highest algbw, and how far its two printed
/// decimals leave that ratio uncertain; None where no algbw reaches 1 GB/s (too few digits).
fn bus_ratio(rows: &[Row]) -> Option<(&Row, f64, f64)> {
    let row = rows
        .iter()
        .filter(|r| r.algbw.is_finite() && r.busbw.is_finite())
        .max_by(|a, b| a.algbw.total_cmp(&b.algbw))
        .filter(|r| r.algbw >= 1.0)?;
    let ratio = row.busbw / row.algbw;
    let blur = 0.005 / row.algbw + 0.005 * ratio / row.algbw + 0.005 / row.busbw.max(1e-9);
    Some((row, ratio, blur))
}

/// How many ranks ran the measured `rows` of `kind`, as nccl-tests' own busbw / algbw ratio
/// gives it (its bus-bandwidth factor of the rank count, [`CollectiveKind::busbw_factor`]),
/// read off the row of the highest algbw; None where the ratio does not tell (broadcast and
/// reduce, whose factor is 1, bandwidths too small or ranks too many for the printed digits).
pub fn ranks(rows: &[Row], kind: CollectiveKind) -> Option<u32> {
    let (_, ratio, blur) = bus_ratio(rows)?;
    let (n, off) = (2..=1u32 << 16)
        .map(|n| (n, (kind.busbw_factor(n) - ratio).abs()))
        .min_by(|a, b| a.1.total_cmp(&b.1))?;
    let gap = |m: u32| (kind.busbw_factor(m) - kind.busbw_factor(n)).abs();
    let nearest_other = gap(n - 1).min(gap(n + 1));
    (off <= blur && nearest_other > 2.0 * blur).then_some(n)
}

/// The operation a header line names, if any (`all_reduce_perf`, `## all_gather, ...`).
fn named_op(line: &str) -> Option<&'static str> {
    let words = line
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .map(|w| w.trim_end_matches("_perf").to_ascii_lowercase());
    for w in words {
        if let Some(op) = OPS.iter().find(|op| **op == w) {
            return Some(op);
        }
    }
    None
}

/// The time unit a header declares: `(us)`, `time_us`, `(ms)`, `time_ms`.
fn time_unit(line: &str) -> Option<f64> {
    let l = line.to_ascii_lowercase();
    if l.contains("(us)") || l.contains("time_us") {
        Some(1.0)
    } else if l.contains("(ms)") || l.contains("time_ms") {
        Some(1000.0)
    } else {
        None
    }
}

/// Reads the rows of `op` from the log at `path`: of the data type `datatype` (nccl-tests'
/// name) where the log names types and holds that one (a `-d all` log holds a row of every type
/// at each size), else the first row of each size. Errors name the file and line: a data row
/// cut short, no rows at all, a log whose tests do not include `op`, or time units that change.
pub fn read(path: &Path, op: &str, datatype: &str) -> Result<Vec<Row>, Error> {
    let shown = path.display();
    let text = crate::read_text(path, "cannot read the log")?;
    let mut rows = Vec::new();
    let mut current: Option<&'static str> = None;
    let mut seen_ops: Vec<&'static str> = Vec::new();
    let mut unit: Option<(f64, usize)> = None;
    let mut has_root = false;
    let mut columns: Option<Columns> = None;
    for (i, raw) in text.lines().enumerate() {
        let line_no = i + 1;
        let line = untagged(raw.trim());
        if line.is_empty() {
            continue;
        }
        let named_row = columns.is_some_and(|c| c.is_row(line));
        if !named_row && is_header(line) {
            if is_table(line) {
                columns = Columns::of_header(line);
            }
            if let Some(found) = named_op(line) {
                current = Some(found);
                if !seen_ops.contains(&found) {
                    seen_ops.push(found);
                }
            }
            if line.contains("root") {
                has_root = true;
            }
            if let Some(u) = time_unit(line) {
                if let Some((before, at)) = unit {
                    if before != u {
                        return Err(Error::input(format!(
                            "{shown}:{line_no}: time unit changes (line {at} gave another): \
                             mixed units in one log"
                        )));
                    }
                }
                unit = Some((u, line_no));
            }
            continue;
        }
        if current.is_some_and(|c| c != op) || columns.is_none() && is_csv(line) {
            continue;
        }
        let row = match columns {
            Some(c) => c.parse(line, op),
            None => parse_row(line, has_root),
        }
        .map_err(|why| Error::input(format!("{shown}:{line_no}: {why}: '{}'", shorten(line))))?;
        if let Some(mut row) = row {
            row.line = line_no;
            row.time_us *= unit.map_or(1.0, |u| u.0);
            row.complete();
            if !rows
                .iter()
                .any(|r: &Row| r.size == row.size && r.datatype == row.datatype)
            {
                rows.push(row);
            }
        }
    }
    if rows.iter().any(|r| r.datatype == Some(datatype)) {
        rows.retain(|r| r.datatype == Some(datatype));
    }
    let mut seen = std::collections::HashSet::new();
    rows.retain(|r| seen.insert(r.size));
    if rows.is_empty() {
        if !seen_ops.is_empty() && !seen_ops.contains(&op) {
            return Err(Error::input(format!(
                "{shown}: the log holds {} results, not {op}",
                seen_ops.join(", ")
            )));
        }
        return Err(Error::input(format!(
            "{shown}: no nccl-tests rows (size, count, type, ..., time, algbw, busbw) found for {op}"
        )));
    }
    Ok(rows)
}

/// Where a Markdown table's header names the figures a row is read by, for tables that name
/// their columns (nccl-tests' own, the count and type among them; in- and out-of-place pairs).
#[derive(Clone, Copy, Debug)]
struct Columns {
    size: usize,
    time: Option<usize>,
    algbw: Option<usize>,
    busbw: Option<usize>,
    redop: Option<usize>,
    datatype: Option<usize>,
    /// The operation of each row, in a table of several.
    op: Option<usize>,
}

impl Columns {
    /// The columns a Markdown or CSV header line names: a size and an algbw or busbw at least;
    /// None otherwise (Markdown rows are then read as `size | time | algbw | busbw`).
    fn of_header(line: &str) -> Option<Columns> {
        let cells: Vec<String> = fields(line)
            .iter()
            .map(|c| c.to_ascii_lowercase().replace([' ', '_', '-'], ""))
            .collect();
        let find = |words: &[&str]| {
            cells
                .iter()
                .position(|c| words.iter().any(|w| c.contains(w)))
        };
        let columns = Columns {
            size: find(&["size", "bytes"])?,
            time: find(&["time"]),
            algbw: find(&["algbw", "algorithmbandwidth"]),
            busbw: find(&["busbw", "busbandwidth"]),
            redop: find(&["redop"]),
            datatype: cells.iter().position(|c| c == "type" || c == "datatype"),
            op: cells
                .iter()
                .position(|c| ["op", "operation", "collective", "coll"].contains(&c.as_str())),
        };
        (columns.algbw.is_some() || columns.busbw.is_some()).then_some(columns)
    }

    /// Whether `line` is a row of this table: its size cell holds a size.
    fn is_row(&self, line: &str) -> bool {
        is_table(line)
            && fields(line)
                .get(self.size)
                .and_then(|c| size_of(c))
                .is_some()
    }

    /// A row's figures by column, NaN where the table has none: [`Row::complete`] derives the
    /// time or algbw from the other once the time is in microseconds, [`read_for`] both from
    /// busbw (it knows the ranks).
    fn parse(&self, line: &str, op: &str) -> Result<Option<Row>, String> {
        let f = fields(line);
        let Some(size) = f.get(self.size).and_then(|c| size_of(c)) else {
            return Ok(None);
        };
        if let Some(i) = self.op {
            if f.get(i).and_then(|c| named_op(c)) != Some(op) {
                return Ok(None);
            }
        }
        let value = |column: Option<usize>, name: &str| -> Result<Option<f64>, String> {
            let Some(i) = column else { return Ok(None) };
            f.get(i)
                .and_then(|c| c.split_whitespace().next())
                .and_then(|c| c.parse::<f64>().ok())
                .filter(|v| v.is_finite() && *v >= 0.0)
                .map(Some)
                .ok_or_else(|| format!("a data row without its {name} (truncated?)"))
        };
        let time = value(self.time, "time")?;
        let algbw = value(self.algbw, "algbw")?;
        let busbw = value(self.busbw, "busbw")?;
        if time.is_some_and(|t| t <= 0.0) {
            return Err("a data row with a time of 0".into());
        }
        Ok(Some(Row {
            size,
            time_us: time.unwrap_or(f64::NAN),
            algbw: algbw.unwrap_or(f64::NAN),
            busbw: busbw.unwrap_or(f64::NAN),
            reduces: self
                .redop
                .and_then(|i| f.get(i))
                .map(|r| !r.eq_ignore_ascii_case("none")),
            datatype: self
                .datatype
                .and_then(|i| f.get(i))
                .and_then(|t| datatype(t))
                .map(|t| t.0),
            line: 0,
        }))
    }
}

/// A size cell: bytes, with nccl-tests' `K`/`M`/`G` or collsim's units (`1M`, `1MiB`, `1 MiB`);
/// a label after it (`1024 (1K)`) is ignored.
fn size_of(cell: &str) -> Option<u64> {
    let mut words = cell.split_whitespace();
    let first = words.next()?;
    if first.bytes().all(|b| b.is_ascii_digit()) {
        if let Some(unit) = words
            .next()
            .filter(|w| w.chars().all(|c| c.is_ascii_alphabetic()))
        {
            return crate::units::parse_nccl_bytes(&format!("{first}{unit}")).ok();
        }
    }
    crate::units::parse_nccl_bytes(first).ok()
}

/// A line without the rank tag a launcher put before it: Open MPI's `--tag-output`
/// (`[1,0]<stdout>:`), a bracketed rank (`[0] `) or Slurm's `srun --label` (`0: `).
fn untagged(line: &str) -> &str {
    let rank = |tag: &str| !tag.is_empty() && tag.chars().all(|c| c.is_ascii_digit() || c == ',');
    let rest = if let Some((tag, rest)) = line.strip_prefix('[').and_then(|l| l.split_once(']')) {
        if !rank(tag) {
            return line;
        }
        let rest = rest
            .strip_prefix("<stdout>")
            .or_else(|| rest.strip_prefix("<stderr>"))
            .unwrap_or(rest);
        rest.strip_prefix(':').unwrap_or(rest)
    } else {
        match line.split_once(": ") {
            Some((tag, rest)) if rank(tag) && !tag.contains(',') => rest,
            _ => return line,
        }
    };
    rest.trim()
}

fn shorten(line: &str) -> String {
    let s: String = line.chars().take(60).collect();
    s.escape_debug().to_string()
}

/// A comment or a line of words that is not a data row.
fn is_header(line: &str) -> bool {
    line.starts_with('#') || line.chars().any(|c| c.is_ascii_alphabetic()) && !looks_like_row(line)
}

/// A line whose first field is a whole number: a data row (nccl-tests' or a Markdown table's).
fn looks_like_row(line: &str) -> bool {
    fields(line)
        .first()
        .and_then(|f| f.split_whitespace().next())
        .is_some_and(|f| f.chars().all(|c| c.is_ascii_digit()))
}

/// A row or header of a Markdown or CSV table.
fn is_table(line: &str) -> bool {
    line.starts_with('|') || is_csv(line)
}

/// A line of comma-separated values (nccl-tests' own lines hold no commas).
fn is_csv(line: &str) -> bool {
    !line.starts_with('#') && !line.starts_with('|') && line.contains(',')
}

fn fields(line: &str) -> Vec<&str> {
    if line.starts_with('|') {
        line.trim_matches('|').split('|').map(str::trim).collect()
    } else if is_csv(line) {
        line.split(',')
            .map(|f| f.trim().trim_matches('"'))
            .collect()
    } else {
        line.split_whitespace().collect()
    }
}

/// A data row: Markdown `size | time | algbw | busbw` (a size label may follow the size), or
/// nccl-tests' `size count type redop [root] time algbw busbw #wrong ...`.
fn parse_row(line: &str, has_root: bool) -> Result<Option<Row>, String> {
    let f = fields(line);
    let size: u64 = match f.first().and_then(|s| s.split_whitespace().next()) {
        Some(s) => match s.parse() {
            Ok(v) => v,
            Err(_) if !s.is_empty() && s.chars().all(|c| c.is_ascii_digit()) => {
                return Err(format!("a size of {s} bytes, more than 2^64"));
            }
            Err(_) => return Ok(None),
        },
        None => return Ok(None),
    };
    let number = |s: &str| s.parse::<f64>().ok().filter(|v| v.is_finite() && *v >= 0.0);
    // nccl-tests' fields after the count: the type and the reduction (`none` where there is
    // none), then (the root,) time, algbw and busbw.
    let after_count: Vec<&str> = f
        .iter()
        .skip(1)
        .skip_while(|s| s.chars().all(|c| c.is_ascii_digit()))
        .copied()
        .collect();
    let named = after_count
        .iter()
        .take_while(|s| s.chars().any(|c| c.is_ascii_alphabetic()))
        .count();
    let (reduces, datatype) = match (line.starts_with('|'), &after_count[..named]) {
        (false, [kind, redop]) => (Some(*redop != "none"), datatype(kind).map(|t| t.0)),
        _ => (None, None),
    };
    let values: Vec<f64> = if line.starts_with('|') {
        f[1..].iter().filter_map(|s| number(s)).collect()
    } else {
        let rest = &after_count[named..];
        let rest = if has_root && rest.first().is_some_and(|s| s.parse::<i64>().is_ok()) {
            &rest[1..]
        } else {
            rest
        };
        let mut values = Vec::with_capacity(3);
        for (name, text) in ["time", "algbw", "busbw"].into_iter().zip(rest) {
            let value = number(text)
                .ok_or_else(|| format!("{name} '{text}' is not a non-negative number"))?;
            values.push(value);
        }
        values
    };
    if values.len() < 3 {
        return Err("a data row without time, algbw and busbw (truncated?)".into());
    }
    if values[0] <= 0.0 {
        return Err("a data row with a time of 0".into());
    }
    Ok(Some(Row {
        size,
        time_us: values[0],
        algbw: values[1],
        busbw: values[2],
        reduces,
        datatype,
        line: 0,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(size: u64, algbw: f64, busbw: f64) -> Row {
        Row {
            size,
            time_us: size as f64 / algbw / 1e3,
            algbw,
            busbw,
            reduces: None,
            datatype: None,
            line: 1,
        }
    }

    /// A log that does not name its operation is still refused for another one's: by its
    /// redop column (`sum` in an all-gather's rows, `none` in an all-reduce's), or, in a
    /// Markdown table without one, by a busbw / algbw ratio no rank count gives the operation
    /// (an all-reduce's 1.75 as an all-gather's, whose ratio stays below 1); each error names
    /// the file and the line.
    #[test]
    fn rows_of_another_operation_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, text: &str| {
            let path = dir.path().join(name);
            std::fs::write(&path, text).unwrap();
            path
        };
        let header =
            "#       size         count      type   redop    root     time   algbw   busbw \
                      #wrong     time   algbw   busbw #wrong\n#        (B)    (elements)      \
                      (us)  (GB/s)  (GB/s)\n";
        let reduce = write(
            "all_reduce.log",
            &format!(
                "{header}     1048576        262144     float     sum      -1    50.70   20.68   \
                 36.19      0    50.12   20.92   36.61      0\n"
            ),
        );
        let gather = write(
            "all_gather.log",
            &format!(
                "{header}     1048576         32768     float    none      -1    36.72   28.55   \
                 24.98      0    36.10   29.05   25.42      0\n"
            ),
        );
        let table = write(
            "table.md",
            "| size_B | time_us | algbw_GBps | busbw_GBps |\n|---:|---:|---:|---:|\n\
             | 1048576 | 50.70 | 20.68 | 36.19 |\n",
        );
        assert!(read_for(&reduce, "all_reduce", "float", 8).is_ok());
        assert!(read_for(&gather, "all_gather", "float", 8).is_ok());
        assert!(read_for(&table, "all_reduce", "float", 8).is_ok());
        for (path, op, why) in [
            (&reduce, "all_gather", "redop column holds a reduction"),
            (&reduce, "broadcast", "redop column holds a reduction"),
            (&gather, "all_reduce", "redop column holds none"),
            (&gather, "reduce_scatter", "redop column holds none"),
            (&table, "all_gather", "busbw / algbw is 1.750"),
            (&table, "broadcast", "busbw / algbw is 1.750"),
        ] {
            let err = read_for(path, op, "float", 8).unwrap_err().to_string();
            let at = format!("{}:", path.display());
            assert!(err.contains(&at) && err.contains(why), "{op}: {err}");
        }
    }

    /// The rank count is nccl-tests' own busbw factor read backwards: the DGX A100's 8 GPUs
    /// (busbw 231.58 of algbw 132.33, 2 x 7/8), the two B200 boxes' 16 (308.03 of 328.57,
    /// 15/16), from the row of the highest algbw; nothing from a broadcast (factor 1) or from
    /// bandwidths printed with too few digits to tell.
    #[test]
    fn the_rank_count_is_read_off_the_bandwidths() {
        let small = row(1 << 10, 0.03, 0.05);
        let a100 = [small, row(1 << 33, 132.33, 231.58)];
        assert_eq!(ranks(&a100, CollectiveKind::AllReduce), Some(8));
        let b200 = [row(1 << 34, 328.57, 308.03), row(1 << 20, 13.51, 12.67)];
        assert_eq!(ranks(&b200, CollectiveKind::AllGather), Some(16));
        assert_eq!(ranks(&b200, CollectiveKind::Broadcast), None);
        assert_eq!(ranks(&[small], CollectiveKind::AllReduce), None);
    }

    /// -g as the log says it ran: nccl-tests' header, else the quoted command; a placeholder
    /// or no mention says nothing.
    #[test]
    fn gpus_per_thread_as_the_log_ran() {
        let header = "# nThread 1 nGpus 8 minBytes 8 maxBytes 8589934592 step: 2(factor)";
        assert_eq!(gpus_per_thread_in(header), Some(8));
        let command = "- Command: all_reduce_perf -b 8 -e 8G -f 2 -g 1 (16 ranks).";
        assert_eq!(gpus_per_thread_in(command), Some(1));
        let prose = "single process all_reduce_perf over all local GPUs (-g 8), 1K..8G.";
        assert_eq!(gpus_per_thread_in(prose), Some(8));
        let placeholder = "./all_reduce_perf -b 8 -e 128 -f 2 -n 100 -g GPU_NUM";
        assert_eq!(gpus_per_thread_in(placeholder), None);
        assert_eq!(
            gpus_per_thread_in("| 1024 | 44.8 | 0.02 | 0.04 |\n-g 8"),
            None
        );
    }

    /// The device list's first GPU, in nccl-tests' layouts old and new; nothing without one.
    #[test]
    fn the_device_is_read_off_the_rank_list() {
        let new = "# Using devices\n#  Rank  0 Group  0 Pid   1887 on   worker-1 device  0 \
                   [0x8d] NVIDIA H100 80GB HBM3\n#  Rank  1 Group  0 Pid 1888 on worker-1 \
                   device  1 [0x91] NVIDIA H100 80GB HBM3";
        assert_eq!(
            device_name_in(new).as_deref(),
            Some("NVIDIA H100 80GB HBM3")
        );
        let old = "#   Rank  0 Pid  14926 on v100-gpu-1 device  0 [0x00] Tesla V100-PCIE-16GB";
        assert_eq!(device_name_in(old).as_deref(), Some("Tesla V100-PCIE-16GB"));
        assert_eq!(device_name_in(LOG), None);
        assert_eq!(device_name_in("# Rank 0 device 0 [0x00]"), None);
    }

    /// A temporary file holding `text`, removed when dropped.
    fn write(text: &str) -> tempfile::NamedTempFile {
        let f = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(f.path(), text).unwrap();
        f
    }

    const LOG: &str = "# nThread 1 nGpus 1 minBytes 8 maxBytes 8589934592 step: 2(factor)
# Using devices
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
           8             2     float     sum      -1    36.47    0.00    0.00      0    35.21    0.00    0.00      0
     1048576        262144     float     sum      -1    85.58   12.25   22.97      0    84.00   12.48   23.40      0
# Avg bus bandwidth    : 66.4834
";

    #[test]
    fn reads_nccl_tests_output() {
        let f = write(LOG);
        let rows = read(f.path(), "all_reduce", "float").unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[1].size, 1 << 20);
        assert_eq!((rows[1].time_us, rows[1].busbw), (85.58, 22.97));
        assert_eq!(rows[1].line, 7);
    }

    /// A `-d all` log holds a row of every type at each size: the type asked for is read
    /// (`-d`'s, by any of its names), and where the log has none of it, the first of each size.
    #[test]
    fn reads_the_rows_of_the_type_asked_for() {
        let all = write(
            "# nThread 1 nGpus 1 minBytes 1048576 maxBytes 2097152 step: 2(factor)
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
     1048576       1048576      int8     sum      -1    90.00   11.65   20.39      0    90.00   11.65   20.39      0
     1048576        262144     float     sum      -1    85.58   12.25   22.97      0    84.00   12.48   23.40      0
     2097152       2097152      int8     sum      -1   150.00   13.98   24.47      0   150.00   13.98   24.47      0
     2097152        524288     float     sum      -1   140.00   14.98   26.21      0   140.00   14.98   26.21      0
",
        );
        let times = |datatype| -> Vec<f64> {
            let name = super::datatype(datatype).unwrap().0;
            read(all.path(), "all_reduce", name)
                .unwrap()
                .iter()
                .map(|r| r.time_us)
                .collect()
        };
        assert_eq!(times("float"), [85.58, 140.0]);
        assert_eq!(times("float32"), [85.58, 140.0]);
        assert_eq!(times("char"), [90.0, 150.0]);
        assert_eq!(times("half"), [90.0, 150.0]);
    }

    /// Rows a launcher tagged with their rank read as the bare log.
    #[test]
    fn reads_rank_tagged_output() {
        let bare = read(write(LOG).path(), "all_reduce", "float").unwrap();
        for tag in ["[1,0]<stdout>:", "[0] ", "0: "] {
            let tagged: String = LOG.lines().map(|l| format!("{tag}{l}\n")).collect();
            let rows = read(write(&tagged).path(), "all_reduce", "float").unwrap();
            assert_eq!(rows, bare, "{tag}");
        }
        assert_eq!(untagged("[host:12] x"), "[host:12] x");
        assert_eq!(untagged("1048576 262144 float"), "1048576 262144 float");
    }

    #[test]
    fn reads_markdown_sections() {
        let f = write("## all_gather, 8 ranks\n| size_B | time_us | algbw_GBps | busbw_GBps |\n|---:|---:|---:|---:|\n| 128 | 16.12 | 0.01 | 0.01 |\n## alltoall\n| size_B | time_us | a | b |\n| 128 | 11.02 | 0.01 | 0.01 |\n");
        let rows = read(f.path(), "all_gather", "float").unwrap();
        assert_eq!((rows.len(), rows[0].time_us), (1, 16.12));
        assert_eq!(
            read(f.path(), "alltoall", "float").unwrap()[0].time_us,
            11.02
        );
        let e = read(f.path(), "all_reduce", "float")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("holds all_gather, alltoall results, not all_reduce"),
            "{e}"
        );
    }

    /// Tables that name their columns are read by the names: nccl-tests' count and type are not
    /// taken for the time, the out-of-place figures come first, sizes may carry units, and a
    /// table of bus bandwidths alone gives times by nccl-tests' factor at the system's ranks.
    #[test]
    fn reads_tables_by_their_column_names() {
        let full = write("| size (B) | count (elements) | type | redop | root | time (us) | algbw (GB/s) | busbw (GB/s) | #wrong |\n|---|---|---|---|---|---|---|---|---|\n| 1048576 | 262144 | float | sum | -1 | 30.5 | 34.38 | 60.16 | 0 |\n");
        let row = read(full.path(), "all_reduce", "float").unwrap()[0];
        assert_eq!((row.size, row.time_us, row.busbw), (1 << 20, 30.5, 60.16));
        assert_eq!(row.reduces, Some(true));
        let pairs = write("| Size | in-place time_us | in-place busbw |\n|---|---|---|\n| 16M | 117.2 | 251.4 |\n| 1 GiB | 4012 | 468.3 |\n");
        let rows = read(pairs.path(), "all_reduce", "float").unwrap();
        assert_eq!(rows[0].size, 16 << 20);
        assert_eq!((rows[1].size, rows[1].time_us), (1 << 30, 4012.0));
        let out_first = write("| size_B | out-of-place time | out-of-place busbw | in-place time | in-place busbw |\n| 1024 (1K) | 40.0 | 0.04 | 39.0 | 0.05 |\n");
        assert_eq!(
            read(out_first.path(), "all_reduce", "float").unwrap()[0].time_us,
            40.0
        );
        // busbw alone: 8 ranks' all-reduce factor 2 x 7/8 gives algbw 100 GB/s, so 10 us for
        // 1 MB; the 0.00 row says nothing and is left out.
        let bus =
            write("| size_B | busbw_GBps |\n|---:|---:|\n| 8 | 0.00 |\n| 1000000 | 175.0 |\n");
        let rows = read_for(bus.path(), "all_reduce", "float", 8).unwrap();
        assert_eq!(rows.len(), 1);
        assert!((rows[0].time_us - 10.0).abs() < 1e-9, "{rows:?}");
        assert!((rows[0].algbw - 100.0).abs() < 1e-9);
        // A time derived from algbw is in microseconds whatever unit an earlier table's time
        // column had.
        let later = write("## all_gather\n| size_B | time (ms) | busbw |\n| 1048576 | 0.05 | 18.0 |\n## all_reduce\n| size_B | algbw |\n| 1000000 | 100.0 |\n");
        assert_eq!(
            read(later.path(), "all_gather", "float").unwrap()[0].time_us,
            50.0
        );
        let rows = read(later.path(), "all_reduce", "float").unwrap();
        assert!((rows[0].time_us - 10.0).abs() < 1e-9, "{rows:?}");
        // CSV with an operation column: the asked operation's rows only.
        let csv = write("op,size,count,type,redop,root,time,algbw,busbw\nall_gather,1048576,262144,float,none,-1,20.0,52.43,45.88\nall_reduce,1048576,262144,float,sum,-1,30.5,34.38,60.16\n");
        let rows = read(csv.path(), "all_reduce", "float").unwrap();
        assert_eq!((rows.len(), rows[0].time_us, rows[0].line), (1, 30.5, 3));
        assert_eq!(
            read(csv.path(), "all_gather", "float").unwrap()[0].time_us,
            20.0
        );
        let cut = write("| size_B | time_us | busbw_GBps |\n| 1024 | 40.0 |\n");
        let e = read(cut.path(), "all_reduce", "float")
            .unwrap_err()
            .to_string();
        assert!(e.contains(":2: a data row without its busbw"), "{e}");
    }

    /// A row whose fields are there but impossible is refused naming the field and its text,
    /// not taken for a truncated row or skipped as a comment.
    #[test]
    fn impossible_values_are_named() {
        for (from, to, expect) in [
            ("85.58   12.25", "  NaN   12.25", ":7: time 'NaN' is not"),
            (
                "12.25   22.97",
                "-12.25   22.97",
                ":7: algbw '-12.25' is not",
            ),
            (
                "     1048576  ",
                "99999999999999999999",
                ":7: a size of 99999999999999999999 bytes",
            ),
        ] {
            let bad = write(&LOG.replacen(from, to, 1));
            let e = read(bad.path(), "all_reduce", "float")
                .unwrap_err()
                .to_string();
            assert!(e.contains(expect), "{e}");
        }
    }

    #[test]
    fn bad_logs_name_file_and_line() {
        let truncated = write(&LOG.replace(
            "    85.58   12.25   22.97      0    84.00   12.48   23.40      0",
            "    85.58",
        ));
        let e = read(truncated.path(), "all_reduce", "float")
            .unwrap_err()
            .to_string();
        assert!(e.contains(":7: a data row without time"), "{e}");
        let empty = write("# nothing here\n");
        let e = read(empty.path(), "all_reduce", "float")
            .unwrap_err()
            .to_string();
        assert!(e.contains("no nccl-tests rows"), "{e}");
        let mixed = write("| size | time_us | a | b |\n| 8 | 1.0 | 0 | 0 |\n| size | time_ms | a | b |\n| 16 | 1.0 | 0 | 0 |\n");
        let e = read(mixed.path(), "all_reduce", "float")
            .unwrap_err()
            .to_string();
        assert!(e.contains(":3: time unit changes"), "{e}");
    }
}
