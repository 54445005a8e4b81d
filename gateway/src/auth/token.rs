//! RFC 9068 JWT access tokens: the header checks that pick a key ([`peek`]), and the
//! signature and claim checks once the key is known ([`verify`]).
//!
//! Only asymmetric algorithms are accepted, and only with a key of their own family from the
//! issuer's JWKS: `alg: none` does not parse, `HS*` is refused before any key is looked at, so
//! an issuer's public key can never be used as an HMAC secret.

use jsonwebtoken::Algorithm;
use jsonwebtoken::DecodingKey;
use jsonwebtoken::Validation;
use jsonwebtoken::jwk::AlgorithmParameters;
use jsonwebtoken::jwk::EllipticCurve;
use jsonwebtoken::jwk::Jwk;
use jsonwebtoken::jwk::PublicKeyUse;
use serde_json::Value;

use crate::auth::policy::Principal;

/// Clock skew tolerated on `iat`, `nbf` and `exp`, in seconds.
pub const LEEWAY_SECS: u64 = 30;

/// Why a presented token is refused. Every one of these is the caller's doing: `401`.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TokenError {
    #[error("the Authorization header is not a single `Bearer <token>`")]
    NotBearer,
    #[error("not a JWS compact token: {0}")]
    Malformed(String),
    #[error(
        "the header's typ is {0:?}, not at+jwt (an ID token or other JWT is not an access token)"
    )]
    NotAccessToken(Option<String>),
    #[error("algorithm {0:?} is not accepted: only the issuer's asymmetric algorithms are")]
    Algorithm(Algorithm),
    #[error("the header names no kid")]
    NoKid,
    #[error("no key {0:?} in the issuer's JWKS")]
    UnknownKey(String),
    #[error("key {kid:?} is not a key for {alg:?}")]
    KeyMismatch { kid: String, alg: Algorithm },
    #[error("the signature does not verify: {0}")]
    Signature(String),
    #[error("claim {0} is missing or not of its type")]
    Claim(&'static str),
    #[error("iss {0:?} is not the configured issuer")]
    Issuer(String),
    #[error("aud does not name this resource server")]
    Audience,
    #[error("the token expired")]
    Expired,
    #[error("the token is not valid yet (iat or nbf in the future)")]
    NotYetValid,
    #[error("the header's crit names extensions this gateway does not understand: {0}")]
    Critical(String),
    #[error("the token lives {lifetime} s (exp - iat), over the {max} s allowed")]
    LifetimeTooLong { lifetime: u64, max: u64 },
}

/// What the gateway checks claims against.
#[derive(Debug, Clone)]
pub struct Rules {
    pub issuer: String,
    pub audience: String,
    /// `--auth-max-token-lifetime` in seconds: `exp - iat` may be at most this.
    pub max_lifetime_secs: Option<u64>,
}

/// The header fields that choose the key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peeked {
    pub alg: Algorithm,
    pub kid: String,
}

/// A token that passed every check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    pub principal: Principal,
    pub client_id: String,
    pub jti: String,
    /// `exp`, in seconds since the Unix epoch: when an admitted subscription must end.
    pub exp: u64,
}

/// The token of an `Authorization: Bearer <token>` header value.
pub fn bearer(value: &[u8]) -> Result<&str, TokenError> {
    let text = std::str::from_utf8(value).map_err(|_| TokenError::NotBearer)?;
    let (scheme, token) = text.split_once(' ').ok_or(TokenError::NotBearer)?;
    let token = token.trim_matches(' ');
    if !scheme.eq_ignore_ascii_case("bearer") || token.is_empty() || token.contains(' ') {
        return Err(TokenError::NotBearer);
    }
    Ok(token)
}

