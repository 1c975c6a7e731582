//! `SlotSet`: a set of slots of one tenant's index as a bitset, one bit per slot. The layers hand
//! their survivors to the next layer in this form: building one from the scope lists costs one
//! bit write per slot, counting it one popcount per 64 slots, and a membership test is one bit
//! test — where a sorted `Vec<u32>` needed a sort and a `Vec<bool>` of every slot per layer.

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotSet {
    words: Vec<u64>,
}

impl SlotSet {
    /// An empty set able to hold slots `0..slots`.
    pub fn new(slots: usize) -> SlotSet {
        SlotSet { words: vec![0; slots.div_ceil(64)] }
    }

    pub fn insert(&mut self, slot: u32) {
        let slot = slot as usize;
        if let Some(word) = self.words.get_mut(slot / 64) {
            *word |= 1 << (slot % 64);
        }
    }

    pub fn contains(&self, slot: u32) -> bool {
        let slot = slot as usize;
        self.words.get(slot / 64).is_some_and(|word| word & (1 << (slot % 64)) != 0)
    }

    /// Adds `slot`, growing the set when it is beyond its capacity.
    pub fn insert_growing(&mut self, slot: u32) {
        let word = slot as usize / 64;
        if word >= self.words.len() {
            self.words.resize(word + 1, 0);
        }
        self.insert(slot);
    }

    pub fn remove(&mut self, slot: u32) {
        let slot = slot as usize;
        if let Some(word) = self.words.get_mut(slot / 64) {
            *word &= !(1 << (slot % 64));
        }
    }

    /// The slots of this set that are not in `other`, word by word.
    pub fn and_not(&self, other: &SlotSet) -> SlotSet {
        let words = self
            .words
            .iter()
            .enumerate()
            .map(|(w, word)| word & !other.words.get(w).copied().unwrap_or(0))
            .collect();
        SlotSet { words }
    }

    /// How many slots are in the set.
    pub fn len(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.words.iter().all(|w| *w == 0)
    }

    /// The slots in ascending order.
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.words.iter().enumerate().flat_map(|(w, word)| Bits(*word).map(move |b| (w * 64) as u32 + b))
    }

    /// A new set of the slots of this one for which `keep` holds, asked in ascending order.
    pub fn filter(&self, mut keep: impl FnMut(u32) -> bool) -> SlotSet {
        let words = self
            .words
            .iter()
            .enumerate()
            .map(|(w, word)| {
                Bits(*word).fold(0u64, |out, b| if keep((w * 64) as u32 + b) { out | 1 << b } else { out })
            })
            .collect();
        SlotSet { words }
    }
}

/// The slots in ascending order, consuming the set.
impl IntoIterator for SlotSet {
    type Item = u32;
    type IntoIter = IntoIter;

    fn into_iter(self) -> IntoIter {
        IntoIter { words: self.words.into_iter().enumerate(), current: (0, Bits(0)) }
    }
}

pub struct IntoIter {
    words: std::iter::Enumerate<std::vec::IntoIter<u64>>,
    /// The word being read: its index and its bits not yet returned.
    current: (usize, Bits),
}

impl Iterator for IntoIter {
    type Item = u32;

    fn next(&mut self) -> Option<u32> {
        loop {
            if let Some(bit) = self.current.1.next() {
                return Some((self.current.0 * 64) as u32 + bit);
            }
            let (w, word) = self.words.next()?;
            self.current = (w, Bits(word));
        }
    }
}

/// The set bits of one word, lowest first.
struct Bits(u64);

impl Iterator for Bits {
    type Item = u32;

    fn next(&mut self) -> Option<u32> {
        if self.0 == 0 {
            return None;
        }
        let bit = self.0.trailing_zeros();
        self.0 &= self.0 - 1;
        Some(bit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn behaves_like_a_sorted_deduplicated_list() {
        let mut set = SlotSet::new(200);
        for slot in [5, 63, 64, 199, 5, 0, 128] {
            set.insert(slot);
        }
        assert_eq!(set.iter().collect::<Vec<_>>(), [0, 5, 63, 64, 128, 199]);
        assert_eq!(set.clone().into_iter().collect::<Vec<_>>(), [0, 5, 63, 64, 128, 199]);
        assert_eq!(set.len(), 6);
        assert!(set.contains(63) && !set.contains(62) && !set.contains(1000));
        let even = set.filter(|s| s % 2 == 0);
        assert_eq!(even.iter().collect::<Vec<_>>(), [0, 64, 128]);
        assert!(SlotSet::new(10).is_empty());
        set.insert(500); // beyond capacity: ignored, as no such slot exists
        assert_eq!(set.len(), 6);
        let mut other = SlotSet::new(0);
        other.insert_growing(63);
        other.insert_growing(128);
        other.insert_growing(700);
        other.remove(700);
        assert_eq!(set.and_not(&other).iter().collect::<Vec<_>>(), [0, 5, 64, 199]);
    }
}
