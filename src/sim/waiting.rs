//! The FIFO of transfers waiting at a link, stored as runs of evenly spaced transfer indices.
//!
//! Generated schedules queue long arithmetic runs on a link: a direct all-to-all puts an NPU's
//! whole row (consecutive indices) on its uplink, and every source's transfer to one destination
//! (indices a row apart) on that destination's downlink. A run costs 12 bytes however long it is.
//! The first and the last run live in the link's state ([`Waiting`], the cache line a hop touches
//! anyway); only the runs between them go to a separate word queue ([`Middle`]), and only where a
//! run breaks. A switch all-to-all's queues never leave the link state.

use std::collections::VecDeque;

use crate::schedule::TransferIndex;

/// Transfer indices `first`, `first + stride`, ... (`len` of them; `stride` is meaningless while
/// `len` is below 2).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Run {
    pub first: TransferIndex,
    stride: u32,
    pub len: u32,
}

/// Longest run and largest stride: a run's length and stride each fit one [`Middle`] word.
const FIELD: u32 = (1 << 30) - 1;
/// A [`Middle`] word with this bit set describes the run begun by the index before it.
const RUN: u32 = 1 << 31;
/// With [`RUN`]: the word is the run's stride (else its length less one).
const STRIDE: u32 = 1 << 30;

impl Run {
    fn single(t: TransferIndex) -> Run {
        Run {
            first: t,
            stride: 1,
            len: 1,
        }
    }

    /// Makes `t` the run's next element if it continues the run.
    #[inline(always)]
    fn extend_to(&mut self, t: TransferIndex) -> bool {
        let first = self.first as u64;
        if self.len == 1 {
            let stride = (t as u64).wrapping_sub(first);
            if (1..=FIELD as u64).contains(&stride) {
                self.stride = stride as u32;
                self.len = 2;
                return true;
            }
            return false;
        }
        if first + self.stride as u64 * self.len as u64 == t as u64 && self.len < FIELD {
            self.len += 1;
            return true;
        }
        false
    }
}

/// The runs waiting between a link's first and last ones, in 4-byte words: an index (top bit
/// clear) begins a run; a [`RUN`] | [`STRIDE`] word after it gives the run's stride (else 1); a
/// [`RUN`] word then gives its length less one (else 1). Without folding (schedules past 2^31
/// transfers, whose indices may have the top bit set) every word is one index.
#[derive(Default)]
pub(super) struct Middle {
    words: VecDeque<u32>,
}

impl Middle {
    /// Whether the FIFOs of a schedule of `transfers` can fold runs into words: every index
    /// below [`RUN`].
    pub fn folds(transfers: usize) -> bool {
        transfers <= RUN as usize
    }

    /// The word written last, for fetching ahead of a push.
    pub fn back(&self) -> Option<&u32> {
        let (front, back) = self.words.as_slices();
        back.last().or(front.last())
    }

    fn push(&mut self, run: Run, fold: bool) {
        let words = &mut self.words;
        if !fold || (run.len == 2 && run.stride != 1) {
            let mut t = run.first;
            for _ in 0..run.len {
                words.push_back(t);
                t = t.wrapping_add(run.stride);
            }
            return;
        }
        words.push_back(run.first);
        if run.len > 1 {
            if run.stride != 1 {
                words.push_back(RUN | STRIDE | run.stride);
            }
            words.push_back(RUN | (run.len - 1));
        }
    }

    fn pop(&mut self, fold: bool) -> Option<Run> {
        let mut run = Run::single(self.words.pop_front()?);
        if !fold {
            return Some(run);
        }
        if let Some(&w) = self.words.front() {
            if w & (RUN | STRIDE) == RUN | STRIDE {
                run.stride = w & FIELD;
                self.words.pop_front();
            }
        }
        if let Some(&w) = self.words.front() {
            if w & (RUN | STRIDE) == RUN {
                run.len += w & FIELD;
                self.words.pop_front();
            }
        }
        Some(run)
    }
}

/// A link's first and last waiting runs (the FIFO is `head`, the link's [`Middle`], `tail`).
/// Empty when `head` is; `tail` is empty only when the middle is too.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Waiting {
    pub head: Run,
    tail: Run,
}

impl Waiting {
    /// Appends `t`; `fold` must be the same for every call on one FIFO (see [`Middle`]).
    #[inline(always)]
    pub fn push(&mut self, middle: &mut Middle, t: TransferIndex, fold: bool) {
        if self.head.len == 0 {
            self.head = Run::single(t);
        } else if self.tail.len == 0 {
            if !self.head.extend_to(t) {
                self.tail = Run::single(t);
            }
        } else if !self.tail.extend_to(t) {
            middle.push(self.tail, fold);
            self.tail = Run::single(t);
        }
    }

    /// Appends `first..first + len`, as [`Waiting::push`] one by one would, in a step or two.
    pub fn push_consecutive(
        &mut self,
        middle: &mut Middle,
        first: TransferIndex,
        len: u32,
        fold: bool,
    ) {
        let end = first as u64 + len as u64;
        let mut t = first as u64;
        while t < end {
            self.push(middle, t as TransferIndex, fold);
            t += 1;
            // `t - 1` ended the last run: the run takes as many of the rest as it can.
            let last = if self.tail.len > 0 {
                &mut self.tail
            } else {
                &mut self.head
            };
            if last.len == 1 {
                last.stride = 1;
            }
            if last.stride == 1 {
                let joined = (end - t).min((FIELD - last.len) as u64);
                last.len += joined as u32;
                t += joined;
            }
        }
    }

