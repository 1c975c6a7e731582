//! Language centering: taking the language out of a vector before it is compared.
//!
//! Why: a multilingual model's vectors carry a strong "which language is this" direction. With
//! multilingual-e5-small a Chinese question about a late desk scores a Chinese refund policy
//! (0.866) above the English note about the desk (0.822): same language beats same topic, and
//! no threshold separates relevant from unrelated across languages (docs/embedding.md).
//!
//! How: the mean vector of a language's texts is mostly that direction. For each script we know
//! (Latin, Cyrillic, Han) the embedder embeds a fixed set of everyday sentences that say the same
//! thing in English, Russian and Chinese (`reference_sentences.tsv`), once as queries and once as
//! passages (the prefixes shift vectors too), and keeps the means: the *centres*. Every vector it
//! returns afterwards is `normalize(v - centre(script of its text, role))`. Parallel sentences
//! mean the three centres differ by language, not by topic. This is the mean-centering of
//! Libovický et al., "On the Language Neutrality of Pre-trained Multilingual Representations"
//! (2020), which measured it to improve cross-lingual retrieval; on memgate's support sample it
//! ranks the right record first for 11 of 12 queries instead of 8.
//!
//! Texts in another script (Arabic, Hangul, kana…) or with no letters get the mean of the three
//! centres, so they live on the same scale. Centering changes every score, so it is part of the
//! model id and the thresholds are calibrated for it (`config::embedding`, docs/embedding.md).
//!
//! The centres cost 180 short model runs (~2 s), so they are kept in a small file beside the
//! model, keyed by the model id and the sentences; a read-only model folder only means they are
//! computed again at each start.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The parallel reference sentences: `english<TAB>russian<TAB>chinese` per line.
const REFERENCE: &str = include_str!("reference_sentences.tsv");

/// The scripts with their own centre, in the column order of `REFERENCE`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Script {
    Latin,
    Cyrillic,
    Han,
    /// Any other script, or no letters at all: the mean of the three centres.
    Other,
}

/// Which side of a comparison a text is on; e5 embeds them with different prefixes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Query,
    Passage,
}

/// The script most of a text's letters are written in. A Han character counts three letters (a
/// Chinese word is one or two characters, an English one about five letters), so a Chinese
/// sentence naming an English product is still Chinese.
pub fn script_of(text: &str) -> Script {
    let (mut weight, mut others) = ([0usize; 3], 0);
    for c in text.chars() {
        match c {
            'a'..='z' | 'A'..='Z' | '\u{00C0}'..='\u{024F}' => weight[0] += 1,
            '\u{0400}'..='\u{052F}' => weight[1] += 1,
            '\u{3400}'..='\u{4DBF}' | '\u{4E00}'..='\u{9FFF}' | '\u{F900}'..='\u{FAFF}' => weight[2] += 3,
            c if c.is_alphabetic() => others += 1,
            _ => {}
        }
    }
    let scripts = [Script::Latin, Script::Cyrillic, Script::Han];
    match scripts.into_iter().zip(weight).max_by_key(|(_, w)| *w) {
        Some((script, most)) if most > 0 && others <= most => script,
        _ => Script::Other,
    }
}

/// The reference sentences, per script in `Script` order.
fn reference() -> [Vec<&'static str>; 3] {
    let mut columns: [Vec<&str>; 3] = Default::default();
    for line in REFERENCE.lines().filter(|l| !l.trim().is_empty() && !l.starts_with('#')) {
        let cells: Vec<&str> = line.split('\t').collect();
        assert_eq!(cells.len(), 3, "reference_sentences.tsv: three columns per line: {line:?}");
        for (column, cell) in columns.iter_mut().zip(cells) {
            column.push(cell);
        }
    }
    columns
}

/// What the centres were computed from, for the model id and the cache file.
pub fn fingerprint() -> String {
    let digest = Sha256::digest(REFERENCE.as_bytes());
    digest.iter().take(4).map(|b| format!("{b:02x}")).collect()
}

/// The texts to embed, unprefixed: every reference sentence of every script, script by script.
pub fn reference_texts() -> Vec<String> {
    reference().into_iter().flatten().map(str::to_owned).collect()
}

/// Per role, one centre per script plus their mean.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Centres {
    /// `Latin, Cyrillic, Han, Other`.
    query: [Vec<f32>; 4],
    passage: [Vec<f32>; 4],
}

impl Centres {
    /// From the embeddings of `reference_texts()`, as queries and as passages.
    pub fn from_reference(queries: &[Vec<f32>], passages: &[Vec<f32>]) -> Centres {
        Centres { query: centres(queries), passage: centres(passages) }
    }

    /// Takes the script's centre out of `vector` and normalizes it again.
    pub fn apply(&self, role: Role, text: &str, vector: &mut [f32]) {
        let set = match role {
            Role::Query => &self.query,
            Role::Passage => &self.passage,
        };
        let centre = &set[script_of(text) as usize];
        if centre.len() != vector.len() {
            return;
        }
        for (x, c) in vector.iter_mut().zip(centre) {
            *x -= c;
        }
        let norm = vector.iter().map(|x| x * x).sum::<f32>().sqrt();
        if norm > 1e-12 {
            vector.iter_mut().for_each(|x| *x /= norm);
        }
    }
}

