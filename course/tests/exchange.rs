//! `course::exchange` without any RDMA device: the parsers (table cases and property tests) and
//! real TCP on 127.0.0.1 with ephemeral ports (peers that close early, never answer, send
//! truncated, oversized or wrong-version messages, and the C tool's exact bytes).
//!
//! One file of about 1,500 lines, one module per concern below: the two formats share their
//! fixtures (the C tool's exact bytes, the bad peers), which a split would duplicate.
//!
//! Modules:
//! - `pingpong_wire`: `ibv_rc_pingpong`'s 52-byte text message and the GID wire form.
//! - `lab_wire`: the lab's versioned binary message.
//! - `props`: round trips, and arbitrary bytes never panic.
//! - `pingpong_tcp`: the C tool's exchange sequence over TCP, both roles.
//! - `lab_tcp`: `Listener` / `OobStream` over TCP, lines, bad peers.

use course::exchange::{
    Deadline, Endpoint, ExchangeError, HEADER_LEN, MAGIC, MAX_BODY_LEN, MAX_NAME_LEN, MAX_REGIONS,
    Op, PINGPONG_MSG_LEN, PingpongDest, RemoteRegion, VERSION,
};
use std::time::Duration;

const LOOPBACK_GID: [u8; 16] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 99, 0, 1];

/// The C tool's message for LID 0, QPN 0x11, PSN 0x1b2c3d, GID ::ffff:10.99.0.1, as
/// `sprintf(msg, "%04x:%06x:%06x:%s", ...)` with `gid_to_wire_gid` writes it, NUL included.
const C_MSG: &[u8; 52] = b"0000:000011:1b2c3d:00000000000000000000ffff0a630001\0";

fn c_dest() -> PingpongDest {
    PingpongDest {
        lid: 0,
        qpn: 0x11,
        psn: 0x1b2c3d,
        gid: LOOPBACK_GID,
    }
}

fn sample_endpoint() -> Endpoint {
    Endpoint {
        name: "server".into(),
        lid: 0,
        qpn: 0x11,
        psn: 0x1b2c3d,
        gid: LOOPBACK_GID,
        regions: vec![
            RemoteRegion {
                addr: 0x7f12_aabb_0000,
                len: 4096,
                rkey: 0x120a,
            },
            RemoteRegion {
                addr: 0x7f12_aabb_1000,
                len: 8,
                rkey: 0x120b,
            },
        ],
    }
}

mod pingpong_wire {
    use super::*;
    use course::exchange::{gid_from_wire, gid_to_wire};
    use rstest::rstest;

    #[test]
    fn matches_the_c_format_byte_for_byte() {
        assert_eq!(
            PINGPONG_MSG_LEN,
            "0000:000000:000000:00000000000000000000000000000000".len() + 1
        );
        assert_eq!(&c_dest().to_wire().unwrap(), C_MSG);
        assert_eq!(PingpongDest::from_wire(C_MSG).unwrap(), c_dest());
    }