/// Checks the header: three parts, `typ: at+jwt`, an asymmetric `alg`, a `kid`.
pub fn peek(token: &str) -> Result<Peeked, TokenError> {
    if token.split('.').count() != 3 {
        return Err(TokenError::Malformed(
            "a JWS has three dot-separated parts".into(),
        ));
    }
    // `alg: none` and unknown algorithms fail here: the Algorithm enum has no such member.
    let header =
        jsonwebtoken::decode_header(token).map_err(|e| TokenError::Malformed(e.to_string()))?;
    let typ_ok = header.typ.as_deref().is_some_and(|t| {
        t.eq_ignore_ascii_case("at+jwt") || t.eq_ignore_ascii_case("application/at+jwt")
    });
    if !typ_ok {
        return Err(TokenError::NotAccessToken(header.typ));
    }
    refuse_crit(token)?;
    if matches!(
        header.alg,
        Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512
    ) {
        return Err(TokenError::Algorithm(header.alg));
    }
    let kid = header
        .kid
        .filter(|k| !k.is_empty())
        .ok_or(TokenError::NoKid)?;
    Ok(Peeked {
        alg: header.alg,
        kid,
    })
}

/// RFC 7515 §4.1.11: a recipient must refuse a JWS whose `crit` names an extension it does
/// not understand. This gateway understands none, so any `crit` at all (an empty or malformed
/// one included, which the RFC forbids) refuses the token. jsonwebtoken's `Header` drops the
/// parameter, so the header is read again here.
fn refuse_crit(token: &str) -> Result<(), TokenError> {
    use base64::Engine;
    let first = token.split('.').next().unwrap_or_default();
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(first)
        .map_err(|e| TokenError::Malformed(e.to_string()))?;
    let header: Value =
        serde_json::from_slice(&bytes).map_err(|e| TokenError::Malformed(e.to_string()))?;
    match header.get("crit") {
        None => Ok(()),
        Some(crit) => Err(TokenError::Critical(crit.to_string())),
    }
}

/// Whether `jwk` is a signing key of `alg`'s family (and, when it names one, of `alg` itself).
pub fn key_fits(jwk: &Jwk, alg: Algorithm) -> bool {
    if jwk
        .common
        .public_key_use
        .as_ref()
        .is_some_and(|u| *u != PublicKeyUse::Signature)
    {
        return false;
    }
    // `KeyAlgorithm` and `Algorithm` are distinct enums that name the signature algorithms
    // alike (`ES256`, `EdDSA`, ...); a key pinned to one algorithm serves only that one.
    if let Some(named) = jwk.common.key_algorithm
        && format!("{named:?}") != format!("{alg:?}")
    {
        return false;
    }
    match (&jwk.algorithm, alg) {
        (
            AlgorithmParameters::RSA(_),
            Algorithm::RS256
            | Algorithm::RS384
            | Algorithm::RS512
            | Algorithm::PS256
            | Algorithm::PS384
            | Algorithm::PS512,
        ) => true,
        (AlgorithmParameters::EllipticCurve(p), Algorithm::ES256) => p.curve == EllipticCurve::P256,
        (AlgorithmParameters::EllipticCurve(p), Algorithm::ES384) => p.curve == EllipticCurve::P384,
        (AlgorithmParameters::OctetKeyPair(p), Algorithm::EdDSA) => {
            p.curve == EllipticCurve::Ed25519
        }
        _ => false,
    }
}

/// Verifies the signature with `jwk` and checks the claims RFC 9068 requires, at `now`
/// (seconds since the Unix epoch).
pub fn verify(
    token: &str,
    peeked: &Peeked,
    jwk: &Jwk,
    rules: &Rules,
    now: u64,
) -> Result<Verified, TokenError> {
    if !key_fits(jwk, peeked.alg) {
        return Err(TokenError::KeyMismatch {
            kid: peeked.kid.clone(),
            alg: peeked.alg,
        });
    }
    let key = DecodingKey::from_jwk(jwk).map_err(|e| TokenError::Signature(e.to_string()))?;
    // The library checks only the signature; every claim is checked below, by RFC 9068's rules.
    let mut validation = Validation::new(peeked.alg);
    validation.validate_exp = false;
    validation.validate_nbf = false;
    validation.validate_aud = false;
    validation.required_spec_claims.clear();
    let data = jsonwebtoken::decode::<Value>(token, &key, &validation)
        .map_err(|e| TokenError::Signature(e.to_string()))?;
    claims(&data.claims, rules, now)
}

