//! Slots listed under a text: a tenant's records by scope (`TenantIndex::by_scope`) and by exact
//! term (`by_term`: keys, aliases, identifiers, what lets a query that names an order number, an
//! email or a key find its record without a score).
//!
//! Most of those texts belong to one record: a customer profile brings its `user:` scope, its
//! key, its email and its order number. As maps from a `Box<str>` or `Arc<str>` per text to its
//! slots, with each record holding its terms' `Arc`s, that cost ~430 bytes a profile at a million
//! profiles (each text's allocation, the map's entry and its spare room, the record's list of
//! pointers), a quarter of what a replica held per record. Here each text is kept once, back to
//! back in one buffer, the table holds only ids, and a record keeps its terms' ids (4 bytes each)
//! for its removal. Text a removed entry leaves behind is reclaimed by compacting the buffer once
//! it is at least half waste, so the buffer stays within twice what the live texts need.

use std::hash::{BuildHasher, RandomState};

/// Waste below this many bytes is not worth a compaction.
const COMPACT_AT_LEAST: usize = 64 * 1024;

/// `SlotLists::slots` holds an id's one slot as itself, a list of several as `MANY | k` (the list
/// is `many[k]`), and a free id as `FREE`. Slots stay below `MANY`: a tenant of 2³¹ records does
/// not fit in memory.
const MANY: u32 = 1 << 31;
const FREE: u32 = u32::MAX;

/// Where a text sits in `SlotLists::text`.
#[derive(Debug, Clone, Copy, Default)]
struct Span {
    start: u32,
    len: u32,
}

#[derive(Default)]
pub struct SlotLists {
    /// Ids, hashed (with `hasher`) by their text.
    ids: hashbrown::HashTable<u32>,
    hasher: RandomState,
    /// Every listed text, back to back, with the waste of removed ones until compacted.
    text: String,
    /// Id → its text in `text`.
    spans: Vec<Span>,
    /// Id → its slot, or where its slots are (`MANY`), or `FREE`. One slot, the common case (a
    /// customer's scope, key, email, order number), costs 4 bytes and no list.
    slots: Vec<u32>,
    /// The lists of texts with more than one slot; an empty one is free for reuse.
    many: Vec<Vec<u32>>,
    free_many: Vec<u32>,
    /// Ids whose text went, for reuse.
    free: Vec<u32>,
    /// Bytes of `text` that no listed text uses.
    waste: usize,
}

fn text_of<'a>(text: &'a str, spans: &[Span], id: u32) -> &'a str {
    let span = spans[id as usize];
    &text[span.start as usize..(span.start + span.len) as usize]
}

impl SlotLists {
    /// The slots listed under `text` (an exact term normalized as `terms::normalize` gives it).
    pub fn get(&self, text: &str) -> Option<&[u32]> {
        self.id(text).map(|id| self.listed(id))
    }

    pub fn contains_key(&self, text: &str) -> bool {
        self.id(text).is_some()
    }