    /// rdma-core's gid_to_wire_gid: four htobe32'd words printed with %08x, which is the
    /// 16 bytes in memory order on any host.
    #[rstest]
    #[case::zero([0; 16], "00000000000000000000000000000000")]
    #[case::v4_mapped(LOOPBACK_GID, "00000000000000000000ffff0a630001")]
    #[case::link_local(
        [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x50, 0x54, 0, 0xff, 0xfe, 0, 0, 0x01],
        "fe80000000000000505400fffe000001"
    )]
    #[case::every_byte_distinct(
        [0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef, 0x10, 0x32, 0x54, 0x76, 0x98, 0xba, 0xdc, 0xfe],
        "0123456789abcdef1032547698badcfe"
    )]
    fn gid_wire_form(#[case] gid: [u8; 16], #[case] wire: &str) {
        assert_eq!(&gid_to_wire(&gid), wire.as_bytes());
        assert_eq!(gid_from_wire(wire.as_bytes()).unwrap(), gid);
        assert_eq!(gid_from_wire(wire.to_uppercase().as_bytes()).unwrap(), gid);
    }

    /// Mirrors C's computation with explicit 32-bit words, as a cross-check of the claim
    /// above on this (little-endian or not) host.
    #[test]
    fn gid_wire_form_equals_htobe32_words() {
        let gid: [u8; 16] = core::array::from_fn(|i| (i as u8).wrapping_mul(37).wrapping_add(5));
        let mut c = String::new();
        for w in gid.chunks_exact(4) {
            let host_word = u32::from_ne_bytes(w.try_into().unwrap()); // memcpy into uint32_t
            let be = host_word.to_be(); // htobe32
            c.push_str(&format!("{be:08x}")); // %08x prints the numeric value
        }
        // %08x of htobe32(x) shows the bytes of x in memory order only on little-endian
        // hosts; on big-endian hosts htobe32 is a no-op and the numeric value is again the
        // bytes in memory order. Either way:
        let expect: String = gid.iter().map(|b| format!("{b:02x}")).collect();
        if cfg!(target_endian = "little") {
            assert_eq!(c, expect);
        }
        assert_eq!(
            String::from_utf8(gid_to_wire(&gid).to_vec()).unwrap(),
            expect
        );
    }

    #[rstest]
    #[case::max_fields(
        PingpongDest { lid: 0xffff, qpn: 0xff_ffff, psn: 0xff_ffff, gid: [0xff; 16] },
        b"ffff:ffffff:ffffff:ffffffffffffffffffffffffffffffff\0"
    )]
    #[case::zero(
        PingpongDest::default(),
        b"0000:000000:000000:00000000000000000000000000000000\0"
    )]
    #[case::ib_lid(
        PingpongDest { lid: 0x1a, qpn: 0x48, psn: 0x7, gid: [0; 16] },
        b"001a:000048:000007:00000000000000000000000000000000\0"
    )]
    fn round_trips(#[case] dest: PingpongDest, #[case] wire: &[u8; 52]) {
        assert_eq!(&dest.to_wire().unwrap(), wire);
        assert_eq!(PingpongDest::from_wire(wire).unwrap(), dest);
    }

    #[test]
    fn accepts_uppercase_hex() {
        let upper = b"00AB:0000FF:ABCDEF:00000000000000000000FFFF0A630001\0";
        let d = PingpongDest::from_wire(upper).unwrap();
        assert_eq!(
            (d.lid, d.qpn, d.psn, d.gid),
            (0xab, 0xff, 0xabcdef, LOOPBACK_GID)
        );
    }

    #[rstest]
    #[case::qpn_too_big(PingpongDest { qpn: 0x100_0000, ..c_dest() }, "QPN")]
    #[case::psn_too_big(PingpongDest { psn: u32::MAX, ..c_dest() }, "PSN")]
    fn refuses_fields_wider_than_24_bits(#[case] dest: PingpongDest, #[case] field: &str) {
        match dest.to_wire() {
            Err(ExchangeError::Invalid { field: f, .. }) => assert_eq!(f, field),
            other => panic!("{other:?}"),
        }
    }

    fn with(pos: usize, byte: u8) -> Vec<u8> {
        let mut v = C_MSG.to_vec();
        v[pos] = byte;
        v
    }

    #[rstest]
    #[case::lid_not_hex(with(0, b'g'), "LID")]
    #[case::lid_space(with(3, b' '), "LID")]
    #[case::qpn_not_hex(with(7, b'x'), "QPN")]
    #[case::psn_sign(with(12, b'-'), "PSN")]
    #[case::gid_not_hex(with(40, b'z'), "GID")]
    #[case::gid_nul(with(19, 0), "GID")]
    #[case::first_colon(with(4, b';'), "separator")]
    #[case::second_colon(with(11, b'0'), "separator")]
    #[case::third_colon(with(18, b'\n'), "separator")]
    #[case::no_nul(with(51, b'0'), "terminator")]
    #[case::too_long([&C_MSG[..], b"x"].concat(), "length")]
    #[case::lab_message(sample_endpoint().encode().unwrap(), "length")]
    #[case::all_nul(vec![0; 52], "separator")]
    fn malformed(#[case] bytes: Vec<u8>, #[case] field: &str) {
        match PingpongDest::from_wire(&bytes) {
            Err(e @ ExchangeError::Malformed { .. }) => {
                let ExchangeError::Malformed {
                    field: f,
                    bytes: shown,
                    ..
                } = &e
                else {
                    unreachable!()
                };
                assert_eq!(*f, field, "{e}");
                // The message shows the bytes, escaped: printable, one line.
                assert!(
                    shown.chars().all(|c| c.is_ascii_graphic() || c == ' '),
                    "{shown}"
                );
                let text = e.to_string();
                assert!(text.contains("malformed ibv_rc_pingpong address"), "{text}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[rstest]
    #[case::empty(0)]
    #[case::one(1)]
    #[case::no_gid(19)]
    #[case::no_nul(51)]
    fn truncated(#[case] len: usize) {
        match PingpongDest::from_wire(&C_MSG[..len]) {
            Err(ExchangeError::Truncated { got, expected, .. }) => {
                assert_eq!((got, expected), (len, 52));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn error_text_names_field_and_shows_escaped_bytes() {
        let e = PingpongDest::from_wire(&with(7, b'\x07'))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("QPN must be 6 hex digits at offsets 5..11"),
            "{e}"
        );
        assert!(e.contains(r"0000:00\x07011:1b2c3d:"), "{e}");
        assert!(e.contains(r"0001\x00"), "{e}");
    }

    #[test]
    fn address_line_is_the_c_tools() {
        assert_eq!(
            c_dest().address_line(course::show::Side::Local).to_string(),
            "  local address:  LID 0x0000, QPN 0x000011, PSN 0x1b2c3d, GID ::ffff:10.99.0.1"
        );
    }
}

mod lab_wire {
    use super::*;
    use rstest::rstest;

    #[test]
    fn layout_is_fixed_big_endian() {
        let bytes = sample_endpoint().encode().unwrap();
        let mut want = Vec::new();
        want.extend_from_slice(b"RXEL");
        want.extend_from_slice(&[0, 1, 0, 0]); // version 1, flags 0
        let body_len: u32 = 2 + 4 + 4 + 16 + 1 + 6 + 4 + 2 * 20;
        want.extend_from_slice(&body_len.to_be_bytes());
        want.extend_from_slice(&[0, 0]); // lid
        want.extend_from_slice(&[0, 0, 0, 0x11]); // qpn
        want.extend_from_slice(&[0, 0x1b, 0x2c, 0x3d]); // psn
        want.extend_from_slice(&LOOPBACK_GID);
        want.push(6);
        want.extend_from_slice(b"server");
        want.extend_from_slice(&[0, 0, 0, 2]);
        want.extend_from_slice(&[0, 0, 0x7f, 0x12, 0xaa, 0xbb, 0, 0]);
        want.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0x10, 0]);
        want.extend_from_slice(&[0, 0, 0x12, 0x0a]);
        want.extend_from_slice(&[0, 0, 0x7f, 0x12, 0xaa, 0xbb, 0x10, 0]);
        want.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 8]);
        want.extend_from_slice(&[0, 0, 0x12, 0x0b]);
        assert_eq!(bytes, want);
        assert_eq!(Endpoint::decode(&bytes).unwrap(), sample_endpoint());
    }

    #[test]
    fn empty_endpoint_round_trips() {
        let e = Endpoint::default();
        let bytes = e.encode().unwrap();
        assert_eq!(bytes.len(), HEADER_LEN + 31);
        assert_eq!(Endpoint::decode(&bytes).unwrap(), e);
    }

    #[test]
    fn largest_message_round_trips() {
        let e = Endpoint {
            name: "n".repeat(MAX_NAME_LEN),
            regions: (0..MAX_REGIONS as u64)
                .map(|i| RemoteRegion {
                    addr: i * 4096,
                    len: 4096,
                    rkey: i as u32,
                })
                .collect(),
            ..sample_endpoint()
        };
        let bytes = e.encode().unwrap();
        assert!(bytes.len() <= HEADER_LEN + MAX_BODY_LEN);
        assert_eq!(Endpoint::decode(&bytes).unwrap(), e);
    }

    #[rstest]
    #[case::qpn(Endpoint { qpn: 0x100_0000, ..sample_endpoint() }, "qpn")]
    #[case::psn(Endpoint { psn: 0x100_0000, ..sample_endpoint() }, "psn")]
    #[case::name(Endpoint { name: "x".repeat(MAX_NAME_LEN + 1), ..sample_endpoint() }, "name length")]
    #[case::regions(
        Endpoint { regions: vec![RemoteRegion::default(); MAX_REGIONS + 1], ..sample_endpoint() },
        "region count"
    )]
    #[case::overflowing_region(
        Endpoint { regions: vec![RemoteRegion { addr: u64::MAX, len: 2, rkey: 1 }], ..sample_endpoint() },
        "region addr + len"
    )]
    fn encode_refuses(#[case] e: Endpoint, #[case] field: &str) {
        match e.encode() {
            Err(ExchangeError::Invalid { field: f, .. }) => assert_eq!(f, field),
            other => panic!("{other:?}"),
        }
    }

    /// `sample_endpoint()`'s bytes with a change.
    fn patched(f: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
        let mut b = sample_endpoint().encode().unwrap();
        f(&mut b);
        b
    }

    fn set_body_len(b: &mut [u8], len: u32) {
        b[8..12].copy_from_slice(&len.to_be_bytes());
    }

    #[derive(Debug)]
    enum Want {
        Malformed(&'static str),
        Truncated,
        Oversized,
        BadMagic,
        Version(u16),
    }

    #[rstest]
    #[case::empty(vec![], Want::Truncated)]
    #[case::header_only_part(b"RXEL\0\x01".to_vec(), Want::Truncated)]
    #[case::bad_magic(patched(|b| b[0] = b'X'), Want::BadMagic)]
    #[case::pingpong_message_instead(C_MSG.to_vec(), Want::BadMagic)]
    #[case::http_instead(b"GET / HTTP/1.1\r\n\r\n".to_vec(), Want::BadMagic)]
    #[case::version_0(patched(|b| b[5] = 0), Want::Version(0))]
    #[case::version_2(patched(|b| b[5] = 2), Want::Version(2))]
    #[case::version_256(patched(|b| b[4] = 1), Want::Version(257))]
    #[case::flags(patched(|b| b[7] = 1), Want::Malformed("flags"))]
    #[case::oversized(patched(|b| set_body_len(b, MAX_BODY_LEN as u32 + 1)), Want::Oversized)]
    #[case::oversized_max(patched(|b| set_body_len(b, u32::MAX)), Want::Oversized)]
    #[case::body_cut(patched(|b| { b.pop(); }), Want::Truncated)]
    #[case::trailing_byte(patched(|b| b.push(0)), Want::Malformed("length"))]
    #[case::qpn_25_bits(patched(|b| b[14] = 1), Want::Malformed("qpn"))]
    #[case::psn_25_bits(patched(|b| b[18] = 0x80), Want::Malformed("psn"))]
    #[case::name_not_utf8(patched(|b| b[39] = 0xff), Want::Malformed("name"))]
    #[case::name_len_past_end(patched(|b| b[38] = 200), Want::Malformed("name"))]
    #[case::region_count_too_big(patched(|b| b[48] = 3), Want::Malformed("region count"))]
    #[case::region_count_huge(patched(|b| b[45..49].copy_from_slice(&u32::MAX.to_be_bytes())), Want::Malformed("region count"))]
    #[case::region_count_short(patched(|b| b[48] = 1), Want::Malformed("region count"))]
    #[case::region_overflows(patched(|b| b[49..57].copy_from_slice(&u64::MAX.to_be_bytes())), Want::Malformed("region"))]
    #[case::body_too_short_for_fixed(
        {
            let mut b = patched(|_| {});
            b.truncate(HEADER_LEN + 10);
            set_body_len(&mut b, 10);
            b
        },
        Want::Malformed("gid")
    )]
    #[case::zero_body(
        {
            let mut b = b"RXEL\0\x01\0\0".to_vec();
            b.extend_from_slice(&[0; 4]);
            b
        },
        Want::Malformed("lid")
    )]
    fn decode_refuses(#[case] bytes: Vec<u8>, #[case] want: Want) {
        let got = Endpoint::decode(&bytes);
        let ok = match (&got, &want) {
            (Err(ExchangeError::Malformed { field, .. }), Want::Malformed(w)) => field == w,
            (Err(ExchangeError::Truncated { .. }), Want::Truncated) => true,
            (Err(ExchangeError::Oversized { .. }), Want::Oversized) => true,
            (Err(ExchangeError::BadMagic { .. }), Want::BadMagic) => true,
            (Err(ExchangeError::UnsupportedVersion { found, supported }), Want::Version(v)) => {
                found == v && *supported == VERSION
            }
            _ => false,
        };
        assert!(ok, "want {want:?}, got {got:?}");
        // Every error renders as one line of text.
        let text = got.unwrap_err().to_string();
        assert!(!text.contains('\n'), "{text}");
    }

    #[test]
    fn error_texts() {
        let e = Endpoint::decode(&C_MSG[..]).unwrap_err().to_string();
        assert_eq!(
            e,
            "not a lab exchange message: it starts with \"0000:000011:\" where \"RXEL\" was \
             expected (is the peer the matching lab program, on the right port?)"
        );
        let e = Endpoint::decode(&patched(|b| b[5] = 9))
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "unsupported lab exchange version 9: this build speaks version 1 (rebuild both \
             sides from the same tree)"
        );
        let e = Endpoint::decode(&patched(|b| set_body_len(b, u32::MAX)))
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "oversized lab message: 4294967295 bytes, the limit is 1048576 bytes"
        );
        let e = Endpoint::decode(&patched(|b| b[39] = 0xff))
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("malformed lab message: name is not UTF-8"),
            "{e}"
        );
        assert!(e.contains(r#"(bytes: "\xfferver")"#), "{e}");
    }

    #[test]
    fn header_is_checked_alone() {
        let b = sample_endpoint().encode().unwrap();
        assert_eq!(
            Endpoint::decode_header(&b[..HEADER_LEN]).unwrap(),
            b.len() - HEADER_LEN
        );
        assert_eq!(&b[..4], &MAGIC);
    }

    #[test]
    fn remote_region_bounds() {
        let r = RemoteRegion {
            addr: 0x1000,
            len: 0x100,
            rkey: 1,
        };
        assert_eq!(r.end(), Some(0x1100));
        assert_eq!(r.addr_of(0, 0x100), Some(0x1000));
        assert_eq!(r.addr_of(0xf8, 8), Some(0x10f8));
        assert_eq!(r.addr_of(0xf9, 8), None);
        assert_eq!(r.addr_of(u64::MAX, 2), None);
        let top = RemoteRegion {
            addr: u64::MAX,
            len: 1,
            rkey: 1,
        };
        assert_eq!(top.end(), None);
    }
}

