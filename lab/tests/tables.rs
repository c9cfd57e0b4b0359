//! Property tests of the tables that need no device: the QP transition/attribute-mask table
//! and the flag sets.

use lab::{AccessFlags, QpAttrMask, QpState, WcStatus, check_transition, transition};
use proptest::prelude::*;

/// Every state (`c_enum!`'s table of `enum ibv_qp_state`).
const STATES: &[QpState] = QpState::ALL;

fn named_mask_bits() -> u32 {
    QpAttrMask::ALL_NAMED
        .iter()
        .fold(0, |acc, (f, _)| acc | f.bits())
}

proptest! {
    /// A mask passes the check exactly when it holds every required attribute and nothing
    /// outside required + optional (STATE aside).
    #[test]
    fn check_agrees_with_the_table(from in 0usize..7, to in 0usize..7, bits in any::<u32>()) {
        let (from, to) = (STATES[from], STATES[to]);
        let mask = QpAttrMask::from_bits((bits & named_mask_bits()) | QpAttrMask::STATE.bits());
        match transition(from, to) {
            None => prop_assert!(check_transition(from, to, mask).is_err()),
            Some(t) => {
                let attrs = mask - QpAttrMask::STATE;
                let ok = attrs.contains(t.required) && (attrs - t.required - t.optional).is_empty();
                prop_assert_eq!(check_transition(from, to, mask).is_ok(), ok);
            }
        }
    }

    /// Required and optional attributes never overlap, and STATE is in neither.
    #[test]
    fn required_and_optional_are_disjoint(from in 0usize..7, to in 0usize..7) {
        if let Some(t) = transition(STATES[from], STATES[to]) {
            prop_assert!((t.required & t.optional).is_empty());
            prop_assert!(!t.required.contains(QpAttrMask::STATE));
            prop_assert!(!t.optional.contains(QpAttrMask::STATE));
        }
    }

    /// Display lists exactly the set bits: named flags by C name, the rest in hex.
    #[test]
    fn access_flags_display_is_faithful(bits in any::<u32>()) {
        let f = AccessFlags::from_bits(bits);
        let s = f.to_string();
        let mut back = 0u32;
        for part in s.split(" | ") {
            if part == "0" { continue; }
            if let Some(hex) = part.strip_prefix("0x") {
                back |= u32::from_str_radix(hex, 16).unwrap();
            } else {
                let (flag, _) = AccessFlags::ALL_NAMED.iter().find(|(_, n)| *n == part).unwrap();
                back |= flag.bits();
            }
        }
        prop_assert_eq!(back, bits);
    }

    /// Every status number maps to itself; unknown numbers are kept.
    #[test]
    fn status_numbers_round_trip(v in any::<u32>()) {
        prop_assert_eq!(WcStatus::from_raw(v).raw(), v);
    }
}

#[test]
fn bring_up_path_is_legal_and_shortcuts_are_not() {
    use QpState::*;
    for (a, b) in [
        (Reset, Init),
        (Init, Rtr),
        (Rtr, Rts),
        (Rts, Err),
        (Err, Reset),
    ] {
        assert!(transition(a, b).is_some(), "{a} -> {b}");
    }
    for (a, b) in [
        (Reset, Rtr),
        (Reset, Rts),
        (Init, Rts),
        (Err, Init),
        (Err, Rts),
    ] {
        assert!(transition(a, b).is_none(), "{a} -> {b}");
    }
}
