//! The person's words in one text: harness blocks cut out, wrapping tags dropped, in one pass.
//!
//! A client's text is untrusted and can be a 32 MiB run of `<a<a<a…`. The scan therefore reads
//! each byte a bounded number of times: a tag is recognized only within `TAG_WINDOW` bytes of its
//! `<` (no tag a client writes is longer), a harness block's closing tag is searched once from
//! where the block opened and the search's bytes are consumed with the block, and a text longer
//! than `READ_WINDOW` is read only in its last `READ_WINDOW` bytes, where the person's words are
//! (harnesses put their blocks in front of the question).

use super::QueryRule;

/// The longest tag recognized, `<` to `>`, name and attributes.
pub const TAG_WINDOW: usize = 256;

/// How much of one text is read: its last bytes (the query keeps far less anyway).
pub const READ_WINDOW: usize = 64 * 1024;

/// `text` without its harness blocks, and how many were cut. An opening harness tag that is
/// never closed takes the rest of the text with it: what follows it is the harness's. A closing
/// harness tag with no opening (the opening lay before the read window) ends a block that began
/// before it: what came before it is dropped.
pub fn person_text(text: &str, rule: &QueryRule) -> (String, usize) {
    let text = last_bytes(text, READ_WINDOW);
    let mut out = String::with_capacity(text.len().min(READ_WINDOW));
    let mut cut = 0;
    let mut rest = text;
    while let Some(start) = rest.find('<') {
        out.push_str(&rest[..start]);
        let tail = &rest[start..];
        match tag_at(tail) {
            Some((name, open_len, false)) if is_one_of(name, &rule.harness_tags) => {
                cut += 1;
                let close = format!("</{name}>");
                match tail[open_len..].find(&close) {
                    Some(at) => rest = &tail[open_len + at + close.len()..],
                    None => rest = "",
                }
            }
            Some((name, open_len, true)) if is_one_of(name, &rule.harness_tags) => {
                cut += 1;
                out.clear();
                rest = &tail[open_len..];
            }
            Some((name, open_len, _)) if is_one_of(name, &rule.unwrap_tags) => {
                rest = &tail[open_len..];
            }
            _ => {
                out.push('<');
                rest = &tail[1..];
            }
        }
    }
    out.push_str(rest);
    (out.trim().to_owned(), cut)
}

fn is_one_of(name: &str, names: &[String]) -> bool {
    names.iter().any(|n| n == name)
}

/// The last `max` bytes of `text`, starting on a character boundary.
fn last_bytes(text: &str, max: usize) -> &str {
    let mut start = text.len().saturating_sub(max);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}

/// A tag at the start of `text`: its name, its length, and whether it closes (`</name>`).
/// Attributes are allowed (`<system-reminder priority="high">`); the whole tag lies within
/// `TAG_WINDOW` bytes and holds no other `<`.
fn tag_at(text: &str) -> Option<(&str, usize, bool)> {
    let window = &text.as_bytes()[..text.len().min(TAG_WINDOW)];
    let inner = window.strip_prefix(b"<")?;
    let (closing, inner) = match inner.strip_prefix(b"/") {
        Some(after) => (true, after),
        None => (false, inner),
    };
    let name_len =
        inner.iter().take_while(|b| b.is_ascii_alphanumeric() || **b == b'-' || **b == b'_').count();
    if name_len == 0 {
        return None;
    }
    let end = name_len + inner[name_len..].iter().position(|b| matches!(b, b'>' | b'<'))?;
    if inner[end] != b'>' {
        return None;
    }
    let prefix = 1 + usize::from(closing);
    // ASCII name bytes: the slice ends on a character boundary.
    let name = &text[prefix..prefix + name_len];
    Some((name, prefix + end + 1, closing))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule() -> QueryRule {
        QueryRule::default()
    }

    #[test]
    fn tags_are_found_within_their_window_only() {
        assert_eq!(tag_at("<system-reminder>x"), Some(("system-reminder", 17, false)));
        assert_eq!(tag_at("</command-args> rest"), Some(("command-args", 15, true)));
        assert_eq!(tag_at(r#"<system-reminder priority="high">"#), Some(("system-reminder", 33, false)));
        assert_eq!(tag_at("<a<b>"), None);
        assert_eq!(tag_at("<>"), None);
        let long = format!("<system-reminder {}>", "x".repeat(TAG_WINDOW));
        assert_eq!(tag_at(&long), None, "a tag longer than the window is text");
    }

    #[test]
    fn harness_blocks_go_and_wrapped_words_stay() {
        let (kept, cut) = person_text(
            "<system-reminder>CLAUDE.md says pnpm</system-reminder>\n<command-args>refund policy?</command-args>",
            &rule(),
        );
        assert_eq!((kept.as_str(), cut), ("refund policy?", 1));
        let (kept, cut) = person_text("before <system-reminder>never closed", &rule());
        assert_eq!((kept.as_str(), cut), ("before", 1));
        assert_eq!(person_text("a < b and c<d", &rule()).0, "a < b and c<d");
    }

    #[test]
    fn a_long_text_is_read_at_its_end_and_a_block_cut_by_the_window_still_goes() {
        let harness = "file notes ".repeat(READ_WINDOW / 8);
        let text = format!("<system-reminder>{harness}</system-reminder>What is our refund policy?");
        let (kept, cut) = person_text(&text, &rule());
        assert_eq!(kept, "What is our refund policy?");
        assert_eq!(cut, 1);
    }
}