    /// Every listed text with its slots, in no order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &[u32])> {
        let (text, spans) = (&self.text, &self.spans);
        (0..self.slots.len() as u32)
            .filter(|id| self.slots[*id as usize] != FREE)
            .map(move |id| (text_of(text, spans, id), self.listed(id)))
    }

    /// How many distinct texts are listed.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    fn id(&self, text: &str) -> Option<u32> {
        let (all, spans) = (&self.text, &self.spans);
        self.ids.find(self.hasher.hash_one(text), |id| text_of(all, spans, *id) == text).copied()
    }

    fn listed(&self, id: u32) -> &[u32] {
        match self.slots[id as usize] {
            FREE => &[],
            many if many & MANY != 0 => &self.many[(many & !MANY) as usize],
            _ => std::slice::from_ref(&self.slots[id as usize]),
        }
    }

    /// Lists `slot` under `text` and gives the text's id, for `unlist`. `None` (not listed) for a
    /// slot of `MANY` or more, or when the buffer cannot address more text (4 GiB in one tenant).
    pub fn list(&mut self, text: &str, slot: u32) -> Option<u32> {
        if slot >= MANY {
            return None;
        }
        if let Some(id) = self.id(text) {
            return self.add(id, slot).then_some(id);
        }
        if u32::try_from(self.text.len() + text.len()).is_err() {
            self.compact();
        }
        let start = u32::try_from(self.text.len()).ok()?;
        let len = u32::try_from(text.len()).ok().filter(|len| start.checked_add(*len).is_some())?;
        let span = Span { start, len };
        let id = match self.free.pop() {
            Some(id) => {
                self.spans[id as usize] = span;
                self.slots[id as usize] = slot;
                id
            }
            None => {
                let id = u32::try_from(self.spans.len()).ok().filter(|id| *id < FREE)?;
                self.spans.push(span);
                self.slots.push(slot);
                id
            }
        };
        self.text.push_str(text);
        let (hasher, all, spans) = (&self.hasher, &self.text, &self.spans);
        self.ids.insert_unique(hasher.hash_one(text), id, |id| hasher.hash_one(text_of(all, spans, *id)));
        Some(id)
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
                self.many[k as usize] = vec![held, slot];
                k
            }
            None if self.many.len() < (FREE & !MANY) as usize => {
                self.many.push(vec![held, slot]);
                (self.many.len() - 1) as u32
            }
            None => return false,
        };
        self.slots[id as usize] = MANY | k;
        true
    }

    /// Takes `slot` off the slots of `text`.
    pub fn unlist_text(&mut self, text: &str, slot: u32) {
        if let Some(id) = self.id(text) {
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
                list.retain(|s| *s != slot);
                if list.len() > 1 {
                    return;
                }
                let last = list.first().copied();
                self.many[k] = Vec::new();
                self.free_many.push(k as u32);
                if let Some(last) = last {
                    self.slots[id as usize] = last;
                    return;
                }
            }
            one if one != slot => return,
            _ => {}
        }
        let (all, spans) = (&self.text, &self.spans);
        let hash = self.hasher.hash_one(text_of(all, spans, id));
        if let Ok(entry) = self.ids.find_entry(hash, |other| *other == id) {
            entry.remove();
        }
        self.waste += self.spans[id as usize].len as usize;
        self.spans[id as usize] = Span::default();
        self.slots[id as usize] = FREE;
        self.free.push(id);
        if self.waste >= COMPACT_AT_LEAST && 2 * self.waste >= self.text.len() {
            self.compact();
        }
    }

    /// Rewrites `text` with the listed texts only. Their ids, and so the table's hashes and the
    /// records' lists of ids, stay as they are.
    fn compact(&mut self) {
        let mut text = String::with_capacity(self.text.len() - self.waste);
        for (span, held) in self.spans.iter_mut().zip(&self.slots) {
            if *held == FREE {
                continue;
            }
            let start = text.len() as u32;
            text.push_str(&self.text[span.start as usize..(span.start + span.len) as usize]);
            span.start = start;
        }
        self.text = text;
        self.waste = 0;
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

    #[test]
    fn the_text_of_removed_terms_is_reclaimed_and_the_rest_still_found() {
        let mut terms = SlotLists::default();
        let mut ids = BTreeMap::new();
        for i in 0..20_000u32 {
            let term = format!("customer:u-{i}:profile");
            ids.insert(term.clone(), terms.list(&term, i).expect("listed"));
        }
        let full = terms.text.len();
        for (i, (term, id)) in ids.iter().enumerate() {
            if i % 10 != 0 {
                let slot = term
                    .trim_start_matches("customer:u-")
                    .trim_end_matches(":profile")
                    .parse()
                    .expect("slot");
                terms.unlist(*id, slot);
            }
        }
        assert!(terms.text.len() < full / 2, "compacted: {} of {full} bytes", terms.text.len());
        assert!(terms.text.len() <= 2 * (terms.text.len() - terms.waste));
        for (i, (term, _)) in ids.iter().enumerate() {
            let slot: u32 =
                term.trim_start_matches("customer:u-").trim_end_matches(":profile").parse().expect("slot");
            let expected = if i % 10 == 0 { BTreeSet::from([slot]) } else { BTreeSet::new() };
            assert_eq!(listed(&terms, term), expected, "{term}");
        }
        assert_eq!(terms.len(), 2_000);
    }
}
