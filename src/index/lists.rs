//! Slots listed under a text: a tenant's records by scope (`TenantIndex::by_scope`) and by exact
//! term (`by_term`: keys, aliases, identifiers, what lets a query that names an order number, an
//! email or a key find its record without a score).
//!
//! Most of those texts belong to one record: a customer profile brings its `user:` scope, its
//! key, its email and its order number. As maps from a `Box<str>` or `Arc<str>` per text to a
//! `SmallVec` of slots, with each record holding its terms' `Arc`s, that cost an allocation per
//! text, a 40-byte entry with the map's spare room, and the record's list of pointers. Here the
//! texts are `TextIds` (one buffer, 4-byte ids), a text's one slot is held as itself in a
//! `u32`, only texts of several slots have a list, and a record keeps its terms' ids (4 bytes
//! each) for its removal.

use crate::texts::TextIds;
use std::collections::HashMap;
use std::collections::hash_map::Entry;

/// `SlotLists::slots` holds an id's one slot as itself, a list of several as `MANY | k` (the list
/// is `many[k]`), and a free id as `FREE`. Slots stay below `MANY`: a tenant of 2³¹ records does
/// not fit in memory.
const MANY: u32 = 1 << 31;
const FREE: u32 = u32::MAX;

/// Up to this many slots a list is searched to take one off; past it, the list knows where each
/// of its slots is (`Many::at`).
const SEARCHED: usize = 64;

#[derive(Default)]
pub struct SlotLists {
    texts: TextIds,
    /// Text id → its slot, or where its slots are (`MANY`), or `FREE`.
    slots: Vec<u32>,
    /// The lists of texts with more than one slot; an empty one is free for reuse.
    many: Vec<Many>,
    free_many: Vec<u32>,
}

/// The slots of a text listed under several, in the order they were listed: the order an
/// approximate index is trained in (`Ivf::build`), so taking a slot off keeps it. Taking one off
/// a long list (`public`'s hundred thousand) by searching it cost the list's length, and taking
/// them all off (forgetting a scope, undoing an import) its square; a long list instead knows
/// where each slot is, and a slot taken off leaves a hole (`FREE`) until holes are half the
/// list, when one pass closes them all: a removal costs a constant, amortized.
#[derive(Default)]
struct Many {
    slots: Vec<u32>,
    holes: usize,
    /// Slot → its position in `slots`, once the list has outgrown `SEARCHED`. Boxed: most
    /// lists are short (an order number two records name), and a `HashMap` inline would
    /// double each one's size for the few that grow.
    #[allow(clippy::box_collection)]
    at: Option<Box<HashMap<u32, u32>>>,
}

impl Many {
    fn of(slots: Vec<u32>) -> Many {
        Many { slots, holes: 0, at: None }
    }

    fn len(&self) -> usize {
        self.slots.len() - self.holes
    }

    /// Adds `slot` unless it is listed already (a record naming a scope twice is listed once).
    fn push(&mut self, slot: u32) {
        if self.at.is_none() && self.slots.len() >= SEARCHED {
            self.at = Some(Box::new(self.positions()));
        }
        let listed = match &mut self.at {
            Some(at) => match at.entry(slot) {
                Entry::Occupied(_) => true,
                Entry::Vacant(entry) => {
                    entry.insert(self.slots.len() as u32);
                    false
                }
            },
            None => self.slots.contains(&slot),
        };
        if !listed {
            self.slots.push(slot);
        }
    }

    /// Where each slot is; only asked of a list without holes (they exist only while `at` does).
    fn positions(&self) -> HashMap<u32, u32> {
        self.slots.iter().enumerate().map(|(position, slot)| (*slot, position as u32)).collect()
    }

    fn take(&mut self, slot: u32) {
        let Some(at) = &mut self.at else {
            if let Some(position) = self.slots.iter().position(|s| *s == slot) {
                self.slots.remove(position);
            }
            return;
        };
        let Some(position) = at.remove(&slot) else { return };
        self.slots[position as usize] = FREE;
        self.holes += 1;
        if self.holes * 2 >= self.slots.len() {
            self.slots.retain(|slot| *slot != FREE);
            self.holes = 0;
            self.at = (self.slots.len() > SEARCHED).then(|| Box::new(self.positions()));
        }
    }

    /// The one slot left, if one is.
    fn last(&self) -> Option<u32> {
        self.slots.iter().copied().find(|slot| *slot != FREE)
    }
}

/// The slots listed under one text (`SlotLists::get`), in the order they were listed.
#[derive(Clone, Copy)]
pub struct Listed<'a> {
    slots: &'a [u32],
    len: usize,
}

