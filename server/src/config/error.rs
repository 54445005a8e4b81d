//! Why a config does not load: [`ConfigError`], and [`invalid`], the refusal that names its key.

use std::path::PathBuf;

use super::file::FileError;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config file {path}: {source}")]
    File { path: PathBuf, source: FileError },
    #[error("{key}: {message}")]
    Invalid { key: &'static str, message: String },
    #[error("unknown preset {0:?}; expected default, dev, tiny, small, standard or large")]
    Preset(String),
}

pub(super) fn invalid(key: &'static str, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        key,
        message: message.into(),
    }
}
