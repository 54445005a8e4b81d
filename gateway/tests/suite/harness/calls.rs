//! Calls through a gateway as one caller: `auth` is the whole `authorization` value
//! (`Bearer …`, see `auth::bearer`).

use ursula_testkit::auth::{OWNER, STRANGER, bearer, token};
use ursula_testkit::gateway::{Answer, Proc, TEXT, send};

/// `GET` of the whole stream at `path` (from offset `-1`) through `gw`, as `auth`.
pub fn read_as(gw: &Proc, path: &str, auth: &str) -> Answer {
    let url = gw.url(&format!("{path}?offset=-1"));
    send("GET", &url, &[("authorization", auth)], b"")
}

/// `POST` of `body` as text to the stream at `path` through `gw`, as `auth`.
pub fn append_as(gw: &Proc, path: &str, auth: &str, body: &[u8]) -> Answer {
    send(
        "POST",
        &gw.url(path),
        &[TEXT, ("authorization", auth)],
        body,
    )
}

/// `PUT` of an empty text stream at `path` through `gw`, as `auth`.
pub fn create_as(gw: &Proc, path: &str, auth: &str) -> Answer {
    send("PUT", &gw.url(path), &[TEXT, ("authorization", auth)], b"")
}

/// The `authorization` values of the owner and of a stranger, with tokens from `issuer`.
pub fn owner_and_stranger(issuer: &str) -> (String, String) {
    (
        bearer(&token(issuer, OWNER)),
        bearer(&token(issuer, STRANGER)),
    )
}
