//! The gates a candidate passes before anything is written, in order; the first that refuses it
//! decides, and says why in words that never quote a secret.
//!
//! 1. `schema` — the candidate's shape (`type` one of fact, preference, decision, task; `content`
//!    an object; `about`, `confidence`, `evidence` present) and its content against the type's
//!    JSON Schema, as any write (`memory::checks`);
//! 2. `secret` — the secret scanner on the content and the evidence: refused, never stored,
//!    never logged (the reason names the kind and path only);
//! 3. `echo` — a candidate whose words come from the injected records, the system prompt or the
//!    assistant's answer, and not from the person's words, is dropped: what memgate recalled
//!    must not be learnt again (the feedback loop that gave one hallucination 668 copies);
//! 4. `attribution` — `about` must be `user`, and the `evidence` must be found in the person's
//!    words (normalized: case, punctuation and spacing aside);
//! 5. `confidence` — at or above the release's bound.
//!
//! Dedup and supersede by key come after, against the subject's live records (`write`).

use crate::record::collect_text;
use serde_json::Value;
use std::collections::BTreeSet;

/// The types the observer writes.
pub const TYPES: [&str; 4] = ["fact", "preference", "decision", "task"];

/// A word share at or above which a candidate counts as taken from a source.
const ECHO_OVERLAP: f64 = 0.6;
/// The share of a candidate's words the person's words must hold for it to be theirs.
const PERSON_OVERLAP: f64 = 0.5;
/// Normalized evidence shorter than this proves nothing.
const MIN_EVIDENCE_CHARS: usize = 8;

/// One candidate as the extraction returned it, its shape checked.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    pub record_type: String,
    pub content: Value,
    pub about: String,
    pub confidence: f64,
    pub evidence: String,
    /// The record's topic, when the extraction named one: a live record with it is superseded.
    pub key: Option<String>,
}

/// Why a candidate was dropped: the gate, and the reason in words.
#[derive(Debug, Clone, PartialEq)]
pub struct Dropped {
    pub gate: &'static str,
    pub reason: String,
}

impl Dropped {
    fn new(gate: &'static str, reason: impl Into<String>) -> Dropped {
        Dropped { gate, reason: reason.into() }
    }
}

/// What the echo and attribution gates compare a candidate with.
pub struct Exchange<'a> {
    pub person: &'a str,
    pub answer: &'a str,
    pub system: &'a str,
    /// The injected records' text (`memory::passage_text`).
    pub injected: &'a [String],
}

/// A candidate's type as a fixed name (`unknown` when it names none of `TYPES`).
pub fn type_name(raw: &Value) -> &'static str {
    let named = raw.get("type").and_then(Value::as_str).unwrap_or("");
    TYPES.iter().find(|t| **t == named).copied().unwrap_or("unknown")
}

/// Gate 1's first half: the candidate's shape. Its content is checked against its schema by the
/// writer's envelope check (`schema_problem`).
pub fn shape(raw: &Value) -> Result<Candidate, Dropped> {
    let bad = |why: &str| Dropped::new("schema", why.to_owned());
    let object = raw.as_object().ok_or_else(|| bad("a candidate must be a JSON object"))?;
    let record_type = object.get("type").and_then(Value::as_str).unwrap_or("");
    if !TYPES.contains(&record_type) {
        return Err(bad("type must be fact, preference, decision or task"));
    }
    let content =
        object.get("content").filter(|c| c.is_object()).ok_or_else(|| bad("content must be an object"))?;
    let about = object
        .get("about")
        .and_then(Value::as_str)
        .ok_or_else(|| bad("about must be user, assistant or other"))?;
    if !matches!(about, "user" | "assistant" | "other") {
        return Err(bad("about must be user, assistant or other"));
    }
    let confidence = object
        .get("confidence")
        .and_then(Value::as_f64)
        .filter(|c| (0.0..=1.0).contains(c))
        .ok_or_else(|| bad("confidence must be a number from 0 to 1"))?;
    let evidence =
        object.get("evidence").and_then(Value::as_str).ok_or_else(|| bad("evidence must be a quote"))?;
    let key = match object.get("key") {
        None | Some(Value::Null) => None,
        Some(Value::String(key)) if !key.trim().is_empty() && key.len() <= 200 => Some(key.trim().to_owned()),
        Some(_) => return Err(bad("key must be a short string")),
    };
    Ok(Candidate {
        record_type: record_type.to_owned(),
        content: content.clone(),
        about: about.to_owned(),
        confidence,
        evidence: evidence.to_owned(),
        key,
    })
}

