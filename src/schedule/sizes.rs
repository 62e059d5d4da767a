//! Transfer sizes, stored by how many distinct ones a schedule has.

use std::ops::Range;

/// Every transfer's size in bytes. Schedules send a few sizes over and over (a collective's
/// chunks; a buffer that does not divide evenly leaves two sizes a byte apart): those are kept as
/// a one-byte class a transfer and a table, where a `u64` each was a third of a synthesized
/// transfer's memory (the largest meshes are limited by memory per transfer). A schedule of more
/// than 256 sizes keeps one `u64` each.
#[derive(Clone, Debug)]
pub struct TransferSizes(Form);

#[derive(Clone, Debug)]
enum Form {
    /// Every transfer so far has size `bytes` (any value while there is none); `capacity`
    /// transfers are expected, the room a class list is made with.
    One { bytes: u64, capacity: usize },
    /// Transfer `i` has size `table[class[i]]`; the table holds distinct values.
    Classes { table: Vec<u64>, class: Vec<u8> },
    /// Transfer `i` has size `each[i]`.
    Each(Vec<u64>),
}

impl Default for TransferSizes {
    fn default() -> Self {
        TransferSizes(Form::One {
            bytes: 0,
            capacity: 0,
        })
    }
}

impl TransferSizes {
    /// The most distinct sizes kept as one-byte classes.
    pub const MAX_CLASSES: usize = 256;

    /// No sizes yet, `capacity` transfers expected.
    pub(super) fn with_capacity(capacity: usize) -> TransferSizes {
        TransferSizes(Form::One { bytes: 0, capacity })
    }

    /// Sizes given as a table of at most [`Self::MAX_CLASSES`] distinct values and each
    /// transfer's index into it.
    pub fn from_classes(table: Vec<u64>, class: Vec<u8>) -> TransferSizes {
        assert!(table.len() <= Self::MAX_CLASSES, "at most 256 size classes");
        debug_assert!(class.iter().all(|&c| (c as usize) < table.len()));
        match table.len() {
            0 | 1 => TransferSizes(Form::One {
                bytes: table.first().copied().unwrap_or(0),
                capacity: 0,
            }),
            _ => TransferSizes(Form::Classes { table, class }),
        }
    }

    /// Sizes listed one per transfer, kept as they are (for lists known to hold many sizes).
    pub fn from_each(sizes: Vec<u64>) -> TransferSizes {
        TransferSizes(Form::Each(sizes))
    }

    /// Sizes listed one per transfer, stored in the smallest form that holds them.
    #[cfg(test)]
    fn from_list(sizes: &[u64]) -> TransferSizes {
        let mut stored = TransferSizes::default();
        for (i, &bytes) in sizes.iter().enumerate() {
            stored.push(i, bytes);
        }
        stored
    }

    /// The size of transfer `i`, which must have been pushed.
    #[inline(always)]
    pub(super) fn get(&self, i: usize) -> u64 {
        match &self.0 {
            Form::One { bytes, .. } => *bytes,
            Form::Classes { table, class } => table[class[i] as usize],
            Form::Each(each) => each[i],
        }
    }

    /// Records the size of transfer `index` (`index` is the number recorded so far).
    #[inline]
    pub(super) fn push(&mut self, index: usize, bytes: u64) {
        match &mut self.0 {
            Form::One { bytes: same, .. } if *same == bytes || index == 0 => *same = bytes,
            Form::One { .. } => self.widen(index, bytes),
            Form::Classes { table, class } => match table.iter().position(|&b| b == bytes) {
                Some(c) => class.push(c as u8),
                None => self.widen(index, bytes),
            },
            Form::Each(each) => each.push(bytes),
        }
    }

    /// Records a size that the current form cannot hold: one size becomes classes, and classes
    /// become one value each past [`Self::MAX_CLASSES`].
    #[cold]
    fn widen(&mut self, index: usize, bytes: u64) {
        match &mut self.0 {
            Form::One {
                bytes: same,
                capacity,
            } => {
                let mut class = Vec::with_capacity((index + 1).next_power_of_two().max(*capacity));
                class.resize(index, 0);
                class.push(1);
                self.0 = Form::Classes {
                    table: vec![*same, bytes],
                    class,
                };
            }
            Form::Classes { table, class } if table.len() < Self::MAX_CLASSES => {
                class.push(table.len() as u8);
                table.push(bytes);
            }
            Form::Classes { table, class } => {
                let mut each: Vec<u64> = class.iter().map(|&c| table[c as usize]).collect();
                each.push(bytes);
                self.0 = Form::Each(each);
            }
            Form::Each(each) => each.push(bytes),
        }
    }

