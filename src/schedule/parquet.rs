//! `schedule.parquet`: the schedule IR as a Parquet table (zstd), for schedules too large for JSON
//! (a 64x64 mesh all-gather: 16.8M transfers, 1.6 GB of JSON). Columns: `id`, `src`, `dst`,
//! `bytes`, `deps` (a list of ids), `chunk_lo`/`chunk_hi` (the piece range, null when none),
//! `op` (`copy`/`reduce`, null when no pieces), `route` (a list of nodes, empty for the
//! topology's routing) and `wait_ps` (null for transfers); the claimed collective rides in the
//! file's key-value metadata (`collsim.collective`, the JSON form's object).

use std::fs::File;
use std::io::Read;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use rayon::prelude::*;

use parquet::basic::{Compression, Encoding, Type as PhysicalType, ZstdLevel};
use parquet::column::reader::{get_typed_column_reader, ColumnReaderImpl};
use parquet::column::writer::{get_column_writer, ColumnCloseResult, ColumnWriter};
use parquet::data_type::{ByteArray, ByteArrayType, DataType, Int32Type, Int64Type};
use parquet::file::metadata::KeyValue;
use parquet::file::properties::{EnabledStatistics, WriterProperties, WriterPropertiesPtr};
use parquet::file::reader::{FileReader, SerializedFileReader};
use parquet::file::writer::{SerializedFileWriter, SerializedPageWriter, TrackedWrite};
use parquet::schema::parser::parse_message_type;
use parquet::schema::types::{ColumnDescPtr, SchemaDescriptor};

use super::assembly::{Assembler, Claim, TransferIds};
use super::{Op, Schedule, Transfer, TransferIndex};
use crate::collective::Collective;
use crate::topology::NodeId;
use crate::units::Time;
use crate::Error;

/// Rows per row group: bounded buffers, whatever the schedule's size.
pub const ROW_GROUP: usize = 1 << 20;
const CLAIM_KEY: &str = "collsim.collective";

const SCHEMA: &str = "message schedule {
    REQUIRED INT64 id (INTEGER(64, false));
    REQUIRED INT32 src (INTEGER(32, false));
    REQUIRED INT32 dst (INTEGER(32, false));
    REQUIRED INT64 bytes (INTEGER(64, false));
    REPEATED INT64 deps (INTEGER(64, false));
    OPTIONAL INT32 chunk_lo (INTEGER(32, false));
    OPTIONAL INT32 chunk_hi (INTEGER(32, false));
    OPTIONAL BYTE_ARRAY op (UTF8);
    REPEATED INT32 route (INTEGER(32, false));
    OPTIONAL INT64 wait_ps (INTEGER(64, false));
}";

/// Values and levels of one column of one row group.
#[derive(Clone, Default)]
pub(crate) struct Levels {
    def: Vec<i16>,
    rep: Vec<i16>,
}

impl Levels {
    /// A list cell: its values, one level each (an empty list is one level 0).
    fn list<T>(&mut self, values: &mut Vec<T>, items: impl IntoIterator<Item = T>) {
        let before = values.len();
        values.extend(items);
        let added = values.len() - before;
        if added == 0 {
            self.def.push(0);
            self.rep.push(0);
        } else {
            self.def.extend(std::iter::repeat_n(1, added));
            self.rep.push(0);
            self.rep.extend(std::iter::repeat_n(1, added - 1));
        }
    }

    /// An optional cell.
    fn optional<T>(&mut self, values: &mut Vec<T>, item: Option<T>) {
        self.def.push(i16::from(item.is_some()));
        values.extend(item);
    }

    /// The definition and repetition levels to write (none for a required column).
    fn slices(&self) -> (Option<&[i16]>, Option<&[i16]>) {
        fn some(v: &[i16]) -> Option<&[i16]> {
            (!v.is_empty()).then_some(v)
        }
        (some(&self.def), some(&self.rep))
    }
}

/// One column of one row group, gathered and ready to encode: the values of its physical type
/// and its levels.
#[derive(Clone)]
pub(crate) enum Column {
    Int32(Vec<i32>, Levels),
    Int64(Vec<i64>, Levels),
    Double(Vec<f64>),
    /// The op column: gathered as operations, written as their names by the encoding thread
    /// (names are shared byte buffers: cloning them on one thread and dropping them on another
    /// made the two fight over the reference count).
    Ops(Vec<Op>, Levels),
}

impl Column {
    /// A required (no levels) INT32 column.
    pub(crate) fn int32(values: Vec<i32>) -> Column {
        Column::Int32(values, Levels::default())
    }

