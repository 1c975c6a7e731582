//! Names for places in a JSON document, as the JSON paths that 422 answers carry.
//!
//! `$` is the root, `.key` a member whose name is identifier-like (`[A-Za-z_][A-Za-z0-9_]*`),
//! `["odd key"]` any other member (the name JSON-escaped), `[3]` an array element. So
//! `$.content.special_requests[0]` and `$.content["名字"]` are both paths this module writes.
//! jsonschema reports where a value failed as a JSON Pointer (`/special_requests/0`);
//! `from_pointer_in` turns that into a path under the record's `$.content`.

use serde_json::Value;

/// The path of member `key` of the object at `parent`.
pub fn child_key(parent: &str, key: &str) -> String {
    let mut path = String::with_capacity(parent.len() + key.len() + 4);
    path.push_str(parent);
    push_key(&mut path, key);
    path
}

/// The path of element `i` of the array at `parent`.
pub fn child_index(parent: &str, i: usize) -> String {
    let mut path = parent.to_owned();
    push_index(&mut path, i);
    path
}

/// The path of the place a JSON Pointer names, under `base`, without the document at hand: a
/// segment made of digits is read as an array index. When the document is available, prefer
/// `from_pointer_in`, which can tell an index from an object member named `"0"`.
pub fn from_pointer(base: &str, pointer: &str) -> String {
    let mut path = base.to_owned();
    for segment in pointer_segments(pointer) {
        match array_index(&segment) {
            Some(i) => push_index(&mut path, i),
            None => push_key(&mut path, &segment),
        }
    }
    path
}

/// The path of the place a JSON Pointer names in `doc`, under `base`. The pointer is walked
/// through `doc` so that each segment is written the way its container needs: `[0]` in an array,
/// `["0"]` in an object. Past the end of what `doc` holds (a missing member), segments are read
/// as `from_pointer` reads them.
pub fn from_pointer_in(base: &str, pointer: &str, doc: &Value) -> String {
    let mut path = base.to_owned();
    let mut here = Some(doc);
    for segment in pointer_segments(pointer) {
        match here {
            Some(Value::Object(map)) => {
                push_key(&mut path, &segment);
                here = map.get(segment.as_str());
            }
            Some(Value::Array(items)) => match array_index(&segment) {
                Some(i) => {
                    push_index(&mut path, i);
                    here = items.get(i);
                }
                None => {
                    push_key(&mut path, &segment);
                    here = None;
                }
            },
            _ => {
                match array_index(&segment) {
                    Some(i) => push_index(&mut path, i),
                    None => push_key(&mut path, &segment),
                }
                here = None;
            }
        }
    }
    path
}

/// The path one step above `path` (`$.a.b` → `$.a`, `$.a[2]` → `$.a`); `None` for `$` or for a
/// string this module did not write.
pub fn parent(path: &str) -> Option<&str> {
    let mut last_start = None;
    let bytes = path.as_bytes();
    if bytes.first() != Some(&b'$') {
        return None;
    }
    let mut i = 1;
    while i < bytes.len() {
        last_start = Some(i);
        match bytes[i] {
            b'.' => {
                i += 1;
                while i < bytes.len() && is_ident_byte(bytes[i]) {
                    i += 1;
                }
            }
            b'[' if bytes.get(i + 1) == Some(&b'"') => {
                i += 2;
                loop {
                    match bytes.get(i) {
                        None => return None,
                        Some(b'\\') => i += 2,
                        Some(b'"') => break,
                        Some(_) => i += 1,
                    }
                }
                if bytes.get(i + 1) != Some(&b']') {
                    return None;
                }
                i += 2;
            }
            b'[' => {
                i += 1;
                while i < bytes.len() && bytes[i].is_ascii_digit() {
                    i += 1;
                }
                if bytes.get(i) != Some(&b']') {
                    return None;
                }
                i += 1;
            }
            _ => return None,
        }
    }
    last_start.map(|start| &path[..start])
}

/// The unescaped segments of a JSON Pointer (`~1` is `/`, `~0` is `~`); `""` names the root.
fn pointer_segments(pointer: &str) -> impl Iterator<Item = String> + '_ {
    pointer
        .strip_prefix('/')
        .map(|rest| rest.split('/'))
        .into_iter()
        .flatten()
        .map(|segment| segment.replace("~1", "/").replace("~0", "~"))
}

/// A pointer segment read as an array index: digits, without a leading zero (RFC 6901).
fn array_index(segment: &str) -> Option<usize> {
    let canonical = !segment.is_empty()
        && segment.bytes().all(|b| b.is_ascii_digit())
        && (segment == "0" || !segment.starts_with('0'));
    if canonical { segment.parse().ok() } else { None }
}