    /// The place `get(i)` reads, for a prefetch.
    #[inline(always)]
    pub(super) fn prefetch(&self, i: usize) {
        match &self.0 {
            Form::One { .. } => {}
            Form::Classes { class, .. } => crate::memory::prefetch(&class[i]),
            Form::Each(each) => crate::memory::prefetch(&each[i]),
        }
    }

    /// The sum of the first `n` transfers' sizes.
    pub(super) fn total(&self, n: usize) -> u64 {
        match &self.0 {
            Form::One { bytes, .. } => bytes * n as u64,
            Form::Classes { table, class } => {
                let mut counts = [0u64; Self::MAX_CLASSES];
                class[..n].iter().for_each(|&c| counts[c as usize] += 1);
                table.iter().zip(counts).map(|(b, k)| b * k).sum()
            }
            Form::Each(each) => each[..n].iter().sum(),
        }
    }

    /// The sizes of transfers `rows`, as their own list.
    pub(super) fn rows(&self, rows: &Range<usize>) -> TransferSizes {
        match &self.0 {
            Form::One { bytes, .. } => TransferSizes(Form::One {
                bytes: *bytes,
                capacity: 0,
            }),
            Form::Classes { table, class } => TransferSizes(Form::Classes {
                table: table.clone(),
                class: class[rows.clone()].to_vec(),
            }),
            Form::Each(each) => TransferSizes(Form::Each(each[rows.clone()].to_vec())),
        }
    }

    /// Bytes held per transfer (0, 1 or 8).
    #[cfg(test)]
    fn bytes_per_transfer(&self) -> usize {
        match &self.0 {
            Form::One { .. } => 0,
            Form::Classes { .. } => 1,
            Form::Each(_) => 8,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    /// Sizes drawn from `distinct` values, pushed one by one, read back as pushed, in the
    /// smallest form that holds them.
    fn round_trip(distinct: u64, n: usize, seed: u64) -> TransferSizes {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let list: Vec<u64> = (0..n)
            .map(|_| 1000 + rng.random_range(0..distinct) * 7)
            .collect();
        let stored = TransferSizes::from_list(&list);
        for (i, &bytes) in list.iter().enumerate() {
            assert_eq!(stored.get(i), bytes, "transfer {i} of {distinct} sizes");
        }
        assert_eq!(stored.total(n), list.iter().sum::<u64>());
        let rows = 3..n - 5;
        let part = stored.rows(&rows);
        for (k, i) in rows.enumerate() {
            assert_eq!(part.get(k), list[i]);
        }
        stored
    }

    #[test]
    fn sizes_read_back_as_pushed_in_the_smallest_form() {
        assert_eq!(round_trip(1, 1000, 1).bytes_per_transfer(), 0);
        assert_eq!(round_trip(2, 1000, 2).bytes_per_transfer(), 1);
        assert_eq!(round_trip(256, 20_000, 3).bytes_per_transfer(), 1);
        assert_eq!(round_trip(300, 20_000, 4).bytes_per_transfer(), 8);
    }

    #[test]
    fn a_second_size_after_many_of_the_first_keeps_them() {
        let mut s = TransferSizes::default();
        for i in 0..100 {
            s.push(i, 64);
        }
        s.push(100, 65);
        assert_eq!((s.get(0), s.get(99), s.get(100)), (64, 64, 65));
        assert_eq!(s.total(101), 100 * 64 + 65);
    }

    #[test]
    fn classes_from_a_table() {
        let s = TransferSizes::from_classes(vec![10, 20], vec![0, 1, 1, 0]);
        assert_eq!(
            (0..4).map(|i| s.get(i)).collect::<Vec<_>>(),
            [10, 20, 20, 10]
        );
        let one = TransferSizes::from_classes(vec![10], vec![0, 0]);
        assert_eq!((one.get(1), one.bytes_per_transfer()), (10, 0));
    }
}