    /// A required (no levels) INT64 column.
    pub(crate) fn int64(values: Vec<i64>) -> Column {
        Column::Int64(values, Levels::default())
    }
}

/// A Parquet error on `path`, as an I/O error naming the file.
pub(crate) fn parquet_error(path: &Path, e: parquet::errors::ParquetError) -> Error {
    Error::io(path.display(), std::io::Error::other(e.to_string()))
}

/// A Parquet file written a row group at a time, the columns of each group encoded on all
/// cores (encoding and compressing is most of the writing: 2.5 s of one core for a 16.8M-row
/// schedule) and appended in order.
pub(crate) struct ParquetFile {
    writer: SerializedFileWriter<File>,
    path: PathBuf,
}

impl ParquetFile {
    /// A zstd-compressed Parquet file of `schema` at `path` with `metadata`. Integer columns are
    /// delta-encoded before compression: ids, dependencies and times climb in small steps, so
    /// zstd gets a fraction of the bytes (the writing took longer than the simulation with plain
    /// encoding). No dictionaries (ids, endpoints and times are mostly distinct, and the
    /// two-word op column compresses as well without one) and statistics only for the first
    /// column, the id, which readers can filter on: min/max of every column cost a fifth of the
    /// writing time.
    pub(crate) fn create(
        path: &Path,
        schema: &str,
        metadata: Option<KeyValue>,
    ) -> Result<ParquetFile, Error> {
        let schema = Arc::new(parse_message_type(schema).expect("collsim's schemas parse"));
        let mut props = WriterProperties::builder()
            .set_compression(Compression::ZSTD(
                ZstdLevel::try_new(1).expect("level 1 exists"),
            ))
            .set_dictionary_enabled(false)
            .set_statistics_enabled(EnabledStatistics::None)
            .set_key_value_metadata(metadata.map(|m| vec![m]));
        for (k, column) in SchemaDescriptor::new(schema.clone())
            .columns()
            .iter()
            .enumerate()
        {
            if k == 0 {
                props = props
                    .set_column_statistics_enabled(column.path().clone(), EnabledStatistics::Chunk);
            }
            if matches!(
                column.physical_type(),
                PhysicalType::INT32 | PhysicalType::INT64
            ) {
                props =
                    props.set_column_encoding(column.path().clone(), Encoding::DELTA_BINARY_PACKED);
            }
        }
        let file = File::create(path).map_err(|e| Error::io(path.display(), e))?;
        let writer = SerializedFileWriter::new(file, schema, Arc::new(props.build()))
            .map_err(|e| parquet_error(path, e))?;
        Ok(ParquetFile {
            writer,
            path: path.to_path_buf(),
        })
    }

    /// `columns`, the schema's columns from number `first` on, encoded (on all cores when
    /// `parallel`) for a row group of this file, or of another file whose columns there are the
    /// same: tables that share their first columns encode them once.
    pub(crate) fn encode(
        &self,
        columns: Vec<Column>,
        first: usize,
        parallel: bool,
    ) -> Result<Vec<EncodedColumn>, Error> {
        let schema = self.writer.schema_descr().columns()[first..].to_vec();
        let props = self.writer.properties().clone();
        let encode = |(column, descr)| {
            encode_column(column, descr, props.clone())
                .map(|(bytes, close)| EncodedColumn { bytes, close })
        };
        let encoded: parquet::errors::Result<Vec<_>> = match parallel {
            true => columns.into_par_iter().zip(schema).map(encode).collect(),
            false => columns.into_iter().zip(schema).map(encode).collect(),
        };
        encoded.map_err(|e| parquet_error(&self.path, e))
    }

    /// Appends one row group of encoded columns, in schema order.
    pub(crate) fn append_row_group(&mut self, encoded: Vec<EncodedColumn>) -> Result<(), Error> {
        let path = self.path.clone();
        let fail = |e| parquet_error(&path, e);
        let mut group = self.writer.next_row_group().map_err(fail)?;
        for EncodedColumn { bytes, close } in encoded {
            group.append_column(&bytes, close).map_err(fail)?;
        }
        group.close().map_err(fail)?;
        Ok(())
    }

    /// Writes the footer.
    pub(crate) fn close(self) -> Result<(), Error> {
        let path = self.path;
        self.writer
            .close()
            .map(drop)
            .map_err(|e| parquet_error(&path, e))
    }
}

