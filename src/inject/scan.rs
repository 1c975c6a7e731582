//! Reading a client's JSON without copying it: a few named top-level fields, and the elements of
//! an array one at a time, each as a `RawValue` borrowed from the client's bytes (so its byte
//! span in the body is known, which placement needs).
//!
//! Why not `Vec<&RawValue>` or `IndexMap<String, &RawValue>`: a 32 MB body can hold millions of
//! tiny elements or keys, and 16–50 bytes of bookkeeping each would cost many times the body.
//! These visitors hold one element at a time, whatever the body holds.

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;
use std::borrow::Cow;
use std::fmt;

/// The values of `names` at the top level of the JSON object `body`, in the order of `names`;
/// a key given twice counts as its last value (as serde_json's `Value` reads it).
pub fn top_fields<'a, const N: usize>(
    body: &'a [u8],
    names: [&str; N],
) -> Result<[Option<&'a RawValue>; N], serde_json::Error> {
    struct Fields<'n, const N: usize>([&'n str; N]);
    impl<'de, const N: usize> Visitor<'de> for Fields<'_, N> {
        type Value = [Option<&'de RawValue>; N];
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut found = [None; N];
            while let Some(key) = map.next_key::<Cow<'de, str>>()? {
                match self.0.iter().position(|name| *name == key) {
                    Some(i) => found[i] = Some(map.next_value::<&'de RawValue>()?),
                    None => {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
            }
            Ok(found)
        }
    }
    let mut de = serde_json::Deserializer::from_slice(body);
    let found = de.deserialize_map(Fields(names))?;
    de.end()?;
    Ok(found)
}

/// Calls `each(index, element)` for every element of the JSON array `raw`, in order, holding one
/// element at a time. Stops at the first error `each` returns.
pub fn for_each_element<'a, E>(
    raw: &'a RawValue,
    each: impl FnMut(usize, &'a RawValue) -> Result<(), E>,
) -> Result<Result<(), E>, serde_json::Error> {
    struct Elements<F, E>(F, std::marker::PhantomData<E>);
    impl<'de, F: FnMut(usize, &'de RawValue) -> Result<(), E>, E> Visitor<'de> for Elements<F, E> {
        type Value = Result<(), E>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a JSON array")
        }
        fn visit_seq<A: SeqAccess<'de>>(mut self, mut seq: A) -> Result<Self::Value, A::Error> {
            let mut index = 0;
            while let Some(element) = seq.next_element_seed(Borrowed)? {
                if let Err(err) = (self.0)(index, element) {
                    // The rest is not looked at; skip it so the array still ends well-formed.
                    while seq.next_element::<IgnoredAny>()?.is_some() {}
                    return Ok(Err(err));
                }
                index += 1;
            }
            Ok(Ok(()))
        }
    }
    let mut de = serde_json::Deserializer::from_str(raw.get());
    de.deserialize_seq(Elements(each, std::marker::PhantomData))
}

/// Deserializes a `&RawValue` borrowed from the input.
struct Borrowed;

impl<'de> DeserializeSeed<'de> for Borrowed {
    type Value = &'de RawValue;
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        serde::Deserialize::deserialize(deserializer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_fields_borrow_from_the_body_and_the_last_duplicate_wins() {
        let body = br#"{"a":1,"system":"one","messages":[{"x":"y"}],"system":"two","zz":{"deep":[1,2]}}"#;
        let [messages, system, absent] = top_fields(body, ["messages", "system", "absent"]).unwrap();
        assert_eq!(messages.unwrap().get(), r#"[{"x":"y"}]"#);
        assert_eq!(system.unwrap().get(), r#""two""#);
        assert!(absent.is_none());
        let start = messages.unwrap().get().as_ptr() as usize - body.as_ptr() as usize;
        assert_eq!(&body[start..start + 11], br#"[{"x":"y"}]"#);
        assert!(top_fields(b"[1]", ["a"]).is_err());
        assert!(top_fields(br#"{"a":1} {"#, ["a"]).is_err());
    }

    #[test]
    fn elements_come_one_at_a_time_and_can_stop_early() {
        let raw: &RawValue = serde_json::from_str(r#"[1, "two", {"three": 3}, [4]]"#).unwrap();
        let mut seen = Vec::new();
        for_each_element(raw, |i, el| {
            seen.push((i, el.get().to_owned()));
            Ok::<(), ()>(())
        })
        .unwrap()
        .unwrap();
        assert_eq!(seen.len(), 4);
        assert_eq!(seen[2], (2, r#"{"three": 3}"#.to_owned()));
        let stopped = for_each_element(raw, |i, _| if i == 1 { Err("stop") } else { Ok(()) }).unwrap();
        assert_eq!(stopped, Err("stop"));
        let not_array: &RawValue = serde_json::from_str(r#"{"a":1}"#).unwrap();
        assert!(for_each_element(not_array, |_, _| Ok::<(), ()>(())).is_err());
    }
}
