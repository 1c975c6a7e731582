//! What a delivery's outcome may say. `last_error` and `last_response` are read by every viewer of
//! the admin API and the console, and the same text goes into the logs, so:
//!
//! - an endpoint is named by its configured name, never by its URL or any part of it (a webhook
//!   URL often carries its secret: `https://hooks.example.com/services/T0/B0/XXXX`). Errors are
//!   written without the URL in the first place; `without_url` is the net under that, for a
//!   library's message that quotes it anyway;
//! - a receiver's answer is its author's text: control characters (CR and LF, which would start
//!   a forged line in a text log; ESC and the ANSI sequences it opens, which repaint a terminal;
//!   the rest of C0 and C1; Unicode's line separators and bidirectional overrides) are taken out,
//!   whitespace runs become one space, and it is cut to a bounded length.

/// The most characters of a receiver's answer quoted in an error.
pub const MAX_QUOTED_REPLY_CHARS: usize = 200;

/// `text` with every occurrence of `url` (whole, and its host, path and query where they are long
/// enough not to be ordinary words) replaced by a mark.
pub fn without_url(text: &str, url: &url::Url) -> String {
    let mut out = text.replace(url.as_str(), "<url>");
    let mut parts: Vec<&str> = Vec::new();
    if let Some(host) = url.host_str() {
        parts.push(host.trim_start_matches('[').trim_end_matches(']'));
        parts.push(host);
    }
    if url.path() != "/" {
        parts.push(url.path());
    }
    parts.extend(url.query());
    for part in parts {
        if part.chars().count() >= 4 {
            out = out.replace(part, "<url>");
        }
    }
    out
}

/// A receiver's answer as it may be shown and logged: no control characters or ANSI sequences,
/// whitespace runs as one space, at most `max_chars` characters (then `…`).
pub fn clean_reply(text: &str, max_chars: usize) -> String {
    let mut out = String::with_capacity(text.len().min(max_chars * 4));
    let mut count = 0;
    let mut space = false;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            skip_escape(&mut chars);
            continue;
        }
        if c.is_whitespace() || c.is_control() || hidden(c) {
            // Tabs, line breaks and separators read as a space; other controls as nothing.
            space |= c.is_whitespace() && !out.is_empty();
            continue;
        }
        if count == max_chars {
            out.push('…');
            return out;
        }
        if space {
            out.push(' ');
            count += 1;
            space = false;
            if count == max_chars {
                out.push('…');
                return out;
            }
        }
        out.push(c);
        count += 1;
    }
    out
}

/// Unicode's format characters that change how a line reads without being seen: bidirectional
/// embeddings, overrides and isolates, and the zero-width ones that hide them.
fn hidden(c: char) -> bool {
    matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2060}'..='\u{2069}' | '\u{feff}')
}

/// Past the rest of an escape sequence whose ESC was just read: CSI (`ESC [` … a final byte),
/// OSC and the other string sequences (`ESC ]` … BEL or `ESC \`), or one character otherwise.
/// Bounded by the text: every character is looked at once.
fn skip_escape(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) {
    match chars.next() {
        Some('[') => {
            for c in chars.by_ref() {
                if ('\u{40}'..='\u{7e}').contains(&c) {
                    break;
                }
            }
        }
        Some(']' | 'P' | 'X' | '^' | '_') => {
            while let Some(c) = chars.next() {
                if c == '\u{7}' || c == '\u{9c}' {
                    break;
                }
                if c == '\u{1b}' && chars.peek() == Some(&'\\') {
                    chars.next();
                    break;
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn control_characters_and_ansi_sequences_are_taken_out() {
        let forged = "oops\r\n2024-06-15T09:00:00Z  INFO memgate: admin token accepted\n\u{1b}[31mred\u{1b}[0m \
                      \u{1b}]0;title\u{7}\u{0}\u{7f}\u{85}\u{9b}2J tab\there \u{2028}next \u{202e}drawkcab";
        let clean = clean_reply(forged, 1000);
        assert_eq!(
            clean,
            "oops 2024-06-15T09:00:00Z INFO memgate: admin token accepted red 2J tab here next drawkcab"
        );
        assert!(clean.chars().all(|c| !c.is_control()), "{clean:?}");
        // An escape left open at the end swallows the rest, and nothing breaks.
        assert_eq!(clean_reply("a\u{1b}[31", 10), "a");
        assert_eq!(clean_reply("a\u{1b}", 10), "a");
        assert_eq!(clean_reply("  \r\n  ", 10), "");
    }

    #[test]
    fn replies_are_cut_to_a_bounded_length() {
        let long = "x".repeat(5000);
        let cut = clean_reply(&long, MAX_QUOTED_REPLY_CHARS);
        assert_eq!(cut.chars().count(), MAX_QUOTED_REPLY_CHARS + 1);
        assert!(cut.ends_with('…'));
        assert_eq!(clean_reply("ab cd", 3), "ab …");
        assert_eq!(clean_reply("ab cd", 5), "ab cd");
        assert_eq!(clean_reply("日本語のテキスト", 3), "日本語…");
    }

    #[test]
    fn urls_and_their_parts_are_marked() {
        let url =
            url::Url::parse("https://hooks.example.com:8443/services/T0/B0/s3cr3t?token=abcd1234").unwrap();
        let text = format!("error sending request for url ({url}): dns error for hooks.example.com");
        let out = without_url(&text, &url);
        assert!(
            !out.contains("s3cr3t") && !out.contains("abcd1234") && !out.contains("hooks.example"),
            "{out}"
        );
        let ip = url::Url::parse("http://[fd00::1]:9000/hook").unwrap();
        assert_eq!(without_url("connect to fd00::1 failed", &ip), "connect to <url> failed");
        // A short path is an ordinary word, left alone.
        let short = url::Url::parse("http://10.0.0.1/h").unwrap();
        assert_eq!(without_url("/h is fine", &short), "/h is fine");
    }
}
