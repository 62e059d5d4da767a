//! `schedule.parquet`: the schedule IR as a Parquet table (zstd), for schedules too large for JSON
//! (a 64x64 mesh all-gather: 16.8M transfers, 1.6 GB of JSON). Columns: `id`, `src`, `dst`,
//! `bytes`, `deps` (a list of ids), `chunk_lo`/`chunk_hi` (the piece range, null when none),
//! `op` (`copy`/`reduce`, null when no pieces), `route` (a list of nodes, empty for the
//! topology's routing) and `wait_ps` (null for transfers); the claimed collective rides in the
//! file's key-value metadata (`collsim.collective`, the JSON form's object).

use std::fs::File;
use std::path::Path;
use std::sync::Arc;

use parquet::basic::{Compression, Encoding, Type as PhysicalType, ZstdLevel};
use parquet::column::reader::{get_typed_column_reader, ColumnReaderImpl};
use parquet::column::writer::ColumnWriter;
use parquet::data_type::{ByteArray, ByteArrayType, DataType, Int32Type, Int64Type};
use parquet::file::metadata::KeyValue;
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::file::reader::{FileReader, SerializedFileReader};
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::parser::parse_message_type;
use parquet::schema::types::{ColumnPath, SchemaDescriptor};

use super::io::{Claim, RawTransfer};
use super::{Op, Schedule, Transfer, TransferIndex};
use crate::units::Time;
use crate::Error;

/// Rows per row group: bounded buffers, whatever the schedule's size.
pub(crate) const ROW_GROUP: usize = 1 << 20;
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
#[derive(Default)]
struct Levels {
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
}

/// A Parquet error on `path`, as an I/O error naming the file.
pub(crate) fn parquet_error(path: &Path, e: parquet::errors::ParquetError) -> Error {
    Error::io(path.display(), std::io::Error::other(e.to_string()))
}

/// A zstd-compressed Parquet file of `schema` at `path`, dictionaries only for the columns in
/// `dictionary` (ids, endpoints, sizes and times are mostly distinct: dictionaries there cost a
/// third of the writing time and save nothing), statistics per column chunk, and `metadata`.
pub(crate) fn parquet_writer(
    path: &Path,
    schema: &str,
    dictionary: &[&str],
    metadata: Option<KeyValue>,
) -> Result<SerializedFileWriter<File>, Error> {
    let schema = Arc::new(parse_message_type(schema).expect("collsim's schemas parse"));
    let mut props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(
            ZstdLevel::try_new(1).expect("level 1 exists"),
        ))
        .set_dictionary_enabled(false)
        .set_statistics_enabled(EnabledStatistics::Chunk)
        .set_key_value_metadata(metadata.map(|m| vec![m]));
    for column in dictionary {
        props = props.set_column_dictionary_enabled(ColumnPath::from(*column), true);
    }
    // Integer columns are delta-encoded before compression: ids, dependencies and times climb
    // in small steps, so zstd gets a fraction of the bytes (the writing took longer than the
    // simulation with plain encoding).
    for column in SchemaDescriptor::new(schema.clone()).columns() {
        let integer = matches!(
            column.physical_type(),
            PhysicalType::INT32 | PhysicalType::INT64
        );
        if integer && !dictionary.contains(&column.name()) {
            props = props.set_column_encoding(column.path().clone(), Encoding::DELTA_BINARY_PACKED);
        }
    }
    let file = File::create(path).map_err(|e| Error::io(path.display(), e))?;
    SerializedFileWriter::new(file, schema, Arc::new(props.build()))
        .map_err(|e| parquet_error(path, e))
}

