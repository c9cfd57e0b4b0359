//! Reference solution of exercise 12-refused (see `../refused.rs` for the task).

use crate::Answer;
use lab::cm::{CmEvent, CmId, ConnParam};
use std::time::Duration;

pub fn connect_answer(id: &CmId, hello: &[u8], t: Duration) -> lab::Result<Answer> {
    id.connect(&ConnParam::with_data(hello))?;
    let ev = id.get_event(t)?;
    Ok(match &ev {
        CmEvent::Established { .. } => Answer::Accepted,
        CmEvent::Rejected { .. } => {
            // The REJ's private data is always 148 bytes, zero-padded: the text ends at the
            // first NUL.
            let data = ev.private_data();
            let end = data.iter().position(|&b| b == 0).unwrap_or(data.len());
            Answer::Refused {
                status: ev.status(),
                reason: String::from_utf8_lossy(&data[..end]).into_owned(),
            }
        }
        _ => Answer::Other(ev.to_string()),
    })
}