/// One column of one row group, encoded and compressed, ready to append.
#[derive(Clone)]
pub(crate) struct EncodedColumn {
    bytes: Bytes,
    close: ColumnCloseResult,
}

/// `column` encoded and compressed into memory as a column chunk of `descr`.
fn encode_column(
    column: Column,
    descr: ColumnDescPtr,
    props: WriterPropertiesPtr,
) -> parquet::errors::Result<(Bytes, ColumnCloseResult)> {
    let mut sink = TrackedWrite::new(Vec::new());
    let pages = Box::new(SerializedPageWriter::new(&mut sink));
    let close = match (get_column_writer(descr, props, pages), &column) {
        (ColumnWriter::Int32ColumnWriter(mut w), Column::Int32(v, levels)) => {
            let (def, rep) = levels.slices();
            w.write_batch(v, def, rep)?;
            w.close()?
        }
        (ColumnWriter::Int64ColumnWriter(mut w), Column::Int64(v, levels)) => {
            let (def, rep) = levels.slices();
            w.write_batch(v, def, rep)?;
            w.close()?
        }
        (ColumnWriter::DoubleColumnWriter(mut w), Column::Double(v)) => {
            w.write_batch(v, None, None)?;
            w.close()?
        }
        (ColumnWriter::ByteArrayColumnWriter(mut w), Column::Ops(ops, levels)) => {
            let names = [Op::Copy, Op::Reduce].map(|op| ByteArray::from(op.name()));
            let v: Vec<ByteArray> = ops
                .iter()
                .map(|&op| names[usize::from(op == Op::Reduce)].clone())
                .collect();
            let (def, rep) = levels.slices();
            w.write_batch(&v, def, rep)?;
            w.close()?
        }
        _ => unreachable!("collsim's columns follow their schemas"),
    };
    Ok((Bytes::from(sink.into_inner()?), close))
}

/// Writes `schedule` as `schedule.parquet` (see the module documentation).
pub fn write_schedule_parquet(schedule: &Schedule, path: &Path) -> Result<(), Error> {
    let mut file = ScheduleFile::create(schedule.collective.as_ref(), path)?;
    for start in (0..schedule.len()).step_by(ROW_GROUP) {
        let rows = start as TransferIndex..(start + ROW_GROUP).min(schedule.len()) as TransferIndex;
        let columns = (0..COLUMNS)
            .into_par_iter()
            .map(|column| schedule_column(schedule, None, rows.clone(), column))
            .collect();
        file.write(ScheduleRows(Rows::Columns(columns)), true)?;
    }
    file.close()
}

/// `schedule.parquet` being written a row group at a time (see [`schedule_rows`]).
pub struct ScheduleFile(ParquetFile);

impl ScheduleFile {
    /// A schedule file at `path` whose metadata claims `claim`.
    pub fn create(claim: Option<&Collective>, path: &Path) -> Result<ScheduleFile, Error> {
        let claim = claim.map(|c| {
            KeyValue::new(
                CLAIM_KEY.to_string(),
                serde_json::to_string(&Claim::of(c)).expect("a claim serialises"),
            )
        });
        ParquetFile::create(path, SCHEMA, claim).map(ScheduleFile)
    }

    /// Appends the rows gathered by [`schedule_rows`], encoded on all cores when `parallel`,
    /// else on the calling thread (beside a synthesis that has the other core).
    pub fn write(&mut self, rows: ScheduleRows, parallel: bool) -> Result<(), Error> {
        let encoded = self.encode(rows.into_columns(parallel), parallel)?;
        self.append(encoded)
    }

    /// Rows gathered by [`ScheduleRows::into_columns`], encoded for [`ScheduleFile::append`].
    pub(crate) fn encode(
        &self,
        columns: Vec<Column>,
        parallel: bool,
    ) -> Result<Vec<EncodedColumn>, Error> {
        self.0.encode(columns, 0, parallel)
    }

    /// Appends the row group [`ScheduleFile::encode`] made.
    pub(crate) fn append(&mut self, encoded: Vec<EncodedColumn>) -> Result<(), Error> {
        self.0.append_row_group(encoded)
    }

    /// Writes the footer.
    pub fn close(self) -> Result<(), Error> {
        self.0.close()
    }
}

/// Rows of a schedule, owned: a row group of `schedule.parquet`.
pub struct ScheduleRows(Rows);

