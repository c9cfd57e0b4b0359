//! Reference solution of exercise 02-same-pd (see `../same_pd.rs` for the task).

use crate::Objects;
use lab::{AccessFlags, Context, QpInitAttr};

pub fn build(ctx: &Context) -> lab::Result<Objects> {
    let pd = ctx.alloc_pd()?;
    let cq = ctx.create_cq(16, None)?;
    let qp = pd.create_qp(&QpInitAttr::rc(&cq, &cq))?;
    let mr = pd.reg_mr(4096, AccessFlags::LOCAL_WRITE)?;
    Ok(Objects { qp, mr, cq, pd })
}
