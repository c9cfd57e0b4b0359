//! Reference solution of exercise 13-survive-loss (see `../survive_loss.rs` for the task).

/// 4.096 us x 2^16 = 268 ms per try: long enough that a slow, emulated peer's ACK is not taken
/// for a loss (a spurious retry costs a try too), short enough that a few lost tries fit in the
/// check's 60 seconds.
pub fn ack_timeout() -> u8 {
    16
}

/// Six resends: at 15% loss a message fails only if seven tries in a row are lost
/// (0.15^7, about 2 in a million); and, unlike 7, rxe counts it down, so a dead peer ends in
/// IBV_WC_RETRY_EXC_ERR after 7 x 268 ms.
pub fn retry_cnt() -> u8 {
    6
}