impl ScheduleRows {
    /// The rows gathered into the columns of `schedule.parquet`, on all cores when `parallel`.
    pub(crate) fn into_columns(self, parallel: bool) -> Vec<Column> {
        match self.0 {
            Rows::Columns(columns) => columns,
            Rows::Excerpt { first, rows } => {
                let all = 0..rows.len() as TransferIndex;
                let column = |k| schedule_column(&rows, Some(first), all.clone(), k);
                match parallel {
                    true => (0..COLUMNS).into_par_iter().map(column).collect(),
                    false => (0..COLUMNS).map(column).collect(),
                }
            }
        }
    }
}

/// Rows of copies of one piece each with at most one dependency, gathered straight into the
/// columns of `schedule.parquet` as they are made, by a producer that never holds the schedule
/// (the in-order simulation of a synthesized all-gather): the rows [`schedule_rows`] gathers
/// from a held schedule of the same transfers, without building one.
pub struct CopyRows {
    /// Position of the first row in the schedule (ids are positions).
    first: u64,
    src: Vec<i32>,
    dst: Vec<i32>,
    bytes: Vec<i64>,
    deps: Vec<i64>,
    /// Per row, 1 with a dependency, else 0 (the deps column's levels).
    has_dep: Vec<i16>,
    pieces: Vec<i32>,
}

impl CopyRows {
    /// Rows from position `first` on, with room for `capacity`.
    pub fn new(first: u64, capacity: usize) -> CopyRows {
        CopyRows {
            first,
            src: Vec::with_capacity(capacity),
            dst: Vec::with_capacity(capacity),
            bytes: Vec::with_capacity(capacity),
            deps: Vec::with_capacity(capacity),
            has_dep: Vec::with_capacity(capacity),
            pieces: Vec::with_capacity(capacity),
        }
    }

    /// Position of the row the next push makes.
    pub fn next(&self) -> u64 {
        self.first + self.len() as u64
    }

    pub fn len(&self) -> usize {
        self.src.len()
    }

    pub fn is_empty(&self) -> bool {
        self.src.is_empty()
    }

    /// The next row: a copy of `piece` (`bytes`) from `src` to `dst`, after the transfer at
    /// position `dep` if any.
    #[inline]
    pub fn push(&mut self, src: NodeId, dst: NodeId, bytes: u64, dep: Option<u64>, piece: u32) {
        self.src.push(src as i32);
        self.dst.push(dst as i32);
        self.bytes.push(bytes as i64);
        self.deps.extend(dep.map(|d| d as i64));
        self.has_dep.push(i16::from(dep.is_some()));
        self.pieces.push(piece as i32);
    }

    /// The rows, in the columns of `schedule.parquet`: the levels every row shares (a piece
    /// range and an op present, no route, no wait) are made here, not per row.
    pub fn into_rows(self) -> ScheduleRows {
        let n = self.src.len();
        let levels = |def: i16, rep: bool| Levels {
            def: vec![def; n],
            rep: if rep { vec![0; n] } else { Vec::new() },
        };
        let deps = Levels {
            def: self.has_dep,
            // One value or none per row: every one begins its row.
            rep: vec![0; n],
        };
        let hi = self.pieces.iter().map(|p| p + 1).collect();
        let ids = (self.first as i64..(self.first + n as u64) as i64).collect();
        ScheduleRows(Rows::Columns(vec![
            Column::int64(ids),
            Column::int32(self.src),
            Column::int32(self.dst),
            Column::int64(self.bytes),
            Column::Int64(self.deps, deps),
            Column::Int32(self.pieces, levels(1, false)),
            Column::Int32(hi, levels(1, false)),
            Column::Ops(vec![Op::Copy; n], levels(1, false)),
            Column::Int32(Vec::new(), levels(0, true)),
            Column::Int64(Vec::new(), levels(0, false)),
        ]))
    }
}

enum Rows {
    /// Gathered into the file's columns.
    Columns(Vec<Column>),
    /// Copied as they are stored (a few slice copies, where gathering is ten passes over the
    /// rows): the rows of a schedule without file ids from position `first` on, whose
    /// dependencies name positions of that schedule.
    Excerpt { first: u64, rows: Box<Schedule> },
}

/// Columns of `schedule.parquet`.
const COLUMNS: usize = 10;

/// The rows `rows` of `schedule`, gathered into the columns of `schedule.parquet` on the calling
/// thread (a synthesizer hands them over as it goes; the other core encodes).
pub fn schedule_rows(schedule: &Schedule, rows: Range<usize>) -> ScheduleRows {
    if schedule.ids.is_none() {
        return ScheduleRows(Rows::Excerpt {
            first: rows.start as u64,
            rows: Box::new(schedule.excerpt(rows)),
        });
    }
    let rows = rows.start as TransferIndex..rows.end as TransferIndex;
    ScheduleRows(Rows::Columns(
        (0..COLUMNS)
            .map(|column| schedule_column(schedule, None, rows.clone(), column))
            .collect(),
    ))
}

