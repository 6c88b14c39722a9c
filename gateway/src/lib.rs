//! troupe: the gateway runtime. (Layout is filled in as modules land.)

pub mod persona;
pub mod storage;
