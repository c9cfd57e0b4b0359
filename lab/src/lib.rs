//! lab: placeholder, replaced by the lab crate.

pub mod exchange;
pub mod show;