/// Column `column` (in schema order) of the rows `rows` of `schedule`, or, with `first`, of an
/// [`Schedule::excerpt`] starting at that position (ids count from it; dependencies are ids).
pub(crate) fn schedule_column(
    schedule: &Schedule,
    first: Option<u64>,
    rows: Range<TransferIndex>,
    column: usize,
) -> Column {
    let id = |i: TransferIndex| first.map_or_else(|| schedule.id(i), |f| f + i as u64) as i64;
    let dep_id = |d: TransferIndex| first.map_or_else(|| schedule.id(d), |_| d as u64) as i64;
    let mut levels = Levels::default();
    match column {
        0 => Column::int64(rows.map(id).collect()),
        1 => Column::int32(rows.map(|i| schedule.transfer(i).src as i32).collect()),
        2 => Column::int32(rows.map(|i| schedule.transfer(i).dst as i32).collect()),
        3 => Column::int64(rows.map(|i| schedule.transfer(i).bytes as i64).collect()),
        4 => {
            let mut v = Vec::new();
            for i in rows {
                let deps = schedule.deps(i).iter().map(|&d| dep_id(d));
                levels.list(&mut v, deps);
            }
            Column::Int64(v, levels)
        }
        5 | 6 => {
            let mut v = Vec::new();
            for i in rows {
                let end = schedule
                    .pieces(i)
                    .map(|(lo, hi)| (if column == 5 { lo } else { hi }) as i32);
                levels.optional(&mut v, end);
            }
            Column::Int32(v, levels)
        }
        7 => {
            let mut v = Vec::new();
            for i in rows {
                levels.optional(&mut v, schedule.pieces(i).map(|_| schedule.op(i)));
            }
            Column::Ops(v, levels)
        }
        8 => {
            let mut v = Vec::new();
            for i in rows {
                let route = schedule.route(i).unwrap_or(&[]).iter().map(|&n| n as i32);
                levels.list(&mut v, route);
            }
            Column::Int32(v, levels)
        }
        _ => {
            let mut v = Vec::new();
            for i in rows {
                levels.optional(&mut v, schedule.wait(i).map(|t| t.ps() as i64));
            }
            Column::Int64(v, levels)
        }
    }
}

/// One column of a row group, read whole.
struct ReadColumn<T> {
    values: Vec<T>,
    levels: Levels,
}

fn read_column<T: DataType>(
    mut reader: ColumnReaderImpl<T>,
    rows: usize,
) -> parquet::errors::Result<ReadColumn<T::T>> {
    let mut read = ReadColumn {
        values: Vec::new(),
        levels: Levels::default(),
    };
    let levels = &mut read.levels;
    reader.read_records(
        rows,
        Some(&mut levels.def),
        Some(&mut levels.rep),
        &mut read.values,
    )?;
    Ok(read)
}

/// Walks a column row by row: where the next row's levels and values start.
struct Cursor<'c, T> {
    column: &'c ReadColumn<T>,
    level: usize,
    value: usize,
}

impl<'c, T> Cursor<'c, T> {
    fn new(column: &'c ReadColumn<T>) -> Self {
        Cursor {
            column,
            level: 0,
            value: 0,
        }
    }

    /// A list column's next row; None past the column's end.
    fn list(&mut self) -> Option<&'c [T]> {
        let (def, rep) = (&self.column.levels.def, &self.column.levels.rep);
        if self.level >= def.len() || rep.get(self.level) != Some(&0) {
            return None;
        }
        let start = self.value;
        loop {
            if def[self.level] == 1 {
                self.value += 1;
            }
            self.level += 1;
            if rep.get(self.level).is_none_or(|&r| r == 0) {
                break;
            }
        }
        self.column.values.get(start..self.value)
    }

    /// An optional column's next row (None inside: null); None past the column's end.
    fn optional(&mut self) -> Option<Option<&'c T>> {
        let defined = *self.column.levels.def.get(self.level)? == 1;
        self.level += 1;
        if !defined {
            return Some(None);
        }
        let value = self.column.values.get(self.value)?;
        self.value += 1;
        Some(Some(value))
    }
}

