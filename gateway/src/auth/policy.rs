//! The access policy file (`--auth-policy`): which buckets exist for the gateway, who owns
//! each one, and which allow anonymous reads.
//!
//! ```toml
//! [[bucket]]
//! id = "tenant-a"
//! public_read = true
//! owners = [{ issuer = "https://issuer.example", subject = "user-1" }]
//! ```
//!
//! A bucket the file does not list does not exist as far as the gateway's clients can tell.

use std::collections::HashMap;
use std::path::Path;

use serde::Deserialize;
use serde::Serialize;

use crate::auth::AuthConfigError;

/// Who a validated token speaks for: the issuer-qualified subject. Subjects are unique only
/// within their issuer, so an owner always names both.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Principal {
    pub issuer: String,
    pub subject: String,
}

/// One `[[bucket]]` entry.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BucketPolicy {
    pub id: String,
    /// Anonymous callers may read, head, tail and read snapshots; nothing else.
    #[serde(default)]
    pub public_read: bool,
    #[serde(default)]
    pub owners: Vec<Principal>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PolicyFile {
    #[serde(default)]
    bucket: Vec<BucketPolicy>,
}

/// The loaded policy, by bucket id.
#[derive(Debug, Clone, Default)]
pub struct Policy {
    buckets: HashMap<String, BucketPolicy>,
}

/// What a request asks to do with a bucket, as far as the policy is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// `GET` and `HEAD`: read, head, tail (long-poll, SSE), snapshot read, bootstrap.
    Read,
    /// Everything else: create, append, delete, publish snapshots, retention, bucket admin.
    Write,
}

impl Policy {
    pub fn load(path: &Path) -> Result<Policy, AuthConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| AuthConfigError::PolicyRead {
            path: path.display().to_string(),
            source,
        })?;
        Policy::parse(&text).map_err(|why| AuthConfigError::PolicyInvalid {
            path: path.display().to_string(),
            why,
        })
    }

    /// Parses the TOML text; the error says what is wrong in it.
    pub fn parse(text: &str) -> Result<Policy, String> {
        let file: PolicyFile = toml::from_str(text).map_err(|e| e.to_string())?;
        let mut buckets = HashMap::new();
        for b in file.bucket {
            if b.id.is_empty() {
                return Err("a [[bucket]] has an empty id".to_owned());
            }
            if let Some(o) = b
                .owners
                .iter()
                .find(|o| o.issuer.is_empty() || o.subject.is_empty())
            {
                return Err(format!(
                    "bucket {:?}: an owner needs a non-empty issuer and subject (got {o:?})",
                    b.id
                ));
            }
            if buckets.contains_key(&b.id) {
                return Err(format!("bucket {:?} is listed twice", b.id));
            }
            buckets.insert(b.id.clone(), b);
        }
        Ok(Policy { buckets })
    }

    pub fn len(&self) -> usize {
        self.buckets.len()
    }

    pub fn is_empty(&self) -> bool {
        self.buckets.is_empty()
    }

    /// Whether `who` (or an anonymous caller, `None`) may do `access` on `bucket`. An unlisted
    /// bucket allows nothing.
    pub fn allows(&self, bucket: &str, access: Access, who: Option<&Principal>) -> bool {
        let Some(b) = self.buckets.get(bucket) else {
            return false;
        };
        if access == Access::Read && b.public_read {
            return true;
        }
        who.is_some_and(|p| b.owners.contains(p))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = r#"
        [[bucket]]
        id = "tenant-a"
        public_read = true
        owners = [{ issuer = "https://issuer.example", subject = "user-1" }]

        [[bucket]]
        id = "tenant-b"
        owners = [{ issuer = "https://issuer.example", subject = "user-2" }]
    "#;

    fn who(issuer: &str, subject: &str) -> Principal {
        Principal {
            issuer: issuer.to_owned(),
            subject: subject.to_owned(),
        }
    }

    #[test]
    fn owners_write_strangers_read_only_public_buckets() {
        let p = Policy::parse(FILE).expect("valid");
        let one = who("https://issuer.example", "user-1");
        let two = who("https://issuer.example", "user-2");
        assert!(p.allows("tenant-a", Access::Read, None));
        assert!(!p.allows("tenant-a", Access::Write, None));
        assert!(p.allows("tenant-a", Access::Write, Some(&one)));
        assert!(!p.allows("tenant-a", Access::Write, Some(&two)));
        assert!(!p.allows("tenant-b", Access::Read, None));
        assert!(!p.allows("tenant-b", Access::Read, Some(&one)));
        assert!(p.allows("tenant-b", Access::Read, Some(&two)));
        assert!(!p.allows("tenant-c", Access::Read, Some(&one)));
    }

    #[test]
    fn an_owner_is_qualified_by_its_issuer() {
        let p = Policy::parse(FILE).expect("valid");
        let same_subject_elsewhere = who("https://other.example", "user-1");
        assert!(!p.allows("tenant-a", Access::Write, Some(&same_subject_elsewhere)));
    }

    #[test]
    fn bad_files_are_refused() {
        assert!(Policy::parse("[[bucket]]\nid = \"a\"\nid2 = 1\n").is_err());
        assert!(Policy::parse("[[bucket]]\nid = \"a\"\n[[bucket]]\nid = \"a\"\n").is_err());
        assert!(Policy::parse("[[bucket]]\nid = \"\"\n").is_err());
        assert!(
            Policy::parse(
                "[[bucket]]\nid = \"a\"\nowners = [{ issuer = \"x\", subject = \"\" }]\n"
            )
            .is_err()
        );
        assert!(Policy::parse("").expect("empty is valid").is_empty());
    }
}
