//! Reference solution of exercise 01-roce-gid (see `../roce_gid.rs` for the task).

use lab::{GidEntry, GidType};

pub fn pick_gid(table: &[GidEntry]) -> Option<GidEntry> {
    table
        .iter()
        .filter(|e| e.gid_type == GidType::RoceV2)
        .find(|e| e.gid.to_ipv4().is_some())
        .copied()
}