impl<'a> Listed<'a> {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn iter(&self) -> ListedIter<'a> {
        self.slots.iter().filter(is_held as fn(&&u32) -> bool)
    }
}

fn is_held(slot: &&u32) -> bool {
    **slot != FREE
}

pub type ListedIter<'a> = std::iter::Filter<std::slice::Iter<'a, u32>, fn(&&u32) -> bool>;

impl<'a> IntoIterator for Listed<'a> {
    type Item = &'a u32;
    type IntoIter = ListedIter<'a>;

    fn into_iter(self) -> ListedIter<'a> {
        self.iter()
    }
}

impl SlotLists {
    /// The slots listed under `text` (an exact term normalized as `terms::normalize` gives it).
    pub fn get(&self, text: &str) -> Option<Listed<'_>> {
        self.texts.get(text).map(|id| self.listed(id))
    }

    /// Every listed text with its slots, in no order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, Listed<'_>)> {
        self.texts.iter().map(|(id, text)| (text, self.listed(id)))
    }

    /// How many distinct texts are listed.
    pub fn len(&self) -> usize {
        self.texts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.texts.is_empty()
    }

    fn listed(&self, id: u32) -> Listed<'_> {
        match self.slots[id as usize] {
            FREE => Listed { slots: &[], len: 0 },
            many if many & MANY != 0 => {
                let many = &self.many[(many & !MANY) as usize];
                Listed { slots: &many.slots, len: many.len() }
            }
            _ => Listed { slots: std::slice::from_ref(&self.slots[id as usize]), len: 1 },
        }
    }

    /// Lists `slot` under `text` (once, however often it is given) and gives the text's id, for
    /// `unlist`. `None` (not listed) for a slot of `MANY` or more, or when `TextIds` can take no more text.
    pub fn list(&mut self, text: &str, slot: u32) -> Option<u32> {
        if slot >= MANY {
            return None;
        }
        let id = self.texts.intern(text)?;
        if id as usize == self.slots.len() {
            self.slots.push(FREE);
        }
        match self.slots[id as usize] {
            FREE => {
                self.slots[id as usize] = slot;
                Some(id)
            }
            one if one == slot => Some(id),
            _ => self.add(id, slot).then_some(id),
        }
    }

    /// Adds `slot` to the listed id's slots: a second slot makes them a list.
    fn add(&mut self, id: u32, slot: u32) -> bool {
        let held = self.slots[id as usize];
        if held & MANY != 0 {
            self.many[(held & !MANY) as usize].push(slot);
            return true;
        }
        let k = match self.free_many.pop() {
            Some(k) => {
                self.many[k as usize] = Many::of(vec![held, slot]);
                k
            }
            None if self.many.len() < (FREE & !MANY) as usize => {
                self.many.push(Many::of(vec![held, slot]));
                (self.many.len() - 1) as u32
            }
            None => return false,
        };
        self.slots[id as usize] = MANY | k;
        true
    }

    /// Takes `slot` off the slots of `text`.
    pub fn unlist_text(&mut self, text: &str, slot: u32) {
        if let Some(id) = self.texts.get(text) {
            self.unlist(id, slot);
        }
    }

    /// Takes `slot` off the slots of `id`; the text goes with its last slot.
    pub fn unlist(&mut self, id: u32, slot: u32) {
        let Some(held) = self.slots.get(id as usize).copied() else { return };
        match held {
            FREE => return,
            many if many & MANY != 0 => {
                let k = (many & !MANY) as usize;
                let list = &mut self.many[k];
                list.take(slot);
                if list.len() > 1 {
                    return;
                }
                let last = list.last();
                self.many[k] = Many::default();
                self.free_many.push(k as u32);
                if let Some(last) = last {
                    self.slots[id as usize] = last;
                    return;
                }
            }
            one if one != slot => return,
            _ => {}
        }
        self.slots[id as usize] = FREE;
        self.texts.remove(id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::{BTreeMap, BTreeSet};

    proptest! {
        /// Any sequence of listings and removals leaves each text with the slots a plain map
        /// would hold, through one slot becoming several and back, and ids freed and reused.
        #[test]
        fn lists_hold_what_a_map_holds(ops in proptest::collection::vec((any::<bool>(), 0u8..6, 0u32..5), 1..200)) {
            let mut lists = SlotLists::default();
            let mut ids: BTreeMap<String, u32> = BTreeMap::new();
            let mut model: BTreeMap<String, BTreeSet<u32>> = BTreeMap::new();
            for (add, text, slot) in ops {
                let text = format!("term-{text}");
                let held = model.entry(text.clone()).or_default();
                if add && !held.contains(&slot) {
                    let id = lists.list(&text, slot).expect("listed");
                    prop_assert!(ids.insert(text.clone(), id).is_none_or(|before| before == id || held.is_empty()));
                    held.insert(slot);
                } else if !add && held.remove(&slot) {
                    lists.unlist(ids[&text], slot);
                }
                for (text, held) in &model {
                    prop_assert_eq!(&listed(&lists, text), held, "{}", text);
                }
                let live: BTreeSet<&str> = model.iter().filter(|(_, h)| !h.is_empty()).map(|(t, _)| t.as_str()).collect();
                prop_assert_eq!(lists.iter().map(|(text, _)| text).collect::<BTreeSet<_>>(), live.clone());
                prop_assert_eq!(lists.len(), live.len());
            }
        }
    }

    proptest! {
        /// Past `SEARCHED` slots a list takes slots off by where they are and leaves holes: it
        /// still holds, in the order they were listed, exactly the slots a plain list would,
        /// through holes, compactions, shrinking to one slot and growing again, and slots
        /// listed twice or taken off when they were not listed.
        #[test]
        fn long_lists_keep_their_order_through_removals(ops in proptest::collection::vec((0u8..4, 0u8..2, 0u32..300), 1..1500)) {
            let mut lists = SlotLists::default();
            let mut model: BTreeMap<String, Vec<u32>> = BTreeMap::new();
            for (op, text, slot) in ops {
                let text = format!("scope-{text}");
                let held = model.entry(text.clone()).or_default();
                // Three adds to one removal, so lists grow past `SEARCHED` and shrink again.
                // A slot listed again or taken off when it is not listed changes nothing.
                if op != 0 {
                    lists.list(&text, slot).expect("listed");
                    if !held.contains(&slot) {
                        held.push(slot);
                    }
                } else {
                    lists.unlist_text(&text, slot);
                    held.retain(|s| *s != slot);
                }
                let listed = lists.get(&text);
                prop_assert_eq!(&listed.map(|l| l.iter().copied().collect::<Vec<_>>()).unwrap_or_default(), &*held);
                prop_assert_eq!(listed.map_or(0, |l| l.len()), held.len());
            }
        }
    }

    #[test]
    fn a_long_list_knows_where_its_slots_are_and_closes_its_holes() {
        let mut lists = SlotLists::default();
        let n = 4 * SEARCHED as u32;
        for slot in 0..n {
            lists.list("public", slot).expect("listed");
        }
        let many = |lists: &SlotLists| -> (usize, usize, bool) {
            let list = &lists.many[0];
            (list.slots.len(), list.holes, list.at.is_some())
        };
        assert_eq!(many(&lists), (n as usize, 0, true));
        // Every other slot taken off: holes until they are half the list, then one compaction.
        for slot in (0..n).step_by(2).take(n as usize / 2 - 1) {
            lists.unlist_text("public", slot);
        }
        assert_eq!(many(&lists), (n as usize, n as usize / 2 - 1, true));
        lists.unlist_text("public", n - 2);
        assert_eq!(many(&lists), (n as usize / 2, 0, true));
        let odd: Vec<u32> = (1..n).step_by(2).collect();
        assert_eq!(lists.get("public").map(|l| l.iter().copied().collect::<Vec<_>>()), Some(odd));
    }

    fn listed(terms: &SlotLists, term: &str) -> BTreeSet<u32> {
        terms.get(term).map(|slots| slots.iter().copied().collect()).unwrap_or_default()
    }

    #[test]
    fn terms_are_found_by_their_text_and_go_with_their_last_slot() {
        let mut terms = SlotLists::default();
        let a = terms.list("ord-1", 1).expect("listed");
        assert_eq!(terms.list("ord-1", 2), Some(a), "one id a term");
        let b = terms.list("bob@example.com", 2).expect("listed");
        assert_eq!(listed(&terms, "ord-1"), BTreeSet::from([1, 2]));
        assert_eq!(terms.len(), 2);
        terms.unlist(a, 1);
        assert_eq!(listed(&terms, "ord-1"), BTreeSet::from([2]));
        terms.unlist(a, 2);
        assert!(terms.get("ord-1").is_none());
        assert_eq!(terms.len(), 1);
        // The freed id serves the next new term, and the old text does not find it.
        assert_eq!(terms.list("sku-9", 3), Some(a));
        assert!(terms.get("ord-1").is_none());
        assert_eq!(listed(&terms, "sku-9"), BTreeSet::from([3]));
        assert_eq!(listed(&terms, "bob@example.com"), BTreeSet::from([2]));
        terms.unlist(b, 2);
        assert_eq!(terms.len(), 1);
    }
}