/// Gate 2 on what the envelope check does not see: the evidence (kept in the record's metadata,
/// but scanned here first so that its reason can say "evidence").
pub fn secret_in_evidence(candidate: &Candidate) -> Option<Dropped> {
    crate::memory::checks::secrets::is_secret_text(&candidate.evidence)
        .then(|| Dropped::new("secret", "the evidence holds a secret; secrets never go into memory"))
}

/// Gates 1 and 2 on the envelope check's problems: a secret anywhere is the secret gate's (named
/// by kind and path, never quoted); anything else the schema's.
pub fn envelope_problems(problems: &[crate::memory::checks::envelope::Problem]) -> Dropped {
    let secrets: Vec<String> = problems
        .iter()
        .filter(|p| p.kind == "secret")
        .map(|p| format!("{}: {}", p.path, p.message))
        .collect();
    if !secrets.is_empty() {
        return Dropped::new(
            "secret",
            format!("a secret; secrets never go into memory ({})", secrets.join("; ")),
        );
    }
    let named: Vec<String> = problems.iter().map(|p| format!("{} ({})", p.path, p.kind)).collect();
    Dropped::new("schema", format!("the content does not fit its type: {}", named.join(", ")))
}

/// Gates 3 to 5: echo, attribution, confidence.
pub fn judge(candidate: &Candidate, exchange: &Exchange<'_>, min_confidence: f64) -> Option<Dropped> {
    let mut text = String::new();
    collect_text(&candidate.content, &mut text);
    let words = content_words(&text);
    let person = normalize(exchange.person);
    let person_words = content_words(exchange.person);
    let evidence = normalize(&candidate.evidence);
    let evidence_is_theirs = evidence.len() >= MIN_EVIDENCE_CHARS && person.contains(&evidence);
    let theirs = share(&words, &person_words) >= PERSON_OVERLAP && evidence_is_theirs;
    if !theirs {
        let sources = exchange
            .injected
            .iter()
            .map(|text| ("an injected record", text.as_str()))
            .chain([("the system prompt", exchange.system), ("the assistant's answer", exchange.answer)]);
        for (name, source) in sources {
            if source.is_empty() {
                continue;
            }
            let source_words = content_words(source);
            // Evidence the person said proves nothing about where the rest came from (answers
            // often quote the question); evidence only a source holds is that source's.
            let from_source = share(&words, &source_words) >= ECHO_OVERLAP
                || (!evidence_is_theirs
                    && evidence.len() >= MIN_EVIDENCE_CHARS
                    && normalize(source).contains(&evidence));
            if from_source {
                return Some(Dropped::new("echo", format!("it repeats {name}, not the person's own words")));
            }
        }
    }
    if candidate.about != "user" {
        return Some(Dropped::new(
            "attribution",
            format!(
                "it is about {}, not the person: only what people say of themselves is kept",
                match candidate.about.as_str() {
                    "assistant" => "the assistant",
                    _ => "someone else",
                }
            ),
        ));
    }
    if !evidence_is_theirs {
        return Some(Dropped::new("attribution", "its evidence is not found in the person's words"));
    }
    if candidate.confidence < min_confidence {
        return Some(Dropped::new(
            "confidence",
            format!("confidence {:.2} is below the bound {:.2}", candidate.confidence, min_confidence),
        ));
    }
    None
}

/// Lower case, letters and digits only, one space between words.
pub fn normalize(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut space = false;
    for c in text.chars().flat_map(char::to_lowercase) {
        if c.is_alphanumeric() {
            if space && !out.is_empty() {
                out.push(' ');
            }
            space = false;
            out.push(c);
        } else {
            space = true;
        }
    }
    out
}

