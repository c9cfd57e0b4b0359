//! lab: placeholder, replaced by the lab crate.
