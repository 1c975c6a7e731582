//! Which `/v1/*` paths a managed-mode caller may reach with memgate's upstream key.
//!
//! In managed mode every tenant's requests go upstream with memgate's one Anthropic key, so they
//! share one Anthropic workspace: a batch or a file one tenant created is listed, read, cancelled
//! or deleted by any other with the same calls. Messages (with memory), token counting and the
//! model list are the gateway's purpose and open to every caller; every other path — batches,
//! files, and whatever the API adds — needs a permission on the caller's key or token
//! (`batches`, `files`, `upstream_other`), given only to callers trusted with the shared
//! workspace. Passthrough callers send their own key and reach every path.
//!
//! The check is on the path as sent; a path that an upstream might read differently
//! (`/v1/models/../files`, percent-encoded dots or slashes, empty segments) is refused
//! outright, so no prefix here can be walked out of.

use crate::error::{ApiError, Code};
use crate::identity::Caller;
use crate::identity::UpstreamCredential;

/// What a path needs in managed mode.
#[derive(Debug, PartialEq, Eq)]
enum Needs {
    Nothing,
    Permission(&'static str, &'static str),
}

fn needs(path: &str) -> Needs {
    let under =
        |prefix: &str| path == prefix || path.strip_prefix(prefix).is_some_and(|rest| rest.starts_with('/'));
    if path == "/v1/messages" || path == "/v1/messages/count_tokens" || under("/v1/models") {
        Needs::Nothing
    } else if under("/v1/messages/batches") {
        Needs::Permission("batches", "message batches")
    } else if under("/v1/files") {
        Needs::Permission("files", "files")
    } else {
        Needs::Permission("upstream_other", "this API path")
    }
}

/// Segments an upstream could resolve to another path than the one checked here.
fn is_ambiguous(path: &str) -> bool {
    let lower = path.to_ascii_lowercase();
    lower.contains("%2e")
        || lower.contains("%2f")
        || lower.contains("%5c")
        || path.contains('\\')
        || path.split('/').skip(1).any(|segment| segment.is_empty() || segment == "." || segment == "..")
}

/// Refuses a managed-mode caller a path its permissions do not open.
pub fn check_upstream_path(caller: &Caller, path: &str) -> Result<(), ApiError> {
    if matches!(caller.upstream_credential, UpstreamCredential::Forward) {
        return Ok(());
    }
    if is_ambiguous(path) {
        return Err(ApiError::coded(
            Code::AmbiguousPath,
            format!(
                "the path {path} has empty, `.` or `..` segments or encoded separators; send it in its plain form"
            ),
        ));
    }
    let Needs::Permission(name, what) = needs(path) else { return Ok(()) };
    let granted = match name {
        "batches" => caller.permissions.batches,
        "files" => caller.permissions.files,
        _ => caller.permissions.upstream_other,
    };
    if granted {
        return Ok(());
    }
    Err(ApiError::coded(
        Code::PathNotAllowed,
        format!(
            "{what} ({path}) would use this gateway's shared upstream workspace, which every tenant's \
             requests share; the caller needs the `{name}` permission"
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::Permissions;

    fn managed(permissions: &[&str]) -> Caller {
        let mut caller = Caller::new("t", []);
        caller.upstream_credential = UpstreamCredential::Replace("sk-ant-memgate".to_owned().into());
        caller.permissions = Permissions::from_names(permissions.iter().copied());
        caller
    }

    #[test]
    fn messages_and_models_are_open_the_rest_needs_its_permission() {
        let nobody = managed(&[]);
        for open in ["/v1/messages", "/v1/messages/count_tokens", "/v1/models", "/v1/models/claude-x"] {
            assert!(check_upstream_path(&nobody, open).is_ok(), "{open}");
        }
        for (path, permission) in [
            ("/v1/messages/batches", "batches"),
            ("/v1/messages/batches/msgbatch_1/results", "batches"),
            ("/v1/files", "files"),
            ("/v1/files/file_1/content", "files"),
            ("/v1/skills", "upstream_other"),
            ("/v1/modelsx", "upstream_other"),
            ("/v1/messages/other", "upstream_other"),
        ] {
            let err = check_upstream_path(&nobody, path).unwrap_err();
            assert_eq!(err.code(), Code::PathNotAllowed, "{path}");
            assert!(err.message().contains(permission), "{path}: {}", err.message());
            assert!(check_upstream_path(&managed(&[permission]), path).is_ok(), "{path} with {permission}");
        }
        assert!(check_upstream_path(&managed(&["files"]), "/v1/messages/batches").is_err());
    }

    #[test]
    fn no_path_walks_out_of_an_open_prefix() {
        let nobody = managed(&["batches", "files", "upstream_other"]);
        for sneaky in [
            "/v1/models/../files",
            "/v1/models/%2e%2e/files",
            "/v1/models/%2E%2E%2Ffiles",
            "/v1/models//files",
            "/v1/models/./x",
            "/v1/models\\..\\files",
        ] {
            let err = check_upstream_path(&nobody, sneaky).unwrap_err();
            assert_eq!(err.code(), Code::AmbiguousPath, "{sneaky}");
        }
    }

    #[test]
    fn passthrough_callers_use_their_own_key_anywhere() {
        assert!(check_upstream_path(&Caller::new("default", []), "/v1/files/../x").is_ok());
    }
}