fn push_index(path: &mut String, i: usize) {
    path.push('[');
    path.push_str(&i.to_string());
    path.push(']');
}

fn push_key(path: &mut String, key: &str) {
    if is_identifier(key) {
        path.push('.');
        path.push_str(key);
    } else {
        path.push_str("[\"");
        push_json_escaped(path, key);
        path.push_str("\"]");
    }
}

fn is_identifier(key: &str) -> bool {
    let mut bytes = key.bytes();
    match bytes.next() {
        Some(first) if first.is_ascii_alphabetic() || first == b'_' => bytes.all(is_ident_byte),
        _ => false,
    }
}

fn is_ident_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// JSON string escaping, as `serde_json` writes it: quotes, backslashes and control characters.
fn push_json_escaped(out: &mut String, s: &str) {
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => {
                out.push_str("\\u00");
                out.push(char::from(HEX[(c as usize) >> 4]));
                out.push(char::from(HEX[(c as usize) & 0xf]));
            }
            c => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn identifier_keys_use_dots() {
        assert_eq!(child_key("$", "content"), "$.content");
        assert_eq!(child_key("$.content", "preferred_language"), "$.content.preferred_language");
        assert_eq!(child_key("$", "_private"), "$._private");
        assert_eq!(child_key("$", "a1"), "$.a1");
    }

    #[test]
    fn other_keys_are_bracketed_and_escaped() {
        assert_eq!(child_key("$", "odd key"), r#"$["odd key"]"#);
        assert_eq!(child_key("$", "1st"), r#"$["1st"]"#);
        assert_eq!(child_key("$", ""), r#"$[""]"#);
        assert_eq!(child_key("$", "a-b"), r#"$["a-b"]"#);
        assert_eq!(child_key("$", "名字"), r#"$["名字"]"#);
        assert_eq!(child_key("$", r#"say "hi""#), r#"$["say \"hi\""]"#);
        assert_eq!(child_key("$", "back\\slash"), r#"$["back\\slash"]"#);
        assert_eq!(child_key("$", "line\nbreak\u{1}"), r#"$["line\nbreak\u0001"]"#);
    }

    #[test]
    fn indices_use_brackets() {
        assert_eq!(child_index("$", 0), "$[0]");
        assert_eq!(child_index("$.content.special_requests", 3), "$.content.special_requests[3]");
    }

    #[test]
    fn pointers_become_paths_under_base() {
        assert_eq!(from_pointer("$.content", ""), "$.content");
        assert_eq!(from_pointer("$.content", "/name"), "$.content.name");
        assert_eq!(from_pointer("$.content", "/a/0/b~1c"), r#"$.content.a[0]["b/c"]"#);
        assert_eq!(from_pointer("$", "/m~0n"), r#"$["m~n"]"#);
        assert_eq!(from_pointer("$", "/~01"), r#"$["~1"]"#);
        assert_eq!(from_pointer("$", "/01"), r#"$["01"]"#);
        assert_eq!(from_pointer("$", "/"), r#"$[""]"#);
    }

    #[test]
    fn pointers_walked_through_the_document_tell_indices_from_keys() {
        let doc = json!({"0": {"items": [{"x y": 1}]}, "list": [[5]]});
        assert_eq!(from_pointer_in("$.content", "/0", &doc), r#"$.content["0"]"#);
        assert_eq!(from_pointer_in("$.content", "/0/items/0/x y", &doc), r#"$.content["0"].items[0]["x y"]"#);
        assert_eq!(from_pointer_in("$", "/list/0/0", &doc), "$.list[0][0]");
        assert_eq!(from_pointer_in("$", "/missing/3", &doc), "$.missing[3]");
        assert_eq!(from_pointer_in("$", "", &doc), "$");
    }

    #[test]
    fn parent_undoes_one_step() {
        assert_eq!(parent("$"), None);
        assert_eq!(parent("$.content"), Some("$"));
        assert_eq!(parent("$.content.name"), Some("$.content"));
        assert_eq!(parent("$.a[12]"), Some("$.a"));
        assert_eq!(parent(r#"$.a["x\"]y"]"#), Some("$.a"));
        assert_eq!(parent(r#"$["odd key"].b"#), Some(r#"$["odd key"]"#));
        assert_eq!(parent("content"), None);
        assert_eq!(parent("$[x]"), None);
    }

    #[test]
    fn paths_round_trip_through_parent() {
        let base = "$.content";
        for key in ["name", "odd key", "名字", "q\"uote", "0"] {
            let path = child_key(base, key);
            assert_eq!(parent(&path), Some(base), "{path}");
        }
        assert_eq!(parent(&child_index(base, 7)), Some(base));
    }
}