fn centres(vectors: &[Vec<f32>]) -> [Vec<f32>; 4] {
    let per_script = vectors.len() / 3;
    let mean = |rows: &[Vec<f32>]| -> Vec<f32> {
        let dims = rows.first().map_or(0, Vec::len);
        let mut sum = vec![0.0f32; dims];
        for row in rows {
            sum.iter_mut().zip(row).for_each(|(s, x)| *s += x);
        }
        sum.iter().map(|s| s / rows.len().max(1) as f32).collect()
    };
    let latin = mean(&vectors[..per_script]);
    let cyrillic = mean(&vectors[per_script..2 * per_script]);
    let han = mean(&vectors[2 * per_script..]);
    let other = mean(&[latin.clone(), cyrillic.clone(), han.clone()]);
    [latin, cyrillic, han, other]
}

/// The cache file for a model's centres.
pub fn cache_path(model_dir: &Path, model_id: &str) -> PathBuf {
    let key: String = model_id.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '-' }).collect();
    model_dir.join(format!(".memgate-centres-{key}-{}.json", fingerprint()))
}

/// Centres cached by an earlier start, if the file is there and whole.
pub fn read_cache(path: &Path) -> Option<Centres> {
    let bytes = std::fs::read(path).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// Writes the cache through a temporary file and a rename, so processes starting together never
/// read half a file. Failure (a read-only folder) is only logged.
pub fn write_cache(path: &Path, centres: &Centres) {
    let temp = path.with_extension(format!("{}.tmp", std::process::id()));
    let written = serde_json::to_vec(centres)
        .map_err(std::io::Error::other)
        .and_then(|bytes| std::fs::write(&temp, bytes))
        .and_then(|()| std::fs::rename(&temp, path));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&temp);
        tracing::info!(path = %path.display(), error = %e, "language centres not cached; they are computed at each start");
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn scripts_are_told_apart_by_most_letters() {
        assert_eq!(script_of("When will my desk arrive?"), Script::Latin);
        assert_eq!(script_of("Когда привезут стол?"), Script::Cyrillic);
        assert_eq!(script_of("我的升降桌什么时候到？"), Script::Han);
        assert_eq!(script_of("我想买 GRND-200 咖啡研磨机"), Script::Han, "a product name inside Chinese");
        assert_eq!(script_of("Заказ ORD-4411 задерживается"), Script::Cyrillic);
        assert_eq!(script_of("مرحبا بكم في متجرنا"), Script::Other);
        assert_eq!(script_of("12345 !?"), Script::Other);
        assert_eq!(script_of(""), Script::Other);
    }

    #[test]
    fn the_reference_is_parallel_and_fingerprinted() {
        let columns = reference();
        assert!(columns[0].len() >= 20);
        assert!(columns.iter().all(|c| c.len() == columns[0].len()));
        assert_eq!(script_of(columns[0][0]), Script::Latin);
        assert_eq!(script_of(columns[1][0]), Script::Cyrillic);
        assert_eq!(script_of(columns[2][0]), Script::Han);
        assert_eq!(reference_texts().len(), 3 * columns[0].len());
        assert_eq!(fingerprint().len(), 8);
    }

    #[test]
    fn apply_takes_out_the_scripts_centre_and_normalizes() {
        let n = 4;
        // Latin texts all lean on axis 0, Cyrillic on axis 1, Han on axis 2.
        let rows = |axis: usize| {
            (0..n).map(move |i| {
                let mut v = vec![0.0; 4];
                v[axis] = 1.0;
                v[3] = if i % 2 == 0 { 0.5 } else { -0.5 };
                v
            })
        };
        let vectors: Vec<Vec<f32>> = rows(0).chain(rows(1)).chain(rows(2)).collect();
        let centres = Centres::from_reference(&vectors, &vectors);
        // The same meaning (axis 3) in two scripts: before centering the lean dominates.
        let mut english = vec![1.0, 0.0, 0.0, 0.5];
        let mut russian = vec![0.0, 1.0, 0.0, 0.5];
        assert!(crate::embed::cosine(&english, &russian) < 0.3);
        centres.apply(Role::Query, "an English text", &mut english);
        centres.apply(Role::Passage, "русский текст", &mut russian);
        assert_eq!(english, [0.0, 0.0, 0.0, 1.0], "the Latin lean is gone and the rest normalized");
        assert_eq!(russian, [0.0, 0.0, 0.0, 1.0], "the Cyrillic lean is gone");
        let mut other = vec![1.0, 1.0, 1.0, 0.0];
        centres.apply(Role::Query, "12345", &mut other);
        let third = 1.0 / 3f32.sqrt();
        assert!(other[..3].iter().all(|x| (x - third).abs() < 1e-6), "the mean of the centres: {other:?}");
    }

    #[test]
    fn the_cache_round_trips_and_a_broken_file_is_ignored() {
        let dir = std::env::temp_dir().join(format!("memgate-centres-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let vectors: Vec<Vec<f32>> = (0..6).map(|i| vec![i as f32, 1.0]).collect();
        let centres = Centres::from_reference(&vectors, &vectors);
        let path = cache_path(&dir, "multilingual-e5-small:0123abcd");
        assert!(
            path.file_name()
                .unwrap()
                .to_str()
                .unwrap()
                .starts_with(".memgate-centres-multilingual-e5-small-0123abcd-")
        );
        write_cache(&path, &centres);
        assert_eq!(read_cache(&path), Some(centres));
        std::fs::write(&path, b"{\"query\": [").unwrap();
        assert_eq!(read_cache(&path), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