mod props {
    use super::*;
    use proptest::prelude::*;

    fn arb_dest() -> impl Strategy<Value = PingpongDest> {
        (
            any::<u16>(),
            0..=0xff_ffffu32,
            0..=0xff_ffffu32,
            any::<[u8; 16]>(),
        )
            .prop_map(|(lid, qpn, psn, gid)| PingpongDest { lid, qpn, psn, gid })
    }

    fn arb_endpoint() -> impl Strategy<Value = Endpoint> {
        (
            "\\PC{0,40}",
            any::<u16>(),
            0..=0xff_ffffu32,
            0..=0xff_ffffu32,
            any::<[u8; 16]>(),
            proptest::collection::vec(
                (any::<u64>(), any::<u64>(), any::<u32>()).prop_map(|(addr, len, rkey)| {
                    RemoteRegion {
                        addr,
                        len: len.min(u64::MAX - addr),
                        rkey,
                    }
                }),
                0..20,
            ),
        )
            .prop_map(|(name, lid, qpn, psn, gid, regions)| Endpoint {
                name,
                lid,
                qpn,
                psn,
                gid,
                regions,
            })
    }

    /// Every error the parsers return renders as one line without panicking.
    fn renders(e: &ExchangeError) -> bool {
        let t = e.to_string();
        !t.is_empty() && !t.contains('\n')
    }

