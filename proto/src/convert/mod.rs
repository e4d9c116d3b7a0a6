//! Conversions between core types and their wire form, one file per family.

pub mod raft;
