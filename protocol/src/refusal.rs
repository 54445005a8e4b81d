//! `x-ursula-not-applied` tokens: refusals made before anything was proposed.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotApplied {
    RequestBodyTooLarge,
    WalDiskPressure,
    RaftLogPressure,
    IngressBodyBytesLimitReached,
    NotLeader,
    GroupNotHosted,
    RaftUncommittedBackpressure,
    ColdBackpressure,
    ApplyStopped,
}

impl NotApplied {
    pub fn token(self) -> &'static str {
        match self {
            NotApplied::RequestBodyTooLarge => "RequestBodyTooLarge",
            NotApplied::WalDiskPressure => "WalDiskPressure",
            NotApplied::RaftLogPressure => "RaftLogPressure",
            NotApplied::IngressBodyBytesLimitReached => "IngressBodyBytesLimitReached",
            NotApplied::NotLeader => "NotLeader",
            NotApplied::GroupNotHosted => "GroupNotHosted",
            NotApplied::RaftUncommittedBackpressure => "RaftUncommittedBackpressure",
            NotApplied::ColdBackpressure => "ColdBackpressure",
            NotApplied::ApplyStopped => "ApplyStopped",
        }
    }
}
