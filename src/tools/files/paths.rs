//! Where a memory tool path lands in the subject's tree, or why it may not.
//!
//! The reference implementation resolves a path under its `memories` directory and refuses one
//! that does not start with `/memories` or resolves outside it. Here there is no file system to
//! resolve against: the path is normalised by its components (`.` and empty ones dropped, `..`
//! taking one back), and a `..` that would climb above `/memories` is refused with the
//! reference's words, as is `/memoriesX` (which the reference would quietly read as
//! `/memories/X`). The normal form is the file's record key, so one path is one record.

/// The tree's root, and the start of every path.
pub const ROOT: &str = "/memories";

/// The longest normal path memgate keeps (the record's `content.subject` holds it).
pub const MAX_PATH_CHARS: usize = 200;

/// `path` in normal form (`/memories` or `/memories/a/b.md`), or the error the model reads.
pub fn resolve(path: &str) -> Result<String, String> {
    // Before any answer that repeats the path: an error that echoed a U+202E would reorder what
    // the model reads after it.
    if let Some(hidden) = path.chars().find(|c| is_invisible(*c)) {
        return Err(format!(
            "Path must not contain bidirectional or zero-width characters (found U+{:04X})",
            u32::from(hidden)
        ));
    }
    let not_under_root = || format!("Path must start with {ROOT}, got: {path}");
    let rest = path.strip_prefix(ROOT).ok_or_else(not_under_root)?;
    if !(rest.is_empty() || rest.starts_with('/')) {
        return Err(not_under_root());
    }
    if path.chars().any(char::is_control) {
        return Err("Path must not contain control characters (newlines, tabs, NUL, …)".to_owned());
    }
    let mut parts: Vec<&str> = Vec::new();
    for part in rest.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                if parts.pop().is_none() {
                    return Err(format!("Path {path} would escape {ROOT} directory"));
                }
            }
            part => parts.push(part),
        }
    }
    let normal = if parts.is_empty() { ROOT.to_owned() } else { format!("{ROOT}/{}", parts.join("/")) };
    if normal.chars().count() > MAX_PATH_CHARS {
        return Err(format!(
            "Path {path} is too long: memgate keeps paths of at most {MAX_PATH_CHARS} characters"
        ));
    }
    Ok(normal)
}

/// Characters that change how a path reads without being seen: the bidirectional controls
/// (`/memories/\u{202E}dm.exe` shows as `/memories/exe.md`) and the zero-width ones
/// (`notes\u{200B}.md` looks like `notes.md` and is another file). Neither is ever part of a name a
/// person typed, and two paths that look alike must be one file.
fn is_invisible(c: char) -> bool {
    matches!(c,
        '\u{061C}'                       // Arabic letter mark
        | '\u{200B}'..='\u{200F}'        // zero-width space, non-joiner, joiner; LRM, RLM
        | '\u{202A}'..='\u{202E}'        // bidi embeddings and overrides
        | '\u{2060}'..='\u{2064}'        // word joiner, invisible operators
        | '\u{2066}'..='\u{2069}'        // bidi isolates
        | '\u{FEFF}'                      // zero-width no-break space (BOM)
        | '\u{00AD}'                      // soft hyphen
        | '\u{180E}') // Mongolian vowel separator
}

/// The directory holding `path` (normal form); `None` for the root.
pub fn parent(path: &str) -> Option<&str> {
    (path != ROOT).then(|| path.rsplit_once('/').map_or(ROOT, |(parent, _)| parent))
}

/// Whether normal `path` is `dir` or lies beneath it.
pub fn is_within(path: &str, dir: &str) -> bool {
    path == dir || (path.starts_with(dir) && path.as_bytes().get(dir.len()) == Some(&b'/'))
}
