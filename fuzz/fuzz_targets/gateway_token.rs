//! The gateway's access tokens (`gateway/src/auth/token.rs`): the `Authorization` value, the
//! JWS header that picks a key, and the signature and RFC 9068 claims once the key is known,
//! against one fixed Ed25519 key of a test issuer.
//!
//! The first byte picks the input:
//! - 0: an `Authorization` header value as a client sends it.
//! - 1: a header and a claims document (JSON, split at the first NUL), which the target signs
//!   with the test key, so that mutations reach the claim checks behind the signature.
//!
//! Beyond "no panic": only tokens the test key signed verify; a verified token's claims obey
//! the rules (issuer, expiry, non-empty subject, client and token ids); a signed token whose
//! header passed fails only on its claims, never on its signature; and changing one byte of a
//! verified token's claims makes it fail.

#![no_main]

use std::sync::LazyLock;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::Algorithm;
use jsonwebtoken::EncodingKey;
use jsonwebtoken::jwk::Jwk;
use libfuzzer_sys::fuzz_target;
use ursula_gateway::auth::token;
use ursula_gateway::auth::token::LEEWAY_SECS;
use ursula_gateway::auth::token::Rules;
use ursula_gateway::auth::token::TokenError;

/// The clock the claims are checked at.
const NOW: u64 = 1_800_000_000;
const KID: &str = "fuzz-key";
/// The test issuer's Ed25519 private key seed: fixed, so that checked-in seeds verify.
const SEED: [u8; 32] = [7; 32];

struct Issuer {
    signing: EncodingKey,
    jwk: Jwk,
    rules: Rules,
}

static ISSUER: LazyLock<Issuer> = LazyLock::new(|| {
    let pair = ring::signature::Ed25519KeyPair::from_seed_unchecked(&SEED).expect("seed");
    let public = ring::signature::KeyPair::public_key(&pair)
        .as_ref()
        .to_vec();
    // PKCS#8 v1 of an Ed25519 seed: the fixed DER prefix, then the 32 bytes.
    let mut pkcs8 = hex(b"302e020100300506032b657004220420");
    pkcs8.extend_from_slice(&SEED);
    let jwk = serde_json::json!({
        "kty": "OKP",
        "crv": "Ed25519",
        "x": URL_SAFE_NO_PAD.encode(public),
        "kid": KID,
        "use": "sig",
        "alg": "EdDSA",
    });
    Issuer {
        signing: EncodingKey::from_ed_der(&pkcs8),
        jwk: serde_json::from_value(jwk).expect("a JWK"),
        rules: Rules {
            issuer: "https://issuer.example".into(),
            audience: "https://streams.example".into(),
            max_lifetime_secs: None,
        },
    }
});

fn hex(text: &[u8]) -> Vec<u8> {
    text.chunks(2)
        .map(|p| u8::from_str_radix(std::str::from_utf8(p).expect("ascii"), 16).expect("hex"))
        .collect()
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    if mode % 2 == 0 {
        let _ = check(rest);
        return;
    }
    let (header, claims) = match rest.iter().position(|b| *b == 0) {
        Some(nul) => (&rest[..nul], &rest[nul + 1..]),
        None => (rest, &b"{}"[..]),
    };
    let input = format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(header),
        URL_SAFE_NO_PAD.encode(claims)
    );
    let signature = jsonwebtoken::crypto::sign(input.as_bytes(), &ISSUER.signing, Algorithm::EdDSA)
        .expect("signs");
    let value = format!("Bearer {input}.{signature}");
    if let Some(Err(e)) = check(value.as_bytes()) {
        let object =
            serde_json::from_slice::<serde_json::Value>(claims).is_ok_and(|c| c.is_object());
        let ours = token::peek(&format!("{input}.{signature}"))
            .is_ok_and(|p| p.alg == Algorithm::EdDSA && p.kid == KID);
        if object && ours {
            // jsonwebtoken reports claims it cannot read (a duplicate member, say) as
            // `Signature` errors too; only its own signature check must pass.
            let bad_signature = matches!(&e, TokenError::Signature(m) if m == "InvalidSignature");
            assert!(
                !bad_signature && !matches!(e, TokenError::KeyMismatch { .. }),
                "a token the key signed failed its signature: {e:?}"
            );
        }
    }
});

/// Runs an `Authorization` value through the gateway's checks; `None` when it stopped
/// before the key (not a bearer token, a header that names no key of ours).
fn check(value: &[u8]) -> Option<Result<token::Verified, TokenError>> {
    let token = token::bearer(value).ok()?;
    assert!(!token.is_empty() && !token.contains(' '));
    let peeked = token::peek(token).ok()?;
    assert!(!peeked.kid.is_empty());
    assert!(!matches!(
        peeked.alg,
        Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512
    ));
    if peeked.kid != KID {
        return None;
    }
    let verified = token::verify(token, &peeked, &ISSUER.jwk, &ISSUER.rules, NOW);
    if let Ok(v) = &verified {
        assert_eq!(v.principal.issuer, ISSUER.rules.issuer);
        assert!(!v.principal.subject.is_empty() && !v.client_id.is_empty() && !v.jti.is_empty());
        assert!(
            v.exp.saturating_add(LEEWAY_SECS) > NOW,
            "an expired token verified"
        );
        // The signature covers the claims: one changed character of them fails.
        let claims_at = token.find('.').expect("three parts") + 1;
        let mut forged = token.as_bytes().to_vec();
        forged[claims_at] = if forged[claims_at] == b'A' {
            b'B'
        } else {
            b'A'
        };
        let forged = String::from_utf8(forged).expect("ascii");
        assert!(
            token::verify(&forged, &peeked, &ISSUER.jwk, &ISSUER.rules, NOW).is_err(),
            "a token with changed claims verified"
        );
    }
    Some(verified)
}
