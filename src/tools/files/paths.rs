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

/// The directory holding `path` (normal form); `None` for the root.
pub fn parent(path: &str) -> Option<&str> {
    (path != ROOT).then(|| path.rsplit_once('/').map_or(ROOT, |(parent, _)| parent))
}

/// Whether normal `path` is `dir` or lies beneath it.
pub fn is_within(path: &str, dir: &str) -> bool {
    path == dir || (path.starts_with(dir) && path.as_bytes().get(dir.len()) == Some(&b'/'))
}
