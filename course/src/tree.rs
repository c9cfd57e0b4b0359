//! The verbs' object tree as data: which object is created from which, by which verb, and the
//! teardown order that follows from it (children before parents). Pure: no verb is called here.
//!
//! `lab`'s ownership mirrors this table: each child type keeps its parents alive (an
//! [`lab::MemoryRegion`] holds its [`lab::ProtectionDomain`], a [`lab::QueuePair`] its
//! PD and CQs), so dropping in any order frees in [`teardown_order`]. The course's book draws
//! its object-tree diagram from [`OBJECTS`].

/// One kind of verbs object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VerbsObject {
    /// Short name used in diagrams (`PD`).
    pub name: &'static str,
    /// The C struct (`struct ibv_pd`).
    pub c_type: &'static str,
    /// The `lab` type that owns one.
    pub lab_type: &'static str,
    /// The verb that creates it.
    pub create: &'static str,
    /// The verb that destroys it.
    pub destroy: &'static str,
    /// The objects it is created from and keeps busy while it lives (`EBUSY` on their destroy).
    pub parents: &'static [&'static str],
    /// Parents it may use but does not need (a CQ's completion channel, a QP's SRQ).
    pub optional_parents: &'static [&'static str],
}

/// The objects the course uses, parents first (in an order whose reverse is the crate's
/// documented teardown order: QP, CQ, channel, ..., MR, PD, context).
pub const OBJECTS: &[VerbsObject] = &[
    VerbsObject {
        name: "context",
        c_type: "struct ibv_context",
        lab_type: "Context",
        create: "ibv_open_device",
        destroy: "ibv_close_device",
        parents: &[],
        optional_parents: &[],
    },
    VerbsObject {
        name: "PD",
        c_type: "struct ibv_pd",
        lab_type: "ProtectionDomain",
        create: "ibv_alloc_pd",
        destroy: "ibv_dealloc_pd",
        parents: &["context"],
        optional_parents: &[],
    },
    VerbsObject {
        name: "MR",
        c_type: "struct ibv_mr",
        lab_type: "MemoryRegion",
        create: "ibv_reg_mr",
        destroy: "ibv_dereg_mr",
        parents: &["PD"],
        optional_parents: &[],
    },
    VerbsObject {
        name: "MW",
        c_type: "struct ibv_mw",
        lab_type: "MemoryWindow",
        create: "ibv_alloc_mw",
        destroy: "ibv_dealloc_mw",
        parents: &["PD"],
        optional_parents: &[],
    },
    VerbsObject {
        name: "SRQ",
        c_type: "struct ibv_srq",
        lab_type: "SharedReceiveQueue",
        create: "ibv_create_srq",
        destroy: "ibv_destroy_srq",
        parents: &["PD"],
        optional_parents: &[],
    },
    VerbsObject {
        name: "AH",
        c_type: "struct ibv_ah",
        lab_type: "AddressHandle",
        create: "ibv_create_ah",
        destroy: "ibv_destroy_ah",
        parents: &["PD"],
        optional_parents: &[],
    },
    VerbsObject {
        name: "channel",
        c_type: "struct ibv_comp_channel",
        lab_type: "CompletionChannel",
        create: "ibv_create_comp_channel",
        destroy: "ibv_destroy_comp_channel",
        parents: &["context"],
        optional_parents: &[],
    },
    VerbsObject {
        name: "CQ",
        c_type: "struct ibv_cq",
        lab_type: "CompletionQueue",
        create: "ibv_create_cq",
        destroy: "ibv_destroy_cq",
        parents: &["context"],
        optional_parents: &["channel"],
    },
    VerbsObject {
        name: "QP",
        c_type: "struct ibv_qp",
        lab_type: "QueuePair",
        create: "ibv_create_qp",
        destroy: "ibv_destroy_qp",
        parents: &["PD", "CQ"],
        optional_parents: &["SRQ"],
    },
];

/// The object named `name`, if the table has it.
pub fn object(name: &str) -> Option<&'static VerbsObject> {
    OBJECTS.iter().find(|o| o.name == name)
}

/// A teardown order that works: every object before everything it was created from (required
/// and optional parents). The reverse of a creation order; ties keep the table's order
/// reversed, so the result is deterministic.
pub fn teardown_order() -> Vec<&'static str> {
    let mut done: Vec<&'static str> = Vec::new();
    // Repeatedly take the last not-yet-done object that no remaining object depends on.
    while done.len() < OBJECTS.len() {
        let next = OBJECTS
            .iter()
            .rev()
            .filter(|o| !done.contains(&o.name))
            .find(|o| {
                OBJECTS.iter().all(|c| {
                    done.contains(&c.name)
                        || !(c.parents.contains(&o.name) || c.optional_parents.contains(&o.name))
                })
            })
            .expect("the object table has a cycle");
        done.push(next.name);
    }
    done
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_parent_is_in_the_table_and_comes_first() {
        for (i, o) in OBJECTS.iter().enumerate() {
            for p in o.parents.iter().chain(o.optional_parents) {
                let j = OBJECTS.iter().position(|x| x.name == *p);
                assert!(
                    j.is_some_and(|j| j < i),
                    "{}: parent {p} missing or later",
                    o.name
                );
            }
        }
    }

    #[test]
    fn teardown_is_children_first_and_matches_the_crate_docs() {
        let order = teardown_order();
        let pos = |n: &str| order.iter().position(|x| *x == n).unwrap();
        for o in OBJECTS {
            for p in o.parents.iter().chain(o.optional_parents) {
                assert!(
                    pos(o.name) < pos(p),
                    "{} must go before {p}: {order:?}",
                    o.name
                );
            }
        }
        // The order the crate documentation promises: QP, CQ, channel, MR, PD, device.
        let promised = ["QP", "CQ", "channel", "MR", "PD", "context"];
        let got: Vec<&str> = order
            .iter()
            .copied()
            .filter(|n| promised.contains(n))
            .collect();
        assert_eq!(got, promised);
    }

    #[test]
    fn lab_types_exist() {
        // The names are the re-exported types: a rename breaks this test, not the book.
        let names = [
            std::any::type_name::<lab::Context>(),
            std::any::type_name::<lab::ProtectionDomain>(),
            std::any::type_name::<lab::CompletionChannel>(),
            std::any::type_name::<lab::CompletionQueue>(),
            std::any::type_name::<lab::MemoryRegion>(),
            std::any::type_name::<lab::MemoryWindow>(),
            std::any::type_name::<lab::SharedReceiveQueue>(),
            std::any::type_name::<lab::AddressHandle>(),
            std::any::type_name::<lab::QueuePair<lab::state::Rts>>(),
        ];
        for o in OBJECTS {
            assert!(
                names
                    .iter()
                    .any(|n| n.contains(&format!("::{}", o.lab_type))),
                "{} is not a lab type: {names:?}",
                o.lab_type
            );
        }
    }
}
