//! What the controller's integration tests share.
#![allow(dead_code)]

pub mod postgres;