/// One row group of `schedule.parquet`, its columns decoded (the ids are read before, alone).
struct Group {
    rows: usize,
    src: Vec<i32>,
    dst: Vec<i32>,
    bytes: Vec<i64>,
    deps: ReadColumn<i64>,
    lo: ReadColumn<i32>,
    hi: ReadColumn<i32>,
    ops: ReadColumn<ByteArray>,
    routes: ReadColumn<i32>,
    waits: ReadColumn<i64>,
}

type Fail<'a> = &'a (dyn Fn(String) -> Error + Sync);

impl Group {
    fn read(reader: &SerializedFileReader<Bytes>, g: usize, bad: Fail) -> Result<Group, Error> {
        let fail = |e: parquet::errors::ParquetError| bad(format!("not a readable schedule: {e}"));
        let group = reader.get_row_group(g).map_err(fail)?;
        let rows = group.metadata().num_rows() as usize;
        let column = |i: usize| group.get_column_reader(i).map_err(fail);
        let int64 = |i| -> Result<_, Error> {
            read_column(get_typed_column_reader::<Int64Type>(column(i)?), rows).map_err(fail)
        };
        let int32 = |i| -> Result<_, Error> {
            read_column(get_typed_column_reader::<Int32Type>(column(i)?), rows).map_err(fail)
        };
        let read = Group {
            rows,
            src: int32(1)?.values,
            dst: int32(2)?.values,
            bytes: int64(3)?.values,
            deps: int64(4)?,
            lo: int32(5)?,
            hi: int32(6)?,
            ops: read_column(get_typed_column_reader::<ByteArrayType>(column(7)?), rows)
                .map_err(fail)?,
            routes: int32(8)?,
            waits: int64(9)?,
        };
        let lengths = [read.src.len(), read.dst.len(), read.bytes.len()];
        if let Some((name, len)) = ["src", "dst", "bytes"]
            .into_iter()
            .zip(lengths)
            .find(|&(_, len)| len != rows)
        {
            return Err(bad(format!(
                "not a readable schedule: row group {g} has {len} {name} values for {rows} rows"
            )));
        }
        Ok(read)
    }

    /// Hands the group's rows, whose ids are `ids`, to the assembler.
    fn assemble(&self, ids: &[i64], to: &mut Assembler, bad: Fail) -> Result<(), Error> {
        let short = |name: &str| bad(format!("not a readable schedule: column {name} ends early"));
        let (mut deps, mut routes) = (Cursor::new(&self.deps), Cursor::new(&self.routes));
        let (mut lo, mut hi) = (Cursor::new(&self.lo), Cursor::new(&self.hi));
        let (mut ops, mut waits) = (Cursor::new(&self.ops), Cursor::new(&self.waits));
        let mut route = Vec::new();
        if ids.len() != self.rows {
            return Err(short("id"));
        }
        for (k, &id) in ids.iter().enumerate() {
            let id = id as u64;
            let op = match ops.optional().ok_or_else(|| short("op"))?.map(|b| b.data()) {
                None | Some(b"copy") => Op::Copy,
                Some(b"reduce") => Op::Reduce,
                Some(other) => {
                    return Err(bad(format!(
                        "transfer {id}: op '{}' is not copy or reduce",
                        String::from_utf8_lossy(other)
                    )))
                }
            };
            let (lo, hi) = (
                lo.optional().ok_or_else(|| short("chunk_lo"))?,
                hi.optional().ok_or_else(|| short("chunk_hi"))?,
            );
            route.clear();
            let nodes = routes.list().ok_or_else(|| short("route"))?;
            route.extend(nodes.iter().map(|&n| n as u32));
            let wait = waits.optional().ok_or_else(|| short("wait_ps"))?;
            to.row(
                id,
                Transfer {
                    src: self.src[k] as u32,
                    dst: self.dst[k] as u32,
                    bytes: self.bytes[k] as u64,
                },
                deps.list()
                    .ok_or_else(|| short("deps"))?
                    .iter()
                    .map(|&d| d as u64),
                lo.zip(hi).map(|(&a, &b)| (a as u32, b as u32)),
                op,
                &route,
                wait.map(|&ps| Time(ps as u64)),
            )?;
        }
        Ok(())
    }
}

