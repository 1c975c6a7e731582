//! The mock as memgate's extraction model: a request that forces the `save_memories` tool
//! (`tool_choice: {"type": "tool", "name": "save_memories"}`) is answered with one call of it,
//! whose candidates are scripted from the exchange in the request (docs/mock-upstream.md,
//! "Observation"): the good facts in the person's words, and one candidate of each junk kind the
//! gateway's gates must drop.
//!
//! The exchange is read from the request's user message, in the sections memgate writes
//! (`<system_prompt>`, `<injected_memory>`, `<person>`, `<assistant>`, entities escaped).

use serde_json::{Map, Value, json};

/// The forced tool.
pub(super) const TOOL: &str = "save_memories";

/// Whether `body` forces `save_memories`.
pub(super) fn forced(body: &Map<String, Value>) -> bool {
    body.get("tool_choice").and_then(|c| c.get("name")).and_then(Value::as_str) == Some(TOOL)
        && body.get("tool_choice").and_then(|c| c.get("type")).and_then(Value::as_str) == Some("tool")
}

/// The exchange, as memgate wrote it.
#[derive(Debug, Default, PartialEq)]
pub(super) struct Exchange {
    pub(super) system: String,
    pub(super) injected: Vec<String>,
    pub(super) person: String,
    pub(super) assistant: String,
}

fn unescape(text: &str) -> String {
    text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
}

fn sections<'a>(text: &'a str, tag: &str) -> Vec<&'a str> {
    let (open, close) = (format!("<{tag}>"), format!("</{tag}>"));
    let mut found = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find(&open) {
        let after = &rest[start + open.len()..];
        let Some(end) = after.find(&close) else { break };
        found.push(&after[..end]);
        rest = &after[end + close.len()..];
    }
    found
}

pub(super) fn exchange(body: &Map<String, Value>) -> Exchange {
    let text = super::answer::last_user_text(body);
    let one = |tag: &str| sections(text, tag).first().map(|s| unescape(s)).unwrap_or_default();
    Exchange {
        system: one("system_prompt"),
        injected: sections(text, "injected_memory").into_iter().map(unescape).collect(),
        person: one("person"),
        assistant: one("assistant"),
    }
}

/// Sentences: split after `.`, `!`, `?` and at line ends, trimmed, empty ones dropped.
fn sentences(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    for c in text.chars() {
        if c == '\n' {
            push_sentence(&mut out, &mut current);
            continue;
        }
        current.push(c);
        if matches!(c, '.' | '!' | '?') {
            push_sentence(&mut out, &mut current);
        }
    }
    push_sentence(&mut out, &mut current);
    out
}

fn push_sentence(out: &mut Vec<String>, current: &mut String) {
    let sentence = current.trim();
    if !sentence.is_empty() {
        out.push(sentence.to_owned());
    }
    current.clear();
}

fn without_end(text: &str) -> &str {
    text.trim().trim_end_matches(['.', '!', '?'])
}

/// People a sentence may be about instead of the speaker.
const OTHERS: [&str; 12] = [
    "sister",
    "brother",
    "wife",
    "husband",
    "friend",
    "mother",
    "father",
    "mom",
    "dad",
    "colleague",
    "son",
    "daughter",
];

fn candidate(kind: &str, content: Value, about: &str, confidence: f64, evidence: &str) -> Value {
    json!({"type": kind, "content": content, "about": about, "confidence": confidence, "evidence": evidence})
}

/// The good facts in the person's words: "I prefer X" (and "I like", "I'd rather", "I love") is a
/// preference; "My <thing> is <value>" a fact with the key `fact:<thing>`; "I am …", "I'm …",
/// "I live …", "I work …", "I have …" a fact. Sentences about someone else, guesses and questions
/// are not good facts.
pub(super) fn good(person: &str) -> Vec<Value> {
    let mut found = Vec::new();
    for sentence in sentences(person) {
        let lower = sentence.to_lowercase();
        if sentence.ends_with('?') || is_guess(&lower) || about_other(&lower) {
            continue;
        }
        let plain = without_end(&sentence);
        let lower_plain = plain.to_lowercase();
        let preference = ["i prefer ", "i'd rather ", "i like ", "i love "]
            .iter()
            .find_map(|lead| lower_plain.find(lead).map(|at| at + lead.len()));
        if let Some(at) = preference {
            let what = plain[at..].trim();
            if what.is_empty() {
                continue;
            }
            let topic = what.split_whitespace().find(|w| w.len() >= 3).unwrap_or(what).to_lowercase();
            found.push(candidate(
                "preference",
                json!({"topic": topic, "preference": what}),
                "user",
                0.92,
                &sentence,
            ));
            continue;
        }
        if let Some(rest) = lower_plain.strip_prefix("my ")
            && let Some(is) = rest.find(" is ")
        {
            let thing: String = rest[..is].split_whitespace().collect::<Vec<_>>().join("-");
            found.push(json!({"type": "fact", "content": {"statement": plain}, "about": "user",
                "confidence": 0.9, "evidence": sentence, "key": format!("fact:{thing}")}));
            continue;
        }
        if ["i am ", "i'm ", "i live ", "i work ", "i have "].iter().any(|lead| lower_plain.starts_with(lead))
        {
            found.push(candidate("fact", json!({"statement": plain}), "user", 0.85, &sentence));
        }
    }
    found
}