    proptest! {
        #[test]
        fn pingpong_round_trip(d in arb_dest()) {
            let wire = d.to_wire().unwrap();
            prop_assert_eq!(wire[51], 0);
            prop_assert!(wire[..51].iter().all(|&b| b == b':' || b.is_ascii_hexdigit()));
            prop_assert_eq!(PingpongDest::from_wire(&wire).unwrap(), d);
        }

        #[test]
        fn pingpong_arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..80)) {
            if let Err(e) = PingpongDest::from_wire(&bytes) {
                prop_assert!(renders(&e));
            }
        }

        /// Bytes that look almost right: the C layout with random characters from the
        /// alphabet it uses (and a few others) in random places.
        #[test]
        fn pingpong_near_misses_never_panic(
            d in arb_dest(),
            edits in proptest::collection::vec((0..52usize, prop_oneof![
                Just(b':'), Just(0u8), Just(b'g'), Just(b'F'), Just(b'0'), any::<u8>()
            ]), 0..4),
        ) {
            let mut wire = d.to_wire().unwrap().to_vec();
            for (i, b) in edits { wire[i] = b; }
            match PingpongDest::from_wire(&wire) {
                Ok(parsed) => prop_assert_eq!(parsed.to_wire().unwrap().len(), 52),
                Err(e) => prop_assert!(renders(&e)),
            }
        }

        #[test]
        fn lab_round_trip(e in arb_endpoint()) {
            let bytes = e.encode().unwrap();
            prop_assert_eq!(Endpoint::decode(&bytes).unwrap(), e);
        }

        #[test]
        fn lab_arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            match Endpoint::decode(&bytes) {
                Ok(e) => prop_assert_eq!(e.encode().unwrap(), bytes),
                Err(e) => prop_assert!(renders(&e)),
            }
        }

        /// A valid header followed by random bytes exercises the body parser.
        #[test]
        fn lab_random_body_never_panics(body in proptest::collection::vec(any::<u8>(), 0..300)) {
            let mut bytes = Vec::from(MAGIC);
            bytes.extend_from_slice(&VERSION.to_be_bytes());
            bytes.extend_from_slice(&[0, 0]);
            bytes.extend_from_slice(&(body.len() as u32).to_be_bytes());
            bytes.extend_from_slice(&body);
            match Endpoint::decode(&bytes) {
                Ok(e) => prop_assert_eq!(e.encode().unwrap(), bytes),
                Err(e) => prop_assert!(renders(&e)),
            }
        }

        /// Valid messages with a few bytes changed or cut: never a panic; either a typed
        /// error or a message that encodes back to the same bytes.
        #[test]
        fn lab_mutations_never_panic(
            e in arb_endpoint(),
            edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..4),
            cut in any::<prop::sample::Index>(),
            do_cut in any::<bool>(),
        ) {
            let mut bytes = e.encode().unwrap();
            for (i, b) in edits { let i = i.index(bytes.len()); bytes[i] = b; }
            if do_cut { bytes.truncate(cut.index(bytes.len())); }
            match Endpoint::decode(&bytes) {
                Ok(e) => prop_assert_eq!(e.encode().unwrap(), bytes),
                Err(e) => prop_assert!(renders(&e)),
            }
        }
    }

    #[test]
    fn deadline_basics() {
        let d = Deadline::after(Duration::from_secs(60));
        assert!(!d.is_expired());
        assert!(d.remaining().unwrap() <= Duration::from_secs(60));
        assert_eq!(d.budget(), Duration::from_secs(60));
        let past = Deadline::from(Duration::ZERO);
        assert!(past.is_expired());
        assert_eq!(past.remaining(), None);
        // A budget beyond what Instant can represent does not panic.
        assert!(!Deadline::after(Duration::MAX).is_expired());
        let _ = Op::Connect;
    }
}

mod pingpong_tcp {
    //! Both roles against a hand-written peer that does exactly what rc_pingpong.c does.
    use super::*;
    use course::exchange::{PINGPONG_DONE, PingpongListener, pingpong_client_exchange};
    use std::io::{Read, Write};
    use std::net::{SocketAddr, TcpListener, TcpStream};
    use std::thread;
    use std::time::Instant;

    const SECS5: Duration = Duration::from_secs(5);

    fn local_listener() -> PingpongListener {
        PingpongListener::bind_addr("127.0.0.1:0".parse().unwrap()).unwrap()
    }

    fn port_of(l: &PingpongListener) -> u16 {
        l.local_addr().unwrap().port()
    }

    /// A port with nobody listening (bound, then closed).
    fn dead_port() -> u16 {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    }

    /// Our server, the C tool's client sequence by hand: write 52, read 52 in one go,
    /// write "done\0".
    #[test]
    fn our_server_with_c_client() {
        let listener = local_listener();
        let port = port_of(&listener);
        let c_client = thread::spawn(move || {
            let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
            s.write_all(C_MSG).unwrap();
            let mut msg = [0u8; 52];
            s.read_exact(&mut msg).unwrap();
            s.write_all(b"done\0").unwrap();
            msg
        });
        let conn = listener.accept(SECS5).unwrap();
        assert_eq!(conn.remote(), c_dest());
        assert!(conn.peer().starts_with("127.0.0.1:"));
        let mine = PingpongDest {
            lid: 0,
            qpn: 0x12,
            psn: 0x000abc,
            gid: LOOPBACK_GID,
        };
        conn.finish(&mine, SECS5).unwrap();
        let got = c_client.join().unwrap();
        assert_eq!(
            &got,
            b"0000:000012:000abc:00000000000000000000ffff0a630001\0"
        );
    }