fn claims(c: &Value, rules: &Rules, now: u64) -> Result<Verified, TokenError> {
    let text = |name: &'static str| -> Result<String, TokenError> {
        c.get(name)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .ok_or(TokenError::Claim(name))
    };
    let time = |name: &'static str| -> Result<u64, TokenError> {
        let v = c.get(name).ok_or(TokenError::Claim(name))?;
        // NumericDate may carry a fraction; whole seconds are enough here.
        v.as_u64()
            .or_else(|| {
                v.as_f64()
                    .filter(|f| f.is_finite() && *f >= 0.0)
                    .map(|f| f as u64)
            })
            .ok_or(TokenError::Claim(name))
    };
    let iss = text("iss")?;
    if iss != rules.issuer {
        return Err(TokenError::Issuer(iss));
    }
    let aud_ok = match c.get("aud") {
        Some(Value::String(a)) => *a == rules.audience,
        Some(Value::Array(all)) => all.iter().any(|a| a.as_str() == Some(&rules.audience)),
        _ => return Err(TokenError::Claim("aud")),
    };
    if !aud_ok {
        return Err(TokenError::Audience);
    }
    let subject = text("sub")?;
    let client_id = text("client_id")?;
    let jti = text("jti")?;
    let iat = time("iat")?;
    let exp = time("exp")?;
    if exp.saturating_add(LEEWAY_SECS) <= now {
        return Err(TokenError::Expired);
    }
    if iat > now.saturating_add(LEEWAY_SECS) {
        return Err(TokenError::NotYetValid);
    }
    if let Some(max) = rules.max_lifetime_secs
        && exp.saturating_sub(iat) > max
    {
        return Err(TokenError::LifetimeTooLong {
            lifetime: exp.saturating_sub(iat),
            max,
        });
    }
    if c.get("nbf").is_some() && time("nbf")? > now.saturating_add(LEEWAY_SECS) {
        return Err(TokenError::NotYetValid);
    }
    Ok(Verified {
        principal: Principal {
            issuer: iss,
            subject,
        },
        client_id,
        jti,
        exp,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules() -> Rules {
        Rules {
            issuer: "https://issuer.example".into(),
            audience: "https://streams.example".into(),
            max_lifetime_secs: None,
        }
    }

    fn good(now: u64) -> Value {
        serde_json::json!({
            "iss": "https://issuer.example",
            "aud": ["https://other.example", "https://streams.example"],
            "sub": "user-1",
            "client_id": "app",
            "jti": "j1",
            "iat": now - 10,
            "exp": now + 300,
        })
    }

    fn without(mut v: Value, name: &str) -> Value {
        v.as_object_mut().expect("object").remove(name);
        v
    }

    #[test]
    fn every_required_claim_is_checked() {
        let now = 1_800_000_000;
        let v = claims(&good(now), &rules(), now).expect("valid");
        assert_eq!(v.principal.subject, "user-1");
        assert_eq!(v.exp, now + 300);
        for name in ["iss", "aud", "sub", "client_id", "jti", "iat", "exp"] {
            assert_eq!(
                claims(&without(good(now), name), &rules(), now),
                Err(TokenError::Claim(name)),
                "{name}"
            );
        }
        let mut v = good(now);
        v["aud"] = "https://other.example".into();
        assert_eq!(claims(&v, &rules(), now), Err(TokenError::Audience));
        let mut v = good(now);
        v["exp"] = (now - LEEWAY_SECS).into();
        assert_eq!(claims(&v, &rules(), now), Err(TokenError::Expired));
        let mut v = good(now);
        v["iat"] = (now + 3600).into();
        assert_eq!(claims(&v, &rules(), now), Err(TokenError::NotYetValid));
        let mut v = good(now);
        v["sub"] = 5.into();
        assert_eq!(claims(&v, &rules(), now), Err(TokenError::Claim("sub")));
        let mut v = good(now);
        v["iss"] = "https://issuer.example/".into();
        assert!(matches!(
            claims(&v, &rules(), now),
            Err(TokenError::Issuer(_))
        ));
    }

    #[test]
    fn a_lifetime_over_the_maximum_is_refused_and_one_at_it_passes() {
        let now = 1_800_000_000;
        let r = Rules {
            max_lifetime_secs: Some(300),
            ..rules()
        };
        let mut v = good(now);
        v["exp"] = (now - 10 + 300).into();
        assert!(claims(&v, &r, now).is_ok());
        v["exp"] = (now - 10 + 301).into();
        assert_eq!(
            claims(&v, &r, now),
            Err(TokenError::LifetimeTooLong {
                lifetime: 301,
                max: 300
            })
        );
        // iat is required in any case, so a token without it never gets past the check.
        assert_eq!(
            claims(&without(good(now), "iat"), &r, now),
            Err(TokenError::Claim("iat"))
        );
    }

    #[test]
    fn bearer_credentials_are_parsed_strictly() {
        assert_eq!(bearer(b"Bearer abc"), Ok("abc"));
        assert_eq!(bearer(b"bearer abc"), Ok("abc"));
        assert_eq!(bearer(b"Basic abc"), Err(TokenError::NotBearer));
        assert_eq!(bearer(b"Bearer "), Err(TokenError::NotBearer));
        assert_eq!(bearer(b"Bearer a b"), Err(TokenError::NotBearer));
        assert_eq!(bearer(b"Bearer\xff abc"), Err(TokenError::NotBearer));
    }

    #[test]
    fn headers_without_at_jwt_or_with_hmac_or_none_are_refused() {
        use base64::Engine;
        let b64 = |v: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v);
        let tok = |h: &str| format!("{}.{}.sig", b64(h), b64("{}"));
        assert!(peek(&tok(r#"{"alg":"RS256","typ":"at+jwt","kid":"k"}"#)).is_ok());
        assert!(
            peek(&tok(
                r#"{"alg":"ES256","typ":"application/at+JWT","kid":"k"}"#
            ))
            .is_ok()
        );
        assert!(matches!(
            peek(&tok(r#"{"alg":"RS256","typ":"JWT","kid":"k"}"#)),
            Err(TokenError::NotAccessToken(_))
        ));
        assert!(matches!(
            peek(&tok(r#"{"alg":"HS256","typ":"at+jwt","kid":"k"}"#)),
            Err(TokenError::Algorithm(Algorithm::HS256))
        ));
        assert!(matches!(
            peek(&tok(r#"{"alg":"none","typ":"at+jwt","kid":"k"}"#)),
            Err(TokenError::Malformed(_))
        ));
        assert_eq!(
            peek(&tok(r#"{"alg":"EdDSA","typ":"at+jwt"}"#)),
            Err(TokenError::NoKid)
        );
        assert!(matches!(peek("a.b"), Err(TokenError::Malformed(_))));
        for crit in [
            r#"{"alg":"EdDSA","typ":"at+jwt","kid":"k","crit":["exp"]}"#,
            r#"{"alg":"EdDSA","typ":"at+jwt","kid":"k","crit":[]}"#,
            r#"{"alg":"EdDSA","typ":"at+jwt","kid":"k","crit":"b64"}"#,
        ] {
            assert!(
                matches!(peek(&tok(crit)), Err(TokenError::Critical(_))),
                "{crit}"
            );
        }
    }
}
