-- Each console session is bound to the token that opened it (src/console/session.rs):
-- `token_fingerprint` is the HMAC-SHA256 of that token and the session's role under the
-- deployment's session key (`admin.session_secret`, else the `console_sessions` row of
-- server_secrets). A session whose fingerprint is not that of the token configured now for its
-- role is refused and deleted, so rotating a token ends the sessions it opened. Rows from before
-- this column have no fingerprint: they end at the next start.
ALTER TABLE console_sessions ADD COLUMN token_fingerprint TEXT NOT NULL DEFAULT '';
