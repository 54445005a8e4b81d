//! The history checker (being written).