    /// Our client, the C tool's server sequence by hand: read 52, (connect QP), write 52,
    /// read and expect exactly sizeof "done".
    #[test]
    fn our_client_with_c_server() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let c_server = thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut msg = [0u8; 52];
            s.read_exact(&mut msg).unwrap();
            s.write_all(C_MSG).unwrap();
            let mut done = [0u8; 52];
            let n = s.read(&mut done).unwrap();
            (msg, done[..n].to_vec())
        });
        let mine = PingpongDest {
            lid: 0,
            qpn: 0x12,
            psn: 0x000abc,
            gid: LOOPBACK_GID,
        };
        let remote = pingpong_client_exchange("127.0.0.1", port, &mine, SECS5).unwrap();
        assert_eq!(remote, c_dest());
        let (client_msg, done) = c_server.join().unwrap();
        assert_eq!(PingpongDest::from_wire(&client_msg).unwrap(), mine);
        assert_eq!(done, PINGPONG_DONE);
    }

    /// Our client and our server together, the client started first (it retries until
    /// the server listens).
    #[test]
    fn ours_both_ways_client_first() {
        let port = dead_port();
        let client =
            thread::spawn(move || pingpong_client_exchange("127.0.0.1", port, &c_dest(), SECS5));
        thread::sleep(Duration::from_millis(150));
        let listener =
            PingpongListener::bind_addr(SocketAddr::from(([127, 0, 0, 1], port))).unwrap();
        let conn = listener.accept(SECS5).unwrap();
        let server_dest = PingpongDest {
            qpn: 0x99,
            ..c_dest()
        };
        assert_eq!(conn.remote(), c_dest());
        // The server does its work (QP to RTR/RTS) between reading and answering.
        thread::sleep(Duration::from_millis(50));
        conn.finish(&server_dest, SECS5).unwrap();
        assert_eq!(client.join().unwrap().unwrap(), server_dest);
    }

    #[test]
    fn client_refused_within_deadline() {
        let port = dead_port();
        let t0 = Instant::now();
        let e = pingpong_client_exchange("127.0.0.1", port, &c_dest(), Duration::from_millis(200))
            .unwrap_err();
        let took = t0.elapsed();
        assert!(matches!(e, ExchangeError::Refused { .. }), "{e:?}");
        assert!(
            took >= Duration::from_millis(190) && took < Duration::from_secs(2),
            "{took:?}"
        );
        let text = e.to_string();
        assert_eq!(
            text,
            format!(
                "connection to 127.0.0.1:{port} refused (kept retrying for 0.200s): is the \
                 server running and listening on that port?"
            )
        );
    }

    #[test]
    fn server_accept_times_out() {
        let listener = local_listener();
        let t0 = Instant::now();
        let e = listener.accept(Duration::from_millis(200)).unwrap_err();
        assert!(t0.elapsed() < Duration::from_secs(2));
        match &e {
            ExchangeError::TimedOut { op, after, .. } => {
                assert_eq!(*op, Op::Accept);
                assert_eq!(*after, Duration::from_millis(200));
            }
            other => panic!("{other:?}"),
        }
        assert!(
            e.to_string()
                .starts_with("timed out after 0.200s waiting on 127.0.0.1:")
        );
    }

    /// A peer that connects and says nothing: the server gives up at its deadline.
    #[test]
    fn server_peer_never_answers() {
        let listener = local_listener();
        let port = port_of(&listener);
        let silent = TcpStream::connect(("127.0.0.1", port)).unwrap();
        let t0 = Instant::now();
        let e = listener.accept(Duration::from_millis(200)).unwrap_err();
        assert!(t0.elapsed() < Duration::from_secs(2));
        assert!(
            matches!(e, ExchangeError::TimedOut { op: Op::Read, .. }),
            "{e:?}"
        );
        let text = e.to_string();
        assert!(
            text.starts_with(
                "timed out after 0.200s reading the ibv_rc_pingpong address from 127.0.0.1:"
            ),
            "{text}"
        );
        drop(silent);
    }

    /// A server that accepts and never answers: the client gives up at its deadline.
    #[test]
    fn client_peer_never_answers() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let hold = thread::spawn(move || {
            let (s, _) = l.accept().unwrap();
            thread::sleep(Duration::from_millis(1500));
            drop(s);
        });
        let t0 = Instant::now();
        let e = pingpong_client_exchange("127.0.0.1", port, &c_dest(), Duration::from_millis(200))
            .unwrap_err();
        assert!(t0.elapsed() < Duration::from_millis(1200));
        assert!(
            matches!(e, ExchangeError::TimedOut { op: Op::Read, .. }),
            "{e:?}"
        );
        hold.join().unwrap();
    }

    #[test]
    fn server_peer_closes_early() {
        let listener = local_listener();
        let port = port_of(&listener);
        drop(TcpStream::connect(("127.0.0.1", port)).unwrap());
        let e = listener.accept(SECS5).unwrap_err();
        assert!(
            matches!(e, ExchangeError::PeerClosed { op: Op::Read, .. }),
            "{e:?}"
        );
        assert!(
            e.to_string()
                .contains("closed the connection before sending the ibv_rc_pingpong address")
        );
    }

    #[test]
    fn server_truncated_message() {
        let listener = local_listener();
        let port = port_of(&listener);
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.write_all(&C_MSG[..30]).unwrap();
        drop(s);
        match listener.accept(SECS5).unwrap_err() {
            ExchangeError::Truncated {
                got,
                expected,
                from,
                ..
            } => {
                assert_eq!((got, expected), (30, 52));
                assert!(from.starts_with("peer 127.0.0.1:"), "{from}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn server_malformed_message() {
        let listener = local_listener();
        let port = port_of(&listener);
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        let mut bad = *C_MSG;
        bad[5] = b'Z';
        s.write_all(&bad).unwrap();
        let e = listener.accept(SECS5).unwrap_err();
        assert!(
            matches!(e, ExchangeError::Malformed { field: "QPN", .. }),
            "{e:?}"
        );
    }

    /// The client reads the server's address, but the server closes before "done" is read:
    /// our server reports the missing sync.
    #[test]
    fn server_missing_done() {
        let listener = local_listener();
        let port = port_of(&listener);
        let c = thread::spawn(move || {
            let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
            s.write_all(C_MSG).unwrap();
            let mut msg = [0u8; 52];
            s.read_exact(&mut msg).unwrap();
            s.write_all(b"don").unwrap();
        });
        let conn = listener.accept(SECS5).unwrap();
        let e = conn.finish(&c_dest(), SECS5).unwrap_err();
        c.join().unwrap();
        assert!(
            matches!(
                e,
                ExchangeError::Truncated {
                    got: 3,
                    expected: 5,
                    ..
                }
            ),
            "{e:?}"
        );
    }

    #[test]
    fn server_wrong_done() {
        let listener = local_listener();
        let port = port_of(&listener);
        let c = thread::spawn(move || {
            let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
            s.write_all(C_MSG).unwrap();
            let mut msg = [0u8; 52];
            s.read_exact(&mut msg).unwrap();
            s.write_all(b"DONE\n").unwrap();
        });
        let conn = listener.accept(SECS5).unwrap();
        let e = conn.finish(&c_dest(), SECS5).unwrap_err();
        c.join().unwrap();
        assert!(
            matches!(e, ExchangeError::Malformed { field: "sync", .. }),
            "{e:?}"
        );
        assert!(e.to_string().contains(r#"(bytes: "DONE\n")"#), "{e}");
    }

    #[test]
    fn client_server_closes_early() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let t = thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut msg = [0u8; 52];
            s.read_exact(&mut msg).unwrap();
        });
        let e = pingpong_client_exchange("127.0.0.1", port, &c_dest(), SECS5).unwrap_err();
        t.join().unwrap();
        assert!(matches!(e, ExchangeError::PeerClosed { .. }), "{e:?}");
    }

    #[test]
    fn bind_conflict_is_reported() {
        let listener = local_listener();
        let addr = listener.local_addr().unwrap();
        let e = PingpongListener::bind_addr(addr).unwrap_err();
        assert!(matches!(e, ExchangeError::Bind { .. }), "{e:?}");
        assert!(
            e.to_string()
                .starts_with(&format!("cannot listen on {addr}: "))
        );
    }

    #[test]
    fn unresolvable_host() {
        let e = pingpong_client_exchange("no-such-host.invalid", 1, &c_dest(), SECS5).unwrap_err();
        assert!(matches!(e, ExchangeError::Resolve { .. }), "{e:?}");
    }
}

mod lab_tcp {
    use super::*;
    use course::exchange::{Listener, MAX_LINE_LEN, OobStream};
    use std::io::{Read, Write};
    use std::net::{SocketAddr, TcpListener, TcpStream};
    use std::thread;
    use std::time::Instant;

    const SECS5: Duration = Duration::from_secs(5);

    fn local() -> (Listener, u16) {
        let l = Listener::bind_addr("127.0.0.1:0".parse().unwrap()).unwrap();
        let port = l.local_addr().unwrap().port();
        (l, port)
    }

    fn client_endpoint(i: u32) -> Endpoint {
        Endpoint {
            name: format!("client-{i}"),
            qpn: 0x20 + i,
            psn: 0x100 + i,
            ..Default::default()
        }
    }

    /// The chapter 09 shape: a server with a block table, several clients, one message each
    /// way, then a final line from each client on the same stream.
    #[test]
    fn several_clients_then_final_sync() {
        let (listener, port) = local();
        let clients: Vec<_> = (0..3)
            .map(|i| {
                thread::spawn(move || {
                    let (mut oob, server) =
                        OobStream::connect_exchange("127.0.0.1", port, &client_endpoint(i), SECS5)
                            .unwrap();
                    assert_eq!(server, sample_endpoint());
                    oob.send_line(&format!("checksum 0x{:08x}", 0xabc0 + i), SECS5)
                        .unwrap();
                    oob.expect_line("ok", SECS5).unwrap();
                })
            })
            .collect();
        let mut seen = Vec::new();
        let mut streams = Vec::new();
        for _ in 0..3 {
            let (oob, client) = listener.accept_exchange(&sample_endpoint(), SECS5).unwrap();
            seen.push(client.qpn - 0x20);
            streams.push((client, oob));
        }
        for (client, oob) in &mut streams {
            let line = oob.recv_line(SECS5).unwrap();
            assert_eq!(
                line,
                format!("checksum 0x{:08x}", 0xabc0 + client.qpn - 0x20)
            );
            oob.send_line("ok", SECS5).unwrap();
        }
        for c in clients {
            c.join().unwrap();
        }
        seen.sort_unstable();
        assert_eq!(seen, [0, 1, 2]);
    }

    /// Messages and lines interleave on one stream, even when they arrive in one segment.
    #[test]
    fn lines_and_messages_share_the_stream() {
        let (listener, port) = local();
        let t = thread::spawn(move || {
            let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
            let mut all = b"hello\r\n".to_vec();
            all.extend(sample_endpoint().encode().unwrap());
            all.extend_from_slice(b"\nline two\n");
            all.extend(client_endpoint(7).encode().unwrap());
            s.write_all(&all).unwrap();
            let mut rest = String::new();
            s.read_to_string(&mut rest).unwrap();
            rest
        });
        let mut oob = listener.accept(SECS5).unwrap();
        assert_eq!(oob.recv_line(SECS5).unwrap(), "hello");
        assert_eq!(oob.recv_msg(SECS5).unwrap(), sample_endpoint());
        assert_eq!(oob.recv_line(SECS5).unwrap(), "");
        assert_eq!(oob.recv_line(SECS5).unwrap(), "line two");
        assert_eq!(oob.recv_msg(SECS5).unwrap(), client_endpoint(7));
        oob.send_line("bye", SECS5).unwrap();
        drop(oob);
        assert_eq!(t.join().unwrap(), "bye\n");
    }

    /// One deadline shared by several calls.
    #[test]
    fn one_deadline_for_many_calls() {
        let (listener, port) = local();
        let t = thread::spawn(move || {
            let mut oob = OobStream::connect("127.0.0.1", port, SECS5).unwrap();
            oob.send_line("a", SECS5).unwrap();
            thread::sleep(Duration::from_millis(2500));
            oob.send_line("b", SECS5).unwrap();
        });
        let deadline = Deadline::after(Duration::from_millis(1000));
        let mut oob = listener.accept(deadline).unwrap();
        assert_eq!(oob.recv_line(deadline).unwrap(), "a");
        let e = oob.recv_line(deadline).unwrap_err();
        assert!(
            matches!(e, ExchangeError::TimedOut { op: Op::Read, after, .. } if after == Duration::from_millis(1000)),
            "{e:?}"
        );
        t.join().unwrap();
    }

    /// The client starts before the server listens.
    #[test]
    fn connect_retries_until_server_listens() {
        let port = {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let client = thread::spawn(move || {
            let mut oob = OobStream::connect("127.0.0.1", port, SECS5)?;
            oob.exchange_as_client(&client_endpoint(1), SECS5)
        });
        thread::sleep(Duration::from_millis(200));
        let listener = Listener::bind_addr(SocketAddr::from(([127, 0, 0, 1], port))).unwrap();
        let mut oob = listener.accept(SECS5).unwrap();
        assert_eq!(
            oob.exchange_as_server(&sample_endpoint(), SECS5).unwrap(),
            client_endpoint(1)
        );
        assert_eq!(client.join().unwrap().unwrap(), sample_endpoint());
    }

    #[test]
    fn connect_refused() {
        let port = {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let t0 = Instant::now();
        let e = OobStream::connect("127.0.0.1", port, Duration::from_millis(200)).unwrap_err();
        assert!(t0.elapsed() < Duration::from_secs(2));
        assert!(matches!(e, ExchangeError::Refused { .. }), "{e:?}");
    }

    /// Runs `peer` as the client (raw TCP), returns what `recv_msg` on the server made of it
    /// and how long it took.
    fn server_receives(
        budget: Duration,
        peer: impl FnOnce(TcpStream) + Send + 'static,
    ) -> (Result<Endpoint, ExchangeError>, Duration) {
        let (listener, port) = local();
        let t = thread::spawn(move || peer(TcpStream::connect(("127.0.0.1", port)).unwrap()));
        let t0 = Instant::now();
        let got = listener
            .accept(SECS5)
            .and_then(|mut oob| oob.recv_msg(budget));
        let took = t0.elapsed();
        t.join().unwrap();
        (got, took)
    }

    #[test]
    fn peer_never_answers() {
        let (got, took) = server_receives(Duration::from_millis(200), |s| {
            thread::sleep(Duration::from_millis(1500));
            drop(s);
        });
        assert!(took < Duration::from_millis(1200), "{took:?}");
        let e = got.unwrap_err();
        assert!(
            matches!(e, ExchangeError::TimedOut { op: Op::Read, .. }),
            "{e:?}"
        );
        let text = e.to_string();
        assert!(
            text.starts_with("timed out after 0.200s reading the lab message from 127.0.0.1:"),
            "{text}"
        );
    }

    /// Half a message, then silence: still the deadline, not a hang.
    #[test]
    fn peer_stalls_mid_message() {
        let (got, took) = server_receives(Duration::from_millis(200), |mut s| {
            let bytes = sample_endpoint().encode().unwrap();
            s.write_all(&bytes[..20]).unwrap();
            thread::sleep(Duration::from_millis(1500));
        });
        assert!(took < Duration::from_millis(1200), "{took:?}");
        assert!(
            matches!(got, Err(ExchangeError::TimedOut { op: Op::Read, .. })),
            "{got:?}"
        );
    }

    #[test]
    fn peer_closes_early() {
        let (got, _) = server_receives(SECS5, drop);
        assert!(
            matches!(got, Err(ExchangeError::PeerClosed { op: Op::Read, .. })),
            "{got:?}"
        );
    }

    #[test]
    fn truncated_header() {
        let (got, _) = server_receives(SECS5, |mut s| s.write_all(b"RXEL\0").unwrap());
        match got {
            Err(ExchangeError::Truncated { got, expected, .. }) => {
                assert_eq!((got, expected), (5, 12))
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn truncated_body() {
        let bytes = sample_endpoint().encode().unwrap();
        let n = bytes.len();
        let (got, _) = server_receives(SECS5, move |mut s| s.write_all(&bytes[..n - 3]).unwrap());
        match got {
            Err(ExchangeError::Truncated { got, expected, .. }) => {
                assert_eq!((got, expected), (n - 3, n))
            }
            other => panic!("{other:?}"),
        }
    }

    /// An announced length of 4 GiB is refused from the header, at once, without reading
    /// (or allocating for) a body.
    #[test]
    fn oversized_length() {
        let (got, took) = server_receives(SECS5, |mut s| {
            let mut h = Vec::from(MAGIC);
            h.extend_from_slice(&[0, 1, 0, 0]);
            h.extend_from_slice(&u32::MAX.to_be_bytes());
            s.write_all(&h).unwrap();
            // Keep the connection open: the refusal must not wait for more bytes.
            thread::sleep(Duration::from_millis(1500));
        });
        assert!(took < Duration::from_millis(1200), "{took:?}");
        assert!(
            matches!(
                got,
                Err(ExchangeError::Oversized {
                    len: 0xffff_ffff,
                    ..
                })
            ),
            "{got:?}"
        );
    }

    #[test]
    fn wrong_version() {
        let (got, _) = server_receives(SECS5, |mut s| {
            let mut b = sample_endpoint().encode().unwrap();
            b[5] = 2;
            s.write_all(&b).unwrap();
        });
        assert!(
            matches!(
                got,
                Err(ExchangeError::UnsupportedVersion {
                    found: 2,
                    supported: 1
                })
            ),
            "{got:?}"
        );
    }

    /// A C `ibv_rc_pingpong` client connecting to a lab server by mistake.
    #[test]
    fn pingpong_client_on_lab_port() {
        let (got, _) = server_receives(SECS5, |mut s| s.write_all(C_MSG).unwrap());
        assert!(
            matches!(got, Err(ExchangeError::BadMagic { .. })),
            "{got:?}"
        );
    }

    #[test]
    fn line_limits() {
        let (listener, port) = local();
        let t = thread::spawn(move || {
            let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
            s.write_all(&vec![b'x'; MAX_LINE_LEN]).unwrap();
            s.write_all(b"\n").unwrap();
            s.write_all(b"\xff\xfe\n").unwrap();
            s.write_all(b"no newline").unwrap();
        });
        let mut oob = listener.accept(SECS5).unwrap();
        assert_eq!(oob.recv_line(SECS5).unwrap().len(), MAX_LINE_LEN);
        let e = oob.recv_line(SECS5).unwrap_err();
        assert!(
            matches!(
                e,
                ExchangeError::Malformed {
                    what: "text line",
                    ..
                }
            ),
            "{e:?}"
        );
        let e = oob.recv_line(SECS5).unwrap_err();
        assert!(
            matches!(e, ExchangeError::Truncated { got: 10, .. }),
            "{e:?}"
        );
        t.join().unwrap();

        assert!(matches!(
            oob.send_line("two\nlines", SECS5),
            Err(ExchangeError::Invalid { .. })
        ));
        assert!(matches!(
            oob.send_line(&"y".repeat(MAX_LINE_LEN + 1), SECS5),
            Err(ExchangeError::Invalid { .. })
        ));
    }

    /// A peer streaming an endless line is cut off at the limit, not buffered forever.
    #[test]
    fn endless_line_is_oversized() {
        let (listener, port) = local();
        let t = thread::spawn(move || {
            let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
            let chunk = vec![b'z'; 1024];
            for _ in 0..64 {
                if s.write_all(&chunk).is_err() {
                    break;
                }
            }
        });
        let mut oob = listener.accept(SECS5).unwrap();
        let e = oob.recv_line(SECS5).unwrap_err();
        assert!(
            matches!(
                e,
                ExchangeError::Oversized {
                    what: "text line",
                    ..
                }
            ),
            "{e:?}"
        );
        drop(oob);
        t.join().unwrap();
    }

    #[test]
    fn expect_line_mismatch() {
        let (listener, port) = local();
        let t = thread::spawn(move || {
            let mut oob = OobStream::connect("127.0.0.1", port, SECS5).unwrap();
            oob.send_line("fail: block 3", SECS5).unwrap();
        });
        let mut oob = listener.accept(SECS5).unwrap();
        let e = oob.expect_line("done", SECS5).unwrap_err();
        assert_eq!(
            e.to_string(),
            "malformed text line: text expected \"done\" (bytes: \"fail: block 3\")"
        );
        t.join().unwrap();
    }

    /// Writing to a peer that went away is a typed error, not a SIGPIPE or a hang.
    #[test]
    fn write_to_closed_peer() {
        let (listener, port) = local();
        let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        let mut oob = listener.accept(SECS5).unwrap();
        drop(s);
        let big = Endpoint {
            regions: vec![RemoteRegion::default(); MAX_REGIONS],
            ..Default::default()
        };
        let mut last = Ok(());
        for _ in 0..10 {
            last = oob.send_msg(&big, SECS5);
            if last.is_err() {
                break;
            }
        }
        let e = last.unwrap_err();
        assert!(
            matches!(e, ExchangeError::PeerClosed { op: Op::Write, .. }),
            "{e:?}"
        );
    }

    /// A peer that never reads: a large write gives up at the deadline.
    #[test]
    fn write_times_out_when_peer_never_reads() {
        let (listener, port) = local();
        let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        let mut oob = listener.accept(SECS5).unwrap();
        let big = Endpoint {
            regions: vec![RemoteRegion::default(); MAX_REGIONS],
            ..Default::default()
        };
        let deadline = Deadline::after(Duration::from_millis(300));
        let t0 = Instant::now();
        let mut res = Ok(());
        for _ in 0..64 {
            res = oob.send_msg(&big, deadline);
            if res.is_err() {
                break;
            }
        }
        assert!(t0.elapsed() < Duration::from_secs(2));
        assert!(
            matches!(res, Err(ExchangeError::TimedOut { op: Op::Write, .. })),
            "{res:?}"
        );
        drop(s);
    }
}

mod tcp_props {
    //! Over real TCP: fragmentation never changes what is received, and arbitrary streams
    //! never panic or hang.
    use super::*;
    use course::exchange::{Listener, PingpongListener, pingpong_client_exchange};
    use proptest::prelude::*;
    use std::io::{Read, Write};
    use std::net::TcpStream;
    use std::thread;
    use std::time::Instant;

    const SECS5: Duration = Duration::from_secs(5);

    /// Writes `bytes` in pieces of the given sizes (cycled), flushing each with TCP_NODELAY
    /// and a tiny pause so they arrive as separate segments.
    fn dribble(s: &mut TcpStream, bytes: &[u8], sizes: &[usize]) -> std::io::Result<()> {
        s.set_nodelay(true)?;
        let mut rest = bytes;
        let mut i = 0;
        while !rest.is_empty() {
            let n = sizes[i % sizes.len()].clamp(1, rest.len());
            s.write_all(&rest[..n])?;
            rest = &rest[n..];
            i += 1;
            thread::sleep(Duration::from_micros(200));
        }
        Ok(())
    }

    /// The pingpong server reads a message sent one byte at a time (the C tool would not,
    /// as it does a single read(), but a lab server must not depend on segment sizes).
    #[test]
    fn pingpong_one_byte_at_a_time() {
        let listener = PingpongListener::bind_addr("127.0.0.1:0".parse().unwrap()).unwrap();
        let port = listener.local_addr().unwrap().port();
        let t = thread::spawn(move || {
            let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
            dribble(&mut s, C_MSG, &[1]).unwrap();
            let mut msg = [0u8; 52];
            s.read_exact(&mut msg).unwrap();
            dribble(&mut s, b"done\0", &[1]).unwrap();
        });
        let conn = listener.accept(SECS5).unwrap();
        assert_eq!(conn.remote(), c_dest());
        conn.finish(&c_dest(), SECS5).unwrap();
        t.join().unwrap();
    }

    /// A server that answers byte by byte, to our client.
    #[test]
    fn pingpong_client_reads_dribbled_answer() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let t = thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut msg = [0u8; 52];
            s.read_exact(&mut msg).unwrap();
            dribble(&mut s, C_MSG, &[3, 1, 7]).unwrap();
            let mut done = [0u8; 5];
            s.read_exact(&mut done).unwrap();
            done
        });
        let got = pingpong_client_exchange("127.0.0.1", port, &c_dest(), SECS5).unwrap();
        assert_eq!(got, c_dest());
        assert_eq!(&t.join().unwrap(), b"done\0");
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

        /// Two messages and two lines, cut into random pieces: received intact, in order.
        #[test]
        fn fragmentation_is_invisible(
            sizes in proptest::collection::vec(1..40usize, 1..6),
            line in "[a-z0-9 ]{0,30}",
        ) {
            let listener = Listener::bind_addr("127.0.0.1:0".parse().unwrap()).unwrap();
            let port = listener.local_addr().unwrap().port();
            let mut stream = sample_endpoint().encode().unwrap();
            stream.extend_from_slice(format!("{line}\n").as_bytes());
            stream.extend(Endpoint::default().encode().unwrap());
            stream.extend_from_slice(b"done\n");
            let t = thread::spawn(move || {
                let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
                dribble(&mut s, &stream, &sizes).unwrap();
            });
            let mut oob = listener.accept(SECS5).unwrap();
            prop_assert_eq!(oob.recv_msg(SECS5).unwrap(), sample_endpoint());
            prop_assert_eq!(oob.recv_line(SECS5).unwrap(), line);
            prop_assert_eq!(oob.recv_msg(SECS5).unwrap(), Endpoint::default());
            oob.expect_line("done", SECS5).unwrap();
            t.join().unwrap();
        }

        /// Arbitrary bytes from a peer (which then closes): recv_msg ends with a message or
        /// a typed error, well within the deadline.
        #[test]
        fn arbitrary_stream_never_hangs(
            bytes in proptest::collection::vec(any::<u8>(), 0..200),
            magic_first in any::<bool>(),
        ) {
            let listener = Listener::bind_addr("127.0.0.1:0".parse().unwrap()).unwrap();
            let port = listener.local_addr().unwrap().port();
            let mut stream = Vec::new();
            if magic_first {
                stream.extend_from_slice(&MAGIC);
                stream.extend_from_slice(&VERSION.to_be_bytes());
                stream.extend_from_slice(&[0, 0]);
            }
            stream.extend(bytes);
            let t = thread::spawn(move || {
                let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
                let _ = s.write_all(&stream);
            });
            let mut oob = listener.accept(SECS5).unwrap();
            let t0 = Instant::now();
            let got = oob.recv_msg(Duration::from_secs(3));
            prop_assert!(t0.elapsed() < Duration::from_secs(2));
            if let Err(e) = got {
                prop_assert!(!e.is_timeout(), "{e}");
                prop_assert!(!e.to_string().contains('\n'));
            }
            t.join().unwrap();
        }
    }
}