    /// Takes the first transfer of a non-empty FIFO.
    #[inline(always)]
    pub fn pop(&mut self, middle: &mut Middle, fold: bool) -> TransferIndex {
        debug_assert!(self.head.len > 0, "pop from an empty link queue");
        let head = &mut self.head;
        let t = head.first;
        head.first = head.first.wrapping_add(head.stride);
        head.len -= 1;
        if head.len == 0 {
            match middle.pop(fold) {
                Some(run) => *head = run,
                None => *head = std::mem::take(&mut self.tail),
            }
        }
        t
    }

    /// The transfer [`Waiting::pop`] takes next, if any waits.
    #[inline(always)]
    pub fn front(&self) -> Option<TransferIndex> {
        (self.head.len > 0).then_some(self.head.first)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// Pops everything left, in order.
    fn drain(waiting: &mut Waiting, middle: &mut Middle, fold: bool) -> Vec<TransferIndex> {
        std::iter::from_fn(|| waiting.front().map(|_| waiting.pop(middle, fold))).collect()
    }

    /// Random pushes (strided runs, consecutive runs, jumps back, repeats of a gap) and pops,
    /// interleaved, against a `VecDeque`: the FIFO keeps order whatever the runs look like.
    #[test]
    fn waiting_transfers_leave_in_the_order_they_came() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
        for fold in [true, false] {
            for _ in 0..300 {
                let (mut waiting, mut middle) = (Waiting::default(), Middle::default());
                let mut expected = VecDeque::new();
                let mut last = 0u32;
                for _ in 0..rng.random_range(1..200) {
                    if rng.random_bool(0.3) && !expected.is_empty() {
                        let t = waiting.pop(&mut middle, fold);
                        assert_eq!(Some(t), expected.pop_front());
                        continue;
                    }
                    if rng.random_bool(0.2) {
                        let len = rng.random_range(1..50);
                        let first = (last + rng.random_range(0..3)) % RUN;
                        waiting.push_consecutive(&mut middle, first, len, fold);
                        expected.extend(first..first + len);
                        last = first + len;
                        continue;
                    }
                    let stride = [1, 7, 4095][rng.random_range(0..3)];
                    let t = match rng.random_range(0..10) {
                        0 => rng.random_range(0..1000),
                        1 => last.wrapping_add(FIELD + 1), // too wide a gap for a stride
                        _ => last.wrapping_add(stride),
                    };
                    // Folded FIFOs hold indices below the top bit.
                    let t = if fold { t % RUN } else { t };
                    waiting.push(&mut middle, t, fold);
                    expected.push_back(t);
                    last = t;
                }
                assert_eq!(drain(&mut waiting, &mut middle, fold), Vec::from(expected));
                assert!(middle.words.is_empty());
                assert_eq!(waiting, Waiting::default());
            }
        }
    }

    /// A destination's downlink in a direct all-to-all: every source's transfer to it, a row of
    /// the schedule apart, with one longer gap where the destination's own row skips it. Two
    /// runs, both in the link state: nothing goes to the middle.
    #[test]
    fn a_column_of_an_all_to_all_stays_in_two_runs() {
        let n = 64u32;
        let (mut waiting, mut middle) = (Waiting::default(), Middle::default());
        let dst = 20;
        let column: Vec<TransferIndex> = (0..n)
            .filter(|&src| src != dst)
            .map(|src| src * (n - 1) + if dst < src { dst } else { dst - 1 })
            .collect();
        for &t in &column {
            waiting.push(&mut middle, t, true);
        }
        assert!(middle.words.is_empty());
        assert_eq!(waiting.head.len + waiting.tail.len, n - 1);
        assert_eq!(drain(&mut waiting, &mut middle, true), column);
    }

    /// Runs broken often spill into the middle in the compact words: a strided run of 3 or more
    /// is three words, of 2 two indices, a single one word.
    #[test]
    fn middle_runs_take_few_words() {
        let (mut waiting, mut middle) = (Waiting::default(), Middle::default());
        let pushed = [
            0, 1, 2, // head: stride 1
            10, 20, 30, 40, // stride 10: 3 words
            41, 43, // stride 2, two long: 2 words
            7,  // single: 1 word
            5, 6, // tail
        ];
        for t in pushed {
            waiting.push(&mut middle, t, true);
        }
        assert_eq!(middle.words.len(), 6);
        assert_eq!(drain(&mut waiting, &mut middle, true), pushed);
        // Without folding, indices with the top bit set are indices, not run words.
        let pushed = [7, RUN + 4, 3, RUN | 1, RUN | STRIDE | 2, 9, 11, 13];
        for t in pushed {
            waiting.push(&mut middle, t, false);
        }
        assert_eq!(drain(&mut waiting, &mut middle, false), pushed);
    }
}