/// Words that carry meaning: three characters or more, not among the commonest.
fn content_words(text: &str) -> BTreeSet<String> {
    const COMMON: [&str; 24] = [
        "the", "and", "for", "that", "this", "with", "you", "your", "are", "was", "have", "has", "not",
        "but", "from", "they", "will", "would", "can", "user", "person", "their", "its", "about",
    ];
    normalize(text)
        .split(' ')
        .filter(|w| w.chars().count() >= 3 && !COMMON.contains(w))
        .map(str::to_owned)
        .collect()
}

/// The share of `words` that `of` holds (0 for no words).
fn share(words: &BTreeSet<String>, of: &BTreeSet<String>) -> f64 {
    if words.is_empty() {
        return 0.0;
    }
    words.iter().filter(|w| of.contains(*w)).count() as f64 / words.len() as f64
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn candidate(content: Value, about: &str, confidence: f64, evidence: &str) -> Candidate {
        shape(&json!({"type": "preference", "content": content, "about": about, "confidence": confidence, "evidence": evidence}))
            .unwrap()
    }

    fn exchange<'a>(injected: &'a [String]) -> Exchange<'a> {
        Exchange {
            person: "Hi! I prefer window seats on long flights. My sister loves skiing.",
            answer: "Noted. Our premium lounge is open to all gold members.",
            system: "You are a travel assistant for Example Air. Always be polite.",
            injected,
        }
    }

    #[test]
    fn each_junk_kind_meets_its_gate_and_the_persons_own_preference_passes() {
        let injected = vec!["preference\nmeal vegetarian meals on every flight".to_owned()];
        let ex = exchange(&injected);
        let good = candidate(
            json!({"topic": "seating", "preference": "window seats on long flights"}),
            "user",
            0.9,
            "I prefer window seats on long flights",
        );
        assert_eq!(judge(&good, &ex, 0.7), None);
        let echo_record = candidate(
            json!({"topic": "meal", "preference": "vegetarian meals on every flight"}),
            "user",
            0.9,
            "vegetarian meals on every flight",
        );
        assert_eq!(judge(&echo_record, &ex, 0.7).unwrap().gate, "echo");
        let echo_system = candidate(
            json!({"topic": "role", "preference": "travel assistant for Example Air"}),
            "user",
            0.9,
            "You are a travel assistant for Example Air",
        );
        assert_eq!(judge(&echo_system, &ex, 0.7).unwrap().gate, "echo");
        let claim = candidate(
            json!({"topic": "lounge", "preference": "premium lounge open to gold members"}),
            "assistant",
            0.9,
            "Our premium lounge is open to all gold members",
        );
        assert_eq!(judge(&claim, &ex, 0.7).unwrap().gate, "echo");
        let other = candidate(
            json!({"topic": "sport", "preference": "loves skiing"}),
            "other",
            0.9,
            "My sister loves skiing",
        );
        assert_eq!(judge(&other, &ex, 0.7).unwrap().gate, "attribution");
        let unfounded = candidate(
            json!({"topic": "seating", "preference": "aisle seats"}),
            "user",
            0.9,
            "I want aisle seats",
        );
        assert_eq!(judge(&unfounded, &ex, 0.7).unwrap().gate, "attribution");
        let guess = candidate(
            json!({"topic": "seating", "preference": "window seats on long flights"}),
            "user",
            0.3,
            "I prefer window seats",
        );
        assert_eq!(judge(&guess, &ex, 0.7).unwrap().gate, "confidence");
    }

    #[test]
    fn shapes_and_secrets_are_refused_by_kind_never_quoted() {
        assert_eq!(shape(&json!({"type": "opinion"})).unwrap_err().gate, "schema");
        assert_eq!(
            shape(
                &json!({"type": "fact", "content": "x", "about": "user", "confidence": 1, "evidence": "e"})
            )
            .unwrap_err()
            .gate,
            "schema"
        );
        let key = format!("sk-ant-api03-{}", "Ab3xY9".repeat(15));
        let leaky =
            candidate(json!({"topic": "k", "preference": "p"}), "user", 0.9, &format!("my key is {key}"));
        let dropped = secret_in_evidence(&leaky).unwrap();
        assert_eq!(dropped.gate, "secret");
        assert!(!dropped.reason.contains(&key));
        assert_eq!(normalize("  I PREFER, tea!! "), "i prefer tea");
    }
}
