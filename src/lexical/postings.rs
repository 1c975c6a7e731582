//! The lexical index's posting lists, by term id.
//!
//! Most of a CRM tenant's terms have no postings at all: a customer's name, email and order
//! number are the words of a personal record, which is scored among its caller's candidates and
//! never through the postings (`bm25::Reach`). A list per term id, even an empty inline one, was
//! 24 bytes for each of those millions of terms; here a term id holds a 4-byte handle, and only a
//! term that shared records hold has a list. A list that empties is freed for the next term.

use smallvec::SmallVec;

/// One term's postings, `slot << 8 | tf`, unordered. Most terms that have postings are in a few
/// records (a SKU, an SOP's number): up to four are kept inline, without an allocation.
type Postings = SmallVec<[u32; 4]>;

/// A term id's handle when it has no list.
const NONE: u32 = u32::MAX;

#[derive(Default)]
pub(super) struct PostingLists {
    /// Term id → the index of its list in `lists`, or `NONE`.
    by_term: Vec<u32>,
    lists: Vec<Postings>,
    /// Indexes of `lists` free for reuse (each empty).
    free: Vec<u32>,
}

impl PostingLists {
    /// Makes room for term ids below `bound`.
    pub(super) fn cover(&mut self, bound: usize) {
        if self.by_term.len() < bound {
            self.by_term.resize(bound, NONE);
        }
    }

    /// Term `id`'s postings.
    pub(super) fn get(&self, id: u32) -> &[u32] {
        match self.by_term.get(id as usize) {
            Some(&list) if list != NONE => &self.lists[list as usize],
            _ => &[],
        }
    }

    /// Adds `posting` to term `id`'s list (`cover`ed), and gives its position there.
    pub(super) fn push(&mut self, id: u32, posting: u32) -> u32 {
        let list = match self.by_term[id as usize] {
            NONE => {
                let list = match self.free.pop() {
                    Some(list) => list,
                    None => {
                        self.lists.push(Postings::new());
                        (self.lists.len() - 1) as u32
                    }
                };
                self.by_term[id as usize] = list;
                list
            }
            list => list,
        };
        let postings = &mut self.lists[list as usize];
        postings.push(posting);
        (postings.len() - 1) as u32
    }

    /// Takes `slot`'s posting at `at` out of term `id`'s list, if it is there: the list's last
    /// posting moves into the hole, and is given back so its record can note where it went. A
    /// list left empty is freed.
    pub(super) fn take(&mut self, id: u32, at: usize, slot: u32) -> Option<u32> {
        let list = *self.by_term.get(id as usize).filter(|list| **list != NONE)?;
        let postings = &mut self.lists[list as usize];
        if postings.get(at).is_none_or(|p| p >> 8 != slot) {
            return None;
        }
        postings.swap_remove(at);
        if postings.is_empty() {
            *postings = Postings::new();
            self.by_term[id as usize] = NONE;
            self.free.push(list);
            return None;
        }
        postings.get(at).copied()
    }

    /// Lists in use (a term with postings has one, no other term does).
    #[cfg(test)]
    pub(super) fn in_use(&self) -> usize {
        self.lists.len() - self.free.len()
    }

    /// Bytes held (capacities).
    pub(super) fn heap_bytes(&self) -> usize {
        self.by_term.capacity() * 4
            + self.lists.capacity() * size_of::<Postings>()
            + self.lists.iter().filter(|p| p.spilled()).map(|p| p.capacity() * 4).sum::<usize>()
            + self.free.capacity() * 4
    }
}
