//! The person's words, the body check and the block's placement in linear time: what runs on
//! every Messages request's body before anything else, on bodies of the shapes that made a
//! scan restart at every `<` (the first quadratic finding: 21 s of CPU for 1 MiB of `<a`).
//!
//! Each shape is a whole Messages request, so the cost measured is what the gateway pays: the
//! JSON read, the turns walked, and every text scanned for harness tags.

use super::{assert_linear, repeat_to};
use memgate::body::check_messages_request;
use memgate::inject::{Placement, inject};
use memgate::query::{QueryRule, extract};

/// A Messages request of about `size` bytes whose user turns say `piece` over and over, in
/// turns of `turn_bytes` each (one turn holds everything when `turn_bytes >= size`). Written
/// as bytes, not through a JSON tree: building 16 MiB inputs must not cost more than the test.
fn request(piece: &str, size: usize, turn_bytes: usize) -> Vec<u8> {
    let turns = size.div_ceil(turn_bytes).max(1);
    let text = serde_json::to_string(&repeat_to(piece, size / turns)).unwrap();
    let mut body = Vec::with_capacity(size + turns * 64 + 128);
    body.extend_from_slice(br#"{"model":"m","max_tokens":8,"messages":["#);
    for i in 0..turns {
        body.extend_from_slice(br#"{"role":"user","content":[{"type":"text","text":"#);
        body.extend_from_slice(text.as_bytes());
        body.extend_from_slice(format!(r#"}}]}},{{"role":"assistant","content":"answer {i}"}},"#).as_bytes());
    }
    body.extend_from_slice(br#"{"role":"user","content":"and the refund policy?"}]}"#);
    body
}

/// The shapes untrusted text takes to make a tag scanner work hard: bare `<`, tags that never
/// close their `>`, harness tags opened and never closed, closing tags with no opening,
/// unwrapping tags, quotes and brackets; each as one huge turn and as many 32 KiB turns.
const PIECES: [(&str, &str); 7] = [
    ("`<a`", "<a"),
    ("`<` alone", "<"),
    ("an unclosed harness tag", "<system-reminder"),
    ("harness blocks never closed", "<system-reminder>x"),
    ("closing tags with no opening", "</system-reminder>"),
    ("unwrapping tags", "<command-args>x</command-args>"),
    ("quotes and brackets", "\"<[{\\\"'"),
];

/// Runs `run` over every piece, as one huge turn and as many 32 KiB turns (`pieces` picks them).
fn each_shape(pieces: &[(&str, &str)], run: impl Fn(&[u8])) {
    for (name, piece) in pieces {
        for turn_bytes in [usize::MAX, 32 * 1024] {
            let shape = format!("{name} in turns of {turn_bytes} bytes");
            assert_linear(&shape, |size| request(piece, size, turn_bytes), |body: &Vec<u8>| run(body));
        }
    }
}

/// What the body check and placement see differently: a tag flood and quotes to unescape.
fn json_shapes() -> [(&'static str, &'static str); 2] {
    [PIECES[0], PIECES[6]]
}

/// What the tag scan sees differently (a bare `<` is `<a` without its name; quotes are the JSON
/// reader's): the five ways a tag can fail to be one, or be one.
fn tag_shapes() -> [(&'static str, &'static str); 5] {
    [PIECES[0], PIECES[2], PIECES[3], PIECES[4], PIECES[5]]
}

#[test]
fn the_persons_words_are_found_in_linear_time() {
    let rule = QueryRule::default();
    each_shape(&tag_shapes(), |body| {
        let query = extract(body, &rule).expect("the last turn has words");
        assert_eq!(query.newest, "and the refund policy?");
    });
}

#[test]
fn the_body_check_is_linear() {
    each_shape(&json_shapes(), |body| {
        check_messages_request(body).expect("a well-formed Messages request");
    });
}

#[test]
fn the_block_is_placed_in_linear_time() {
    let block = "<MEMORY_CONTEXT version=\"v1\">\n- refunds within 30 days\n</MEMORY_CONTEXT>";
    each_shape(&json_shapes(), |body| {
        for placement in [Placement::Auto, Placement::System, Placement::LastUserTurn] {
            inject(body, block, placement).expect("placed");
        }
    });
}