/// Reads `schedule.parquet` back (see [`write_schedule_parquet`]). The file is read whole into
/// memory and its row groups decoded a few at a time on every core, then assembled in order: a
/// 16.8M-transfer schedule read row by row spent 6.5 s building per-row lists.
pub(super) fn read_parquet(
    shown: &str,
    mut file: File,
) -> Result<(Schedule, Option<Claim>), Error> {
    let bad = |why: String| Error::input(format!("{shown}: {why}"));
    let fail = |e: parquet::errors::ParquetError| bad(format!("not a readable schedule: {e}"));
    let mut data = Vec::new();
    file.read_to_end(&mut data)
        .map_err(|e| bad(format!("cannot read schedule: {}", crate::io_words(&e))))?;
    let reader = SerializedFileReader::new(Bytes::from(data)).map_err(fail)?;
    let meta = reader.metadata();
    let names: Vec<&str> = meta
        .file_metadata()
        .schema_descr()
        .columns()
        .iter()
        .map(|c| c.name())
        .collect();
    let expected = [
        "id", "src", "dst", "bytes", "deps", "chunk_lo", "chunk_hi", "op", "route", "wait_ps",
    ];
    if names != expected {
        return Err(bad(format!(
            "columns {} (a collsim schedule has {})",
            names.join(","),
            expected.join(",")
        )));
    }
    let claim = meta
        .file_metadata()
        .key_value_metadata()
        .and_then(|kv| kv.iter().find(|k| k.key == CLAIM_KEY))
        .and_then(|k| k.value.as_deref())
        .map(|json| {
            serde_json::from_str::<Claim>(json)
                .map_err(|e| bad(format!("{CLAIM_KEY} metadata: {e}")))
        })
        .transpose()?;
    let groups = reader.num_row_groups();
    // Dependencies name ids: every id is known before the first row is assembled.
    let ids = (0..groups)
        .into_par_iter()
        .map(|g| -> Result<Vec<i64>, Error> {
            let group = reader.get_row_group(g).map_err(fail)?;
            let rows = group.metadata().num_rows() as usize;
            let column = group.get_column_reader(0).map_err(fail)?;
            Ok(
                read_column(get_typed_column_reader::<Int64Type>(column), rows)
                    .map_err(fail)?
                    .values,
            )
        })
        .collect::<Result<Vec<_>, _>>()?;
    let count = ids.iter().map(Vec::len).sum();
    let known = TransferIds::of(shown, ids.iter().flatten().map(|&id| id as u64), count)?;
    let mut assembler = Assembler::new(shown, known, count);
    // A few groups decoded at a time bound the memory the decoded columns take.
    let window = rayon::current_num_threads().max(1);
    for first in (0..groups).step_by(window) {
        let decoded = (first..(first + window).min(groups))
            .into_par_iter()
            .map(|g| Group::read(&reader, g, &bad))
            .collect::<Result<Vec<_>, _>>()?;
        for (i, group) in decoded.iter().enumerate() {
            group.assemble(&ids[first + i], &mut assembler, &bad)?;
        }
    }
    Ok((assembler.finish(), claim))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 23 rows of every kind: waits, plain transfers, reductions and copies over multi-piece
    /// ranges, explicit routes, dependencies reaching several rows back.
    fn sample() -> Schedule {
        let mut s = Schedule::new();
        for i in 0..23u32 {
            let transfer = Transfer {
                src: i % 4,
                dst: (i + 1) % 4,
                bytes: 100 + u64::from(i),
            };
            let deps: Vec<TransferIndex> = (0..i).filter(|d| (i + d) % 5 == 0).collect();
            let t = match i % 6 {
                0 => s.push_wait(i % 4, Time(7 * u64::from(i)), &deps),
                1 => s.push(transfer, &deps),
                _ => s.push_data(
                    transfer,
                    &deps,
                    (i, i + 1 + i % 3),
                    if i % 2 == 0 { Op::Reduce } else { Op::Copy },
                ),
            };
            if i % 4 == 3 {
                s.set_route(t, &[i % 4, 9, (i + 1) % 4]);
            }
        }
        s
    }

    /// Writes `s` in row groups of `rows` rows, as excerpts (how a synthesizer hands them over)
    /// or gathered from the whole schedule; returns the file's bytes.
    fn write_in_groups(s: &Schedule, path: &Path, rows: usize, excerpt: bool) -> Vec<u8> {
        let mut file = ScheduleFile::create(None, path).unwrap();
        for start in (0..s.len()).step_by(rows) {
            let rows = start..(start + rows).min(s.len());
            let group = match excerpt {
                true => schedule_rows(s, rows),
                false => {
                    let rows = rows.start as TransferIndex..rows.end as TransferIndex;
                    ScheduleRows(Rows::Columns(
                        (0..COLUMNS)
                            .map(|k| schedule_column(s, None, rows.clone(), k))
                            .collect(),
                    ))
                }
            };
            file.write(group, excerpt).unwrap();
        }
        file.close().unwrap();
        std::fs::read(path).unwrap()
    }

    /// Copies gathered as they are made ([`CopyRows`]) make the file that gathering the same
    /// transfers from a held schedule makes, row group by row group: dependencies in earlier
    /// groups, none, sizes that differ.
    #[test]
    fn copies_gathered_as_made_write_what_the_schedule_writes() {
        let mut s = Schedule::default();
        let mut made = vec![CopyRows::new(0, 4)];
        for i in 0..11u32 {
            let (src, dst, bytes) = (i % 4, (i + 1) % 4, 100 + u64::from(i % 3));
            let dep = i.checked_sub(3).filter(|_| i % 2 == 1);
            s.push_data(
                Transfer { src, dst, bytes },
                dep.as_slice(),
                (i % 5, i % 5 + 1),
                Op::Copy,
            );
            let rows = made.last_mut().unwrap();
            rows.push(src, dst, bytes, dep.map(u64::from), i % 5);
            if rows.len() == 4 {
                let next = rows.next();
                made.push(CopyRows::new(next, 4));
            }
        }
        let dir = std::env::temp_dir().join(format!("collsim-copies-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("made.parquet");
        let mut file = ScheduleFile::create(None, &path).unwrap();
        for rows in made.into_iter().filter(|r| !r.is_empty()) {
            file.write(rows.into_rows(), false).unwrap();
        }
        file.close().unwrap();
        let written = std::fs::read(&path).unwrap();
        assert!(written == write_in_groups(&s, &dir.join("held.parquet"), 4, false));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Row groups copied as excerpts (how a synthesizer hands them over) make the file that
    /// gathering them from the whole schedule makes: dependencies before the excerpt, routes,
    /// waits, reductions, multi-piece ranges and transfers without pieces included.
    #[test]
    fn excerpts_write_what_the_whole_schedule_writes() {
        let s = sample();
        let dir = std::env::temp_dir().join(format!("collsim-excerpt-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let write = |name: &str, excerpt: bool| write_in_groups(&s, &dir.join(name), 5, excerpt);
        assert!(write("excerpts.parquet", true) == write("whole.parquet", false));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A file of many row groups reads back row for row, whether its ids are list positions
    /// (resolved directly) or not (resolved through a map), with dependencies that reach into
    /// earlier row groups.
    #[test]
    fn row_groups_read_back_in_order() {
        let dir = std::env::temp_dir().join(format!("collsim-groups-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for positions in [true, false] {
            let mut s = sample();
            if !positions {
                for t in 0..s.len() as TransferIndex {
                    s.set_id(t, 1000 - 3 * u64::from(t));
                }
            }
            let path = dir.join("groups.parquet");
            write_in_groups(&s, &path, 4, true);
            let back = crate::schedule::load_schedule_file(&path).unwrap();
            assert_eq!(back.len(), s.len());
            for t in 0..s.len() as TransferIndex {
                assert_eq!(back.transfer(t), s.transfer(t), "row {t}");
                assert_eq!(back.id(t), s.id(t), "row {t}");
                assert_eq!(back.deps(t), s.deps(t), "row {t}");
                assert_eq!(back.pieces(t), s.pieces(t), "row {t}");
                assert_eq!(back.op(t), s.op(t), "row {t}");
                assert_eq!(back.route(t), s.route(t), "row {t}");
                assert_eq!(back.wait(t), s.wait(t), "row {t}");
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A damaged file is refused with an error that names it, never a panic: cut short anywhere,
    /// or with its data pages overwritten.
    #[test]
    fn a_damaged_file_is_refused_by_name() {
        let dir = std::env::temp_dir().join(format!("collsim-damaged-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let whole = write_in_groups(&sample(), &dir.join("whole.parquet"), 4, true);
        let path = dir.join("damaged.parquet");
        let mut damaged = Vec::new();
        for cut in (0..whole.len()).step_by(97) {
            damaged.push(whole[..cut].to_vec());
        }
        for at in (4..whole.len() / 2).step_by(61) {
            let mut bytes = whole.clone();
            bytes[at..at + 8].fill(0xA5);
            damaged.push(bytes);
        }
        for bytes in damaged {
            std::fs::write(&path, &bytes).unwrap();
            if let Err(e) = crate::schedule::load_schedule_file(&path) {
                assert!(e.to_string().contains("damaged.parquet"), "{e}");
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
