//! [`ConnParam`]: the connection parameters of `rdma_connect` and `rdma_accept`.

use rdma_sys::*;

use super::MAX_RD_ATOMIC;

/// Connection parameters (`struct rdma_conn_param`) for [`CmId::connect`](super::CmId::connect) and
/// [`CmId::accept`](super::CmId::accept). The defaults never hang on rxe: `retry_count` and `rnr_retry_count` 6
/// (7 means "forever"), READ credits as many as the device allows.
#[derive(Debug, Clone)]
pub struct ConnParam {
    pub private_data: Vec<u8>,
    /// READs/atomics the peer may have outstanding at us (becomes `max_dest_rd_atomic`).
    pub responder_resources: u8,
    /// READs/atomics we may have outstanding at the peer (becomes `max_rd_atomic`).
    pub initiator_depth: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
}

impl Default for ConnParam {
    fn default() -> Self {
        ConnParam {
            private_data: Vec::new(),
            responder_resources: MAX_RD_ATOMIC,
            initiator_depth: MAX_RD_ATOMIC,
            retry_count: crate::qp::DEFAULT_RETRY_CNT,
            rnr_retry_count: crate::qp::DEFAULT_RNR_RETRY,
        }
    }
}

impl ConnParam {
    /// The defaults, carrying `data` as private data.
    pub fn with_data(data: &[u8]) -> ConnParam {
        ConnParam {
            private_data: data.to_vec(),
            ..ConnParam::default()
        }
    }

    pub(super) fn raw(&self) -> rdma_conn_param {
        rdma_conn_param {
            private_data: if self.private_data.is_empty() {
                std::ptr::null()
            } else {
                self.private_data.as_ptr().cast()
            },
            private_data_len: self.private_data.len().min(255) as u8,
            responder_resources: self.responder_resources,
            initiator_depth: self.initiator_depth,
            flow_control: 1,
            retry_count: self.retry_count.min(7),
            rnr_retry_count: self.rnr_retry_count.min(7),
            srq: 0,
            qp_num: 0,
        }
    }
}