/// Writes `schedule` as `schedule.parquet` (see the module documentation).
pub fn write_schedule_parquet(schedule: &Schedule, path: &Path) -> Result<(), Error> {
    let fail = |e| parquet_error(path, e);
    let claim = schedule.collective.as_ref().map(|c| {
        KeyValue::new(
            CLAIM_KEY.to_string(),
            serde_json::to_string(&Claim::of(c)).expect("a claim serialises"),
        )
    });
    let mut writer = parquet_writer(path, SCHEMA, &["op"], claim)?;
    for start in (0..schedule.len()).step_by(ROW_GROUP) {
        let rows: Vec<TransferIndex> = (start as TransferIndex
            ..(start + ROW_GROUP).min(schedule.len()) as TransferIndex)
            .collect();
        let mut group = writer.next_row_group().map_err(fail)?;
        let mut column = 0;
        while let Some(mut col) = group.next_column().map_err(fail)? {
            let mut levels = Levels::default();
            let written = match (column, col.untyped()) {
                (0 | 3, ColumnWriter::Int64ColumnWriter(w)) => {
                    let v: Vec<i64> = rows
                        .iter()
                        .map(|&i| match column {
                            0 => schedule.id(i) as i64,
                            _ => schedule.transfer(i).bytes as i64,
                        })
                        .collect();
                    w.write_batch(&v, None, None)
                }
                (1 | 2, ColumnWriter::Int32ColumnWriter(w)) => {
                    let v: Vec<i32> = rows
                        .iter()
                        .map(|&i| {
                            let t = schedule.transfer(i);
                            (if column == 1 { t.src } else { t.dst }) as i32
                        })
                        .collect();
                    w.write_batch(&v, None, None)
                }
                (4, ColumnWriter::Int64ColumnWriter(w)) => {
                    let mut v = Vec::new();
                    for &i in &rows {
                        let deps = schedule.deps(i).iter().map(|&d| schedule.id(d) as i64);
                        levels.list(&mut v, deps);
                    }
                    w.write_batch(&v, Some(&levels.def), Some(&levels.rep))
                }
                (5 | 6, ColumnWriter::Int32ColumnWriter(w)) => {
                    let mut v = Vec::new();
                    for &i in &rows {
                        let end = schedule
                            .pieces(i)
                            .map(|(lo, hi)| (if column == 5 { lo } else { hi }) as i32);
                        levels.optional(&mut v, end);
                    }
                    w.write_batch(&v, Some(&levels.def), None)
                }
                (7, ColumnWriter::ByteArrayColumnWriter(w)) => {
                    // Two values shared by every row (one allocation each, not one a row).
                    let names = [Op::Copy, Op::Reduce].map(|op| ByteArray::from(op.name()));
                    let mut v = Vec::new();
                    for &i in &rows {
                        let op = schedule
                            .pieces(i)
                            .map(|_| names[usize::from(schedule.op(i) == Op::Reduce)].clone());
                        levels.optional(&mut v, op);
                    }
                    w.write_batch(&v, Some(&levels.def), None)
                }
                (8, ColumnWriter::Int32ColumnWriter(w)) => {
                    let mut v = Vec::new();
                    for &i in &rows {
                        let route = schedule.route(i).unwrap_or(&[]).iter().map(|&n| n as i32);
                        levels.list(&mut v, route);
                    }
                    w.write_batch(&v, Some(&levels.def), Some(&levels.rep))
                }
                (9, ColumnWriter::Int64ColumnWriter(w)) => {
                    let mut v = Vec::new();
                    for &i in &rows {
                        levels.optional(&mut v, schedule.wait(i).map(|t| t.ps() as i64));
                    }
                    w.write_batch(&v, Some(&levels.def), None)
                }
                _ => unreachable!("the columns follow the schema"),
            };
            written.map_err(fail)?;
            col.close().map_err(fail)?;
            column += 1;
        }
        group.close().map_err(fail)?;
    }
    writer.close().map_err(fail)?;
    Ok(())
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

/// Splits a list column into one list per row.
fn lists<T: Copy>(column: &ReadColumn<T>) -> Vec<Vec<T>> {
    let (values, def, rep) = (&column.values, &column.levels.def, &column.levels.rep);
    let mut out: Vec<Vec<T>> = Vec::new();
    let mut next = 0;
    for (k, &d) in def.iter().enumerate() {
        if rep[k] == 0 {
            out.push(Vec::new());
        }
        if d == 1 {
            out.last_mut().expect("a row starts").push(values[next]);
            next += 1;
        }
    }
    out
}

/// Spreads an optional column's values over its rows.
fn optionals<T: Clone>(column: &ReadColumn<T>) -> Vec<Option<T>> {
    let values = &column.values;
    let mut next = 0;
    column
        .levels
        .def
        .iter()
        .map(|&d| {
            (d == 1).then(|| {
                next += 1;
                values[next - 1].clone()
            })
        })
        .collect()
}

/// Reads `schedule.parquet` back (see [`write_schedule_parquet`]).
pub(super) fn read_parquet(
    shown: &str,
    file: File,
) -> Result<(Vec<RawTransfer>, Option<Claim>), Error> {
    let bad = |why: String| Error::input(format!("{shown}: {why}"));
    let fail = |e: parquet::errors::ParquetError| bad(format!("not a readable schedule: {e}"));
    let reader = SerializedFileReader::new(file).map_err(fail)?;
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
    let mut raw = Vec::with_capacity(meta.file_metadata().num_rows().max(0) as usize);
    for g in 0..reader.num_row_groups() {
        let group = reader.get_row_group(g).map_err(fail)?;
        let rows = group.metadata().num_rows() as usize;
        let column = |i: usize| group.get_column_reader(i).map_err(fail);
        let int64 = |i| -> Result<_, Error> {
            read_column(get_typed_column_reader::<Int64Type>(column(i)?), rows).map_err(fail)
        };
        let int32 = |i| -> Result<_, Error> {
            read_column(get_typed_column_reader::<Int32Type>(column(i)?), rows).map_err(fail)
        };
        let ids = int64(0)?.values;
        let src = int32(1)?.values;
        let dst = int32(2)?.values;
        let bytes = int64(3)?.values;
        let deps = lists(&int64(4)?);
        let lo = optionals(&int32(5)?);
        let hi = optionals(&int32(6)?);
        let ops = optionals(
            &read_column(get_typed_column_reader::<ByteArrayType>(column(7)?), rows)
                .map_err(fail)?,
        );
        let routes = lists(&int32(8)?);
        let waits = optionals(&int64(9)?);
        for k in 0..rows {
            let id = ids[k] as u64;
            let op = match ops[k].as_ref().map(|b| b.data()) {
                None | Some(b"copy") => Op::Copy,
                Some(b"reduce") => Op::Reduce,
                Some(other) => {
                    return Err(bad(format!(
                        "transfer {id}: op '{}' is not copy or reduce",
                        String::from_utf8_lossy(other)
                    )))
                }
            };
            raw.push(RawTransfer {
                id,
                transfer: Transfer {
                    src: src[k] as u32,
                    dst: dst[k] as u32,
                    bytes: bytes[k] as u64,
                },
                deps: deps[k].iter().map(|&d| d as u64).collect(),
                pieces: lo[k].zip(hi[k]).map(|(a, b)| (a as u32, b as u32)),
                op,
                route: routes[k].iter().map(|&n| n as u32).collect(),
                wait: waits[k].map(|ps| Time(ps as u64)),
            });
        }
    }
    Ok((raw, claim))
}
