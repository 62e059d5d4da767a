//! `transfers.parquet`: the per-transfer table of large runs as Parquet (zstd-compressed), which
//! pandas, polars and duckdb read directly, with the columns of `transfers.csv`. A million-row
//! CSV is tens of megabytes of decimal text that every reader parses again; Parquet stores the
//! integer columns delta-friendly and compressed, and readers load them typed.

use std::path::Path;
use std::sync::Arc;

use parquet::basic::{Compression, ZstdLevel};
use parquet::column::writer::ColumnWriter;
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::parser::parse_message_type;

use crate::schedule::{Schedule, TransferIndex};
use crate::sim::SimResult;
use crate::Error;

/// Rows per row group: bounded buffers, whatever the run's size.
const ROW_GROUP: usize = 1 << 20;

const SCHEMA: &str = "message transfers {
    REQUIRED INT64 id (INTEGER(64, false));
    REQUIRED INT32 src (INTEGER(32, false));
    REQUIRED INT32 dst (INTEGER(32, false));
    REQUIRED INT64 bytes (INTEGER(64, false));
    REQUIRED DOUBLE start_ns;
    REQUIRED DOUBLE end_ns;
}";

/// Writes `transfers.parquet` (`id,src,dst,bytes,start_ns,end_ns`, as `transfers.csv`).
pub fn write_transfers_parquet(
    schedule: &Schedule,
    result: &SimResult,
    path: &Path,
) -> Result<(), Error> {
    let fail = |e: parquet::errors::ParquetError| {
        Error::io(path.display(), std::io::Error::other(e.to_string()))
    };
    let schema = Arc::new(parse_message_type(SCHEMA).expect("the schema parses"));
    let props = Arc::new(
        WriterProperties::builder()
            .set_compression(Compression::ZSTD(
                ZstdLevel::try_new(1).expect("level 1 exists"),
            ))
            // Ids and times are mostly distinct: dictionaries cost more than they save.
            .set_dictionary_enabled(false)
            .set_statistics_enabled(EnabledStatistics::Chunk)
            .build(),
    );
    let file = std::fs::File::create(path).map_err(|e| Error::io(path.display(), e))?;
    let mut writer = SerializedFileWriter::new(file, schema, props).map_err(fail)?;
    let ns = |t: crate::units::Time| t.ps() as f64 / 1e3;
    for start in (0..schedule.len()).step_by(ROW_GROUP) {
        let rows = start..(start + ROW_GROUP).min(schedule.len());
        let transfer = |i: usize| schedule.transfer(i as TransferIndex);
        let mut group = writer.next_row_group().map_err(fail)?;
        let mut column = 0;
        while let Some(mut col) = group.next_column().map_err(fail)? {
            match (column, col.untyped()) {
                (0, ColumnWriter::Int64ColumnWriter(w)) => {
                    let v: Vec<i64> = rows
                        .clone()
                        .map(|i| schedule.id(i as TransferIndex) as i64)
                        .collect();
                    w.write_batch(&v, None, None).map_err(fail)?;
                }
                (1 | 2, ColumnWriter::Int32ColumnWriter(w)) => {
                    let v: Vec<i32> = rows
                        .clone()
                        .map(|i| {
                            let t = transfer(i);
                            (if column == 1 { t.src } else { t.dst }) as i32
                        })
                        .collect();
                    w.write_batch(&v, None, None).map_err(fail)?;
                }
                (3, ColumnWriter::Int64ColumnWriter(w)) => {
                    let v: Vec<i64> = rows.clone().map(|i| transfer(i).bytes as i64).collect();
                    w.write_batch(&v, None, None).map_err(fail)?;
                }
                (4 | 5, ColumnWriter::DoubleColumnWriter(w)) => {
                    let times = if column == 4 {
                        &result.issued
                    } else {
                        &result.completed
                    };
                    let v: Vec<f64> = rows.clone().map(|i| ns(times[i])).collect();
                    w.write_batch(&v, None, None).map_err(fail)?;
                }
                _ => unreachable!("the columns follow the schema"),
            }
            col.close().map_err(fail)?;
            column += 1;
        }
        group.close().map_err(fail)?;
    }
    writer.close().map_err(fail)?;
    Ok(())
}
