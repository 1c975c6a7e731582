//! Byte-level helpers every detector scans with: where a needle occurs, how long a run of some
//! class of bytes is, and what mix of letter cases and digits a run holds. None of them reads
//! past the end of its input.

/// Where `needle` starts in `hay`, left to right, overlapping matches included.
pub(super) fn positions<'a>(hay: &'a [u8], needle: &'a [u8]) -> impl Iterator<Item = usize> + 'a {
    let first = needle.first().copied();
    let starts = (hay.len() + 1).saturating_sub(needle.len().max(1));
    (0..starts).filter(move |&i| Some(hay[i]) == first && hay[i..].starts_with(needle))
}

pub(super) fn run_len(bytes: &[u8], start: usize, allowed: impl Fn(u8) -> bool) -> usize {
    bytes.get(start..).map_or(0, |rest| rest.iter().take_while(|b| allowed(**b)).count())
}

/// True when a token starting at `i` is not the tail of a longer word (`task-`, `risk-`).
pub(super) fn token_starts_at(bytes: &[u8], i: usize) -> bool {
    i == 0 || !matches!(bytes[i - 1], b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' | b'-')
}

pub(super) fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'-'
}

pub(super) fn is_base64url_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'-'
}

pub(super) struct Mix {
    pub(super) upper: bool,
    pub(super) lower: bool,
    pub(super) digit: bool,
}

pub(super) fn mix(bytes: &[u8]) -> Mix {
    Mix {
        upper: bytes.iter().any(u8::is_ascii_uppercase),
        lower: bytes.iter().any(u8::is_ascii_lowercase),
        digit: bytes.iter().any(u8::is_ascii_digit),
    }
}
