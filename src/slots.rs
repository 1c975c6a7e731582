//! `SlotSet`: a set of slots of one tenant's index as a bitset, one bit per slot. The layers hand
//! their survivors to the next layer in this form: building one from the scope lists costs one
//! bit write per slot, counting it one popcount per 64 slots (of those in use), and a membership test is one bit
//! test — where a sorted `Vec<u32>` needed a sort and a `Vec<bool>` of every slot per layer.
//!
//! A tenant of a million customers has a million slots, and a subject's request sees a few
//! thousand of them: its own profile, the public records, its teams'. Each set keeps a second,
//! small level (`summary`, one bit per word that may be non-zero), so counting, filtering and
//! walking a set cost what it holds, not the tenant's size.

#[derive(Debug, Clone, Default)]
pub struct SlotSet {
    words: Vec<u64>,
    /// Bit `w` is set when `words[w]` may be non-zero (a removal leaves it set). Every pass reads
    /// the words through it.
    summary: Vec<u64>,
}

impl PartialEq for SlotSet {
    fn eq(&self, other: &SlotSet) -> bool {
        self.iter().eq(other.iter())
    }
}

impl Eq for SlotSet {}

impl SlotSet {
    /// An empty set able to hold slots `0..slots`.
    pub fn new(slots: usize) -> SlotSet {
        let words = slots.div_ceil(64);
        SlotSet { words: vec![0; words], summary: vec![0; words.div_ceil(64)] }
    }

    pub fn insert(&mut self, slot: u32) {
        let slot = slot as usize;
        let w = slot / 64;
        if let Some(word) = self.words.get_mut(w) {
            // Only a word's first slot marks it: a run of slots into the same word (a scope's list)
            // writes the summary once.
            if *word == 0 {
                self.summary[w / 64] |= 1 << (w % 64);
            }
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
            self.summary.resize((word + 1).div_ceil(64), 0);
        }
        self.insert(slot);
    }

    pub fn remove(&mut self, slot: u32) {
        let slot = slot as usize;
        if let Some(word) = self.words.get_mut(slot / 64) {
            *word &= !(1 << (slot % 64));
        }
    }

    /// An empty set of this one's capacity, filled with `word(w, words[w])` for each marked word.
    fn map_words(&self, mut word: impl FnMut(usize, u64) -> u64) -> SlotSet {
        let mut out = SlotSet { words: vec![0; self.words.len()], summary: vec![0; self.summary.len()] };
        for (s, marks) in self.summary.iter().enumerate() {
            let mut kept_marks = 0u64;
            for mark in Bits(*marks) {
                let w = s * 64 + mark as usize;
                let kept = word(w, self.words[w]);
                if kept != 0 {
                    out.words[w] = kept;
                    kept_marks |= 1 << mark;
                }
            }
            out.summary[s] = kept_marks;
        }
        out
    }

    /// Adds every slot of `other`, word by word through its summary (a slot beyond this set's
    /// capacity is left out, as `insert` leaves it).
    pub fn union_with(&mut self, other: &SlotSet) {
        for (s, marks) in other.summary.iter().enumerate() {
            for mark in Bits(*marks) {
                let w = s * 64 + mark as usize;
                let word = other.words[w];
                let Some(mine) = self.words.get_mut(w).filter(|_| word != 0) else { continue };
                if *mine == 0 {
                    self.summary[w / 64] |= 1 << (w % 64);
                }
                *mine |= word;
            }
        }
    }

    /// The slots of this set that are not in `other`, word by word.
    pub fn and_not(&self, other: &SlotSet) -> SlotSet {
        self.map_words(|w, word| word & !other.words.get(w).copied().unwrap_or(0))
    }

    /// The slots in both this set and `other`, ascending, read through this set's words in use:
    /// no set is built (a tenant of a million slots would zero 128 KB for it per query).
    pub fn iter_and<'a>(&'a self, other: &'a SlotSet) -> impl Iterator<Item = u32> + 'a {
        self.summary.iter().enumerate().flat_map(move |(s, marks)| {
            Bits(*marks).flat_map(move |mark| {
                let w = s * 64 + mark as usize;
                let word = self.words[w] & other.words.get(w).copied().unwrap_or(0);
                Bits(word).map(move |b| (w * 64) as u32 + b)
            })
        })
    }

    /// Bytes held (capacities).
    pub fn heap_bytes(&self) -> usize {
        (self.words.capacity() + self.summary.capacity()) * 8
    }

    /// How many slots are in the set.
    pub fn len(&self) -> usize {
        let mut len = 0;
        for (s, marks) in self.summary.iter().enumerate() {
            for mark in Bits(*marks) {
                len += self.words[s * 64 + mark as usize].count_ones() as usize;
            }
        }
        len
    }

    pub fn is_empty(&self) -> bool {
        self.iter().next().is_none()
    }

