//! `transfers.parquet`: the per-transfer table of large runs as Parquet (zstd-compressed), which
//! pandas, polars and duckdb read directly, with the columns of `transfers.csv`. A million-row
//! CSV is tens of megabytes of decimal text that every reader parses again; Parquet stores the
//! integer columns delta-friendly and compressed, and readers load them typed.

use std::path::Path;

use parquet::column::writer::ColumnWriter;

use crate::schedule::{parquet_error, parquet_writer, Schedule, TransferIndex, ROW_GROUP};
use crate::sim::SimResult;
use crate::Error;

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
    let fail = |e| parquet_error(path, e);
    let mut writer = parquet_writer(path, SCHEMA, &[], None)?;
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
