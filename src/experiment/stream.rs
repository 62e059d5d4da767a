//! `schedule.parquet` written while the synthesizer makes the schedule: on two cores the
//! synthesis leaves one idle, and writing a 16.8M-transfer schedule beside the validator and the
//! simulator instead slowed both (a 64x64 mesh all-gather with `--out` took 1.4x its time
//! without). Where the schedule is simulated as it is made, its rows come with their simulated
//! times and `transfers.parquet` is written the same way.

use std::path::PathBuf;
use std::sync::mpsc::{sync_channel, SyncSender};
use std::sync::Mutex;
use std::thread::JoinHandle;

use super::Tables;
use crate::collective::Collective;
use crate::report::{TransfersFile, LEADING_TRANSFER_COLUMNS};
use crate::schedule::{ScheduleFile, ScheduleRows};
use crate::sim::TransferTimes;
use crate::synth::ScheduleTap;
use crate::Error;

/// Row groups waiting for the writer: a bound on the memory held when it falls behind.
const QUEUED_ROW_GROUPS: usize = 2;

/// A [`ScheduleTap`] writing the schedules it is given to `path` as Parquet, when `tables` says a
/// schedule of their size is written as Parquet; and rows that come with simulated times to
/// `transfers` as `transfers.parquet`, when given.
#[derive(Debug)]
pub struct ScheduleStream {
    path: PathBuf,
    transfers: Option<PathBuf>,
    tables: Tables,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    begun: u64,
    active: Option<Active>,
}

/// The stream being written: its id, where its rows go, and the thread writing them.
#[derive(Debug)]
struct Active {
    id: u64,
    rows: SyncSender<(ScheduleRows, Option<TransferTimes>)>,
    writer: JoinHandle<Result<(), Error>>,
}

impl Active {
    /// Waits for the writer: the file is whole when it returns `Ok`.
    fn end(self) -> Result<(), Error> {
        drop(self.rows);
        self.writer
            .join()
            .expect("the schedule writer does not panic")
    }
}

impl ScheduleStream {
    pub fn new(path: PathBuf, transfers: Option<PathBuf>, tables: Tables) -> ScheduleStream {
        ScheduleStream {
            path,
            transfers,
            tables,
            state: Mutex::new(State::default()),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("the stream state is not poisoned")
    }
}

impl ScheduleTap for ScheduleStream {
    fn begin(&self, rows: usize, claim: &Collective) -> Option<u64> {
        let mut state = self.state();
        if let Some(previous) = state.active.take() {
            // Overwritten below (or by the caller): its outcome does not matter.
            let _ = previous.end();
        }
        if !self.tables.parquet(rows) {
            return None;
        }
        state.begun += 1;
        let (sender, receiver) =
            sync_channel::<(ScheduleRows, Option<TransferTimes>)>(QUEUED_ROW_GROUPS);
        let (path, claim) = (self.path.clone(), claim.clone());
        let transfers_path = self.transfers.clone();
        let writer = std::thread::spawn(move || {
            // Behind the synthesis, which plans every row and is the run's critical path.
            crate::priority::run_behind();
            let mut file = ScheduleFile::create(Some(&claim), &path)?;
            let mut transfers = None;
            for (rows, times) in receiver {
                let encoded = file.encode(rows.into_columns(false), false)?;
                if let (Some(times), Some(path)) = (times, &transfers_path) {
                    if transfers.is_none() {
                        transfers = Some(TransfersFile::create(path)?);
                    }
                    // The transfers' first columns are the schedule's: encoded once.
                    let leading = encoded[..LEADING_TRANSFER_COLUMNS].to_vec();
                    transfers.as_mut().expect("created above").write_encoded(
                        leading,
                        &times.issued,
                        &times.completed,
                        false,
                    )?;
                }
                file.append(encoded)?;
            }
            if let Some(transfers) = transfers {
                transfers.close()?;
            }
            file.close()
        });
        state.active = Some(Active {
            id: state.begun,
            rows: sender,
            writer,
        });
        Some(state.begun)
    }