    /// The slots in ascending order.
    pub fn iter(&self) -> Iter<'_> {
        Iter { set: self, at: Cursor::default() }
    }

    /// A new set of the slots of this one for which `keep` holds, asked in ascending order.
    pub fn filter(&self, mut keep: impl FnMut(u32) -> bool) -> SlotSet {
        self.map_words(|w, word| {
            let mut out = 0u64;
            for b in Bits(word) {
                if keep((w * 64) as u32 + b) {
                    out |= 1 << b;
                }
            }
            out
        })
    }
}

/// Where a walk over a set's slots has got to.
#[derive(Default)]
struct Cursor {
    /// The next summary word to read.
    next_summary: usize,
    /// The summary word being read, and its marks not yet visited.
    summary: (usize, u64),
    /// The word being read, and its bits not yet returned.
    word: (usize, u64),
}

impl Cursor {
    fn next(&mut self, set: &SlotSet) -> Option<u32> {
        loop {
            if self.word.1 != 0 {
                let bit = self.word.1.trailing_zeros();
                self.word.1 &= self.word.1 - 1;
                return Some((self.word.0 * 64) as u32 + bit);
            }
            if self.summary.1 != 0 {
                let mark = self.summary.1.trailing_zeros() as usize;
                self.summary.1 &= self.summary.1 - 1;
                let w = self.summary.0 * 64 + mark;
                self.word = (w, set.words[w]);
                continue;
            }
            let s = self.next_summary;
            self.summary = (s, *set.summary.get(s)?);
            self.next_summary += 1;
        }
    }
}

/// The slots of a set in ascending order (`SlotSet::iter`).
pub struct Iter<'a> {
    set: &'a SlotSet,
    at: Cursor,
}

impl Iterator for Iter<'_> {
    type Item = u32;

    fn next(&mut self) -> Option<u32> {
        self.at.next(self.set)
    }
}

/// The slots in ascending order, consuming the set.
impl IntoIterator for SlotSet {
    type Item = u32;
    type IntoIter = IntoIter;

    fn into_iter(self) -> IntoIter {
        IntoIter { set: self, at: Cursor::default() }
    }
}

pub struct IntoIter {
    set: SlotSet,
    at: Cursor,
}

impl Iterator for IntoIter {
    type Item = u32;

    fn next(&mut self) -> Option<u32> {
        self.at.next(&self.set)
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
        set.remove(63);
        set.remove(64);
        assert_eq!(set.iter().collect::<Vec<_>>(), [0, 5, 128, 199]);
        assert_eq!((set.len(), set.filter(|s| s > 100).len()), (4, 2));
        let mut removed = SlotSet::new(200);
        removed.insert(3);
        removed.remove(3);
        assert!(removed.is_empty() && removed == SlotSet::new(200));
    }

    proptest::proptest! {
        #[test]
        fn a_union_holds_what_inserting_each_slot_holds(
            capacity in 0usize..2000,
            mine in proptest::collection::vec(0u32..2100, 0..200),
            theirs in proptest::collection::vec(0u32..2100, 0..200),
            taken in proptest::collection::vec(0u32..2100, 0..50),
        ) {
            let mut other = SlotSet::new(0);
            for slot in &theirs {
                other.insert_growing(*slot);
            }
            // Slots taken off leave the summary marked: the union must skip what is now empty.
            for slot in &taken {
                other.remove(*slot);
            }
            let (mut union, mut expected) = (SlotSet::new(capacity), SlotSet::new(capacity));
            for slot in &mine {
                union.insert(*slot);
                expected.insert(*slot);
            }
            union.union_with(&other);
            for slot in other.iter() {
                expected.insert(slot);
            }
            proptest::prop_assert_eq!(union.iter().collect::<Vec<_>>(), expected.iter().collect::<Vec<_>>());
            proptest::prop_assert_eq!(union.len(), expected.len());
            // The summary marks every word in use: a filter (which reads through it) keeps all.
            proptest::prop_assert_eq!(union.filter(|_| true).len(), expected.len());
        }
    }

    #[test]
    fn a_few_slots_among_millions_are_found_at_both_ends() {
        let mut set = SlotSet::new(3_000_000);
        let slots = [0, 63, 4095, 4096, 262_143, 262_144, 1_500_001, 2_999_999];
        for slot in slots {
            set.insert(slot);
        }
        assert_eq!(set.iter().collect::<Vec<_>>(), slots);
        assert_eq!(set.clone().into_iter().collect::<Vec<_>>(), slots);
        assert_eq!(set.len(), slots.len());
        let mut others = SlotSet::new(3_000_000);
        others.insert(4096);
        others.insert(2_999_999);
        assert_eq!(
            set.and_not(&others).iter().collect::<Vec<_>>(),
            [0, 63, 4095, 262_143, 262_144, 1_500_001]
        );
        assert_eq!(
            set.filter(|s| s % 2 == 1).iter().collect::<Vec<_>>(),
            [63, 4095, 262_143, 1_500_001, 2_999_999]
        );
    }
}