fn is_guess(lower: &str) -> bool {
    ["maybe", "perhaps", "probably", "i might", "i think", "not sure"].iter().any(|w| lower.contains(w))
}

fn about_other(lower: &str) -> bool {
    lower.split(|c: char| !c.is_alphanumeric()).any(|w| OTHERS.contains(&w))
}

/// A fake Anthropic key derived from `text`: the shape the secret scanner knows, never a key.
fn fake_key(text: &str) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        hash = (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    format!("sk-ant-api03-{:016x}{:016x}Mock{:016x}", hash, hash.rotate_left(17), hash.rotate_left(31))
}

/// Every candidate of the script, good ones first, then one of each junk kind that the exchange
/// allows (see the module comment and docs/mock-upstream.md).
pub(super) fn candidates(exchange: &Exchange) -> Vec<Value> {
    let good = good(&exchange.person);
    let person_sentences = sentences(&exchange.person);
    let first = person_sentences.first().cloned().unwrap_or_default();
    let mut all = good.clone();
    // A repeat: the first good fact again.
    if let Some(first_good) = good.first() {
        all.push(first_good.clone());
    }
    // An echo of an injected record: its words as a fact about the person.
    if let Some(record) = exchange.injected.first() {
        let words: String = record.lines().skip(1).collect::<Vec<_>>().join(" ");
        let words = if words.trim().is_empty() { record.clone() } else { words };
        let words: String = words.chars().take(300).collect();
        all.push(candidate("fact", json!({"statement": words.trim()}), "user", 0.9, words.trim()));
    }
    // The system prompt restated as a fact about the person.
    if let Some(line) = sentences(&exchange.system).first() {
        all.push(candidate("fact", json!({"statement": without_end(line)}), "user", 0.9, line));
    }
    // The assistant's own claim, attributed to the person.
    if let Some(claim) = sentences(&exchange.assistant).first() {
        all.push(candidate("fact", json!({"statement": without_end(claim)}), "user", 0.88, claim));
    }
    if !first.is_empty() {
        // A secret.
        let secret = format!("My API key is {}", fake_key(&exchange.person));
        all.push(candidate("fact", json!({"statement": secret}), "user", 0.95, &secret));
        // A fact about another person: the sentence naming one, else the first.
        let other = person_sentences
            .iter()
            .find(|s| about_other(&s.to_lowercase()))
            .cloned()
            .unwrap_or_else(|| first.clone());
        all.push(candidate("fact", json!({"statement": without_end(&other)}), "other", 0.9, &other));
        // A low-confidence guess.
        all.push(candidate(
            "fact",
            json!({"statement": format!("The person may be interested in: {}", without_end(&first))}),
            "user",
            0.35,
            &first,
        ));
        // Content that does not fit its type.
        all.push(candidate("preference", json!({"statement": without_end(&first)}), "user", 0.9, &first));
    }
    all
}

/// The `save_memories` call's input.
pub(super) fn input(body: &Map<String, Value>) -> Value {
    json!({"memories": candidates(&exchange(body))})
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_script_finds_the_good_fact_and_adds_each_junk_kind() {
        let text = "<reference_only>\n<system_prompt>You are Example Air&apos;s assistant. Be brief.</system_prompt>\n\
            <injected_memory>preference\nseating aisle seats please</injected_memory>\n</reference_only>\n\
            <person>Hi there. I prefer window seats on long flights. My sister loves skiing.</person>\n\
            <assistant>Our lounge is open to gold members. Anything else?</assistant>";
        let body = json!({"tool_choice": {"type": "tool", "name": "save_memories"},
            "messages": [{"role": "user", "content": text}]});
        let body = body.as_object().unwrap();
        assert!(forced(body));
        let ex = exchange(body);
        assert_eq!(ex.person, "Hi there. I prefer window seats on long flights. My sister loves skiing.");
        assert_eq!(ex.injected.len(), 1);
        let all = candidates(&ex);
        assert_eq!(all[0]["type"], "preference");
        assert_eq!(all[0]["evidence"], "I prefer window seats on long flights.");
        assert_eq!(all[1], all[0], "the repeat");
        let abouts: Vec<&str> = all.iter().map(|c| c["about"].as_str().unwrap()).collect();
        assert!(abouts.contains(&"other"));
        assert!(
            all.iter()
                .any(|c| c["content"]["statement"].as_str().is_some_and(|s| s.contains("sk-ant-api03-")))
        );
        assert!(all.iter().any(|c| c["confidence"].as_f64() == Some(0.35)));
        assert_eq!(all.len(), 10);
        assert!(good("Maybe I prefer tea. My brother is a pilot. What do I like?").is_empty());
        assert_eq!(good("My favourite colour is blue.")[0]["key"], "fact:favourite-colour");
    }
}