    fn rows(&self, stream: u64, rows: ScheduleRows, times: Option<TransferTimes>) {
        let state = self.state();
        if let Some(active) = state.active.as_ref().filter(|a| a.id == stream) {
            // A writer that failed has hung up; its error comes out at `finish`.
            let _ = active.rows.send((rows, times));
        }
    }

    fn finish(&self, kept: Option<u64>) -> Result<bool, Error> {
        let Some(active) = self.state().active.take() else {
            return Ok(false);
        };
        let whole = kept == Some(active.id);
        let written = active.end();
        if whole {
            written.map(|()| true)
        } else {
            Ok(false)
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::collective::CollectiveKind;
    use crate::experiment::TableFormat;
    use crate::schedule::write_schedule_parquet;
    use crate::synth::{synthesize, SynthOptions};
    use crate::topology::TopologyOptions;

    fn parquet_always() -> Tables {
        Tables {
            transfers: true,
            format: Some(TableFormat::Parquet),
        }
    }

    /// The streamed file is the file written from the finished schedule, byte for byte: on a
    /// 33x32 mesh (1.1M transfers) across the row-group boundary too.
    #[test]
    fn the_streamed_file_is_the_schedule_s_file() {
        let scratch = tempfile::tempdir().unwrap();
        let dir = scratch.path();
        for shape in ["3x3", "33x32"] {
            let topology = TopologyOptions::new(format!("mesh:{shape}"))
                .build()
                .unwrap();
            let npus = topology.npus();
            let c = Collective::new(
                CollectiveKind::AllGather,
                (0..npus).collect(),
                1 << 20,
                1,
                None,
            )
            .unwrap();
            let streamed = dir.join(format!("{shape}-streamed.parquet"));
            let stream = Arc::new(ScheduleStream::new(
                streamed.clone(),
                None,
                parquet_always(),
            ));
            let options = SynthOptions {
                tap: Some(stream.clone()),
                ..SynthOptions::default()
            };
            let synthesis = synthesize(&topology, std::slice::from_ref(&c), &options).unwrap();
            let schedule = &synthesis.schedules[0];
            assert!(
                synthesis.streamed.is_some(),
                "{shape}: one forward collective streams"
            );
            assert!(stream.finish(synthesis.streamed).unwrap(), "{shape}");
            let written = dir.join(format!("{shape}-written.parquet"));
            write_schedule_parquet(schedule, &written).unwrap();
            assert!(
                std::fs::read(&streamed).unwrap() == std::fs::read(&written).unwrap(),
                "{shape}: the streamed file differs"
            );
        }
    }

    /// Only the stream in progress can be kept; an earlier one, or none, leaves the writing to
    /// the caller; a schedule too small for Parquet is not streamed.
    #[test]
    fn only_the_last_stream_is_kept() {
        let scratch = tempfile::tempdir().unwrap();
        let dir = scratch.path();
        let c = Collective::new(CollectiveKind::AllGather, (0..4).collect(), 64, 1, None).unwrap();
        let stream = ScheduleStream::new(dir.join("s.parquet"), None, parquet_always());
        let first = stream.begin(12, &c).unwrap();
        let second = stream.begin(12, &c).unwrap();
        assert_ne!(first, second);
        assert!(!stream.finish(Some(first)).unwrap());
        assert!(
            !stream.finish(Some(second)).unwrap(),
            "finish ended it already"
        );
        let third = stream.begin(12, &c).unwrap();
        assert!(stream.finish(Some(third)).unwrap());
        let by_size = ScheduleStream::new(
            dir.join("t.parquet"),
            None,
            Tables {
                transfers: true,
                format: None,
            },
        );
        assert_eq!(by_size.begin(12, &c), None, "12 rows go to JSON");
        assert!(!by_size.finish(None).unwrap());
    }
}
