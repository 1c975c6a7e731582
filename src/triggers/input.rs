//! What a request brings to conditions: the person's words and the values its client passed.

use super::text;
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::OnceLock;

/// What a request brings to conditions: the person's words (`crate::query::Query::text`) and the
/// values its client passed (`X-Memory-Values`, see `parse_values`). Folding the words is done
/// once, on first use, however many records are evaluated.
pub struct TriggerInput<'a> {
    pub text: &'a str,
    pub values: &'a BTreeMap<String, Value>,
    prepared: OnceLock<Prepared>,
}

pub(super) struct Prepared {
    /// NFKC, case kept: for regexes and entities.
    pub(super) normalized: String,
    /// NFKC, lower case, one space between words: for keywords.
    pub(super) folded: String,
}

impl<'a> TriggerInput<'a> {
    pub fn new(text: &'a str, values: &'a BTreeMap<String, Value>) -> TriggerInput<'a> {
        TriggerInput { text, values, prepared: OnceLock::new() }
    }

    pub(super) fn prepared(&self) -> &Prepared {
        self.prepared.get_or_init(|| Prepared {
            normalized: text::normalized(self.text),
            folded: text::fold(self.text),
        })
    }
}

/// A value's name: a letter or `_`, then letters, digits, `_`, `.` or `-`; 64 at most.
pub(super) fn valid_field(field: &str) -> bool {
    let mut chars = field.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && field.len() <= 64
        && chars.all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c))
}

/// The longest `X-Memory-Values` read: 32 names of 64 and values of 200 characters, quoted and
/// spaced, fit in half of it.
pub const MAX_VALUES_BYTES: usize = 16 * 1024;

/// Values a client passes for comparisons, from one header: `satisfaction_score=1.5; tier=premium;
/// note="a; b"`. Keys as in a condition's `field`; a value that reads as a finite number is a
/// number, anything else a string. At most 32 pairs, values of at most 200 characters, 16 KiB in
/// all (a longer header is refused before it is read: a name repeated would otherwise keep the
/// loop going to its end).
pub fn parse_values(header: &str) -> Result<BTreeMap<String, Value>, String> {
    if header.len() > MAX_VALUES_BYTES {
        return Err(format!("at most {MAX_VALUES_BYTES} bytes (got {})", header.len()));
    }
    let mut values = BTreeMap::new();
    let mut rest = header.trim();
    while !rest.is_empty() {
        let Some(eq) = rest.find('=') else {
            return Err("each value is name=value, separated by `;`".to_owned());
        };
        let key = rest[..eq].trim();
        if !valid_field(key) {
            return Err("a name is a letter or `_`, then letters, digits, `_`, `.` or `-`".to_owned());
        }
        let after = rest[eq + 1..].trim_start();
        let (raw, quoted, next) = if let Some(inner) = after.strip_prefix('"') {
            let Some(end) = inner.find('"') else { return Err("a quoted value is not closed".to_owned()) };
            (&inner[..end], true, inner[end + 1..].trim_start())
        } else {
            let end = after.find(';').unwrap_or(after.len());
            (after[..end].trim(), false, &after[end..])
        };
        rest = next.strip_prefix(';').unwrap_or(next).trim_start();
        if !next.is_empty() && !next.starts_with(';') {
            return Err("values are separated by `;`".to_owned());
        }
        if raw.chars().count() > 200 {
            return Err("a value has at most 200 characters".to_owned());
        }
        let number = (!quoted).then(|| raw.parse::<f64>().ok()).flatten().filter(|n| n.is_finite());
        let value = match number.and_then(serde_json::Number::from_f64) {
            Some(n) => Value::Number(n),
            None => Value::String(raw.to_owned()),
        };
        values.insert(key.to_owned(), value);
        if values.len() > 32 {
            return Err("at most 32 values".to_owned());
        }
    }
    Ok(values)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    #[test]
    fn values_from_a_header() {
        let values = parse_values(r#"satisfaction_score=1.5; tier=premium; note="a; b";count = 3"#).unwrap();
        assert_eq!(values["satisfaction_score"], json!(1.5));
        assert_eq!(values["tier"], json!("premium"));
        assert_eq!(values["note"], json!("a; b"));
        assert_eq!(values["count"], json!(3.0));
        assert!(parse_values("").unwrap().is_empty());
        assert!(parse_values("novalue").is_err());
        assert!(parse_values("1x=2").is_err());
        assert!(parse_values(r#"a="open"#).is_err());
        assert!(parse_values(r#"a="x" b=2"#).is_err());
        let many: Vec<String> = (0..33).map(|i| format!("k{i}=1")).collect();
        assert!(parse_values(&many.join(";")).is_err());
        // 32 of the longest pairs fit; a longer header is refused unread.
        let longest: Vec<String> =
            (0..32).map(|i| format!("{}{i:02} = \"{}\"", "k".repeat(62), "v".repeat(200))).collect();
        assert_eq!(parse_values(&longest.join("; ")).unwrap().len(), 32);
        let repeated = "a=1;".repeat(MAX_VALUES_BYTES / 4 + 1);
        assert!(parse_values(&repeated).unwrap_err().contains("bytes"));
    }
}
