//! Storage for libbpf-rs skeletons.
//!
//! A libbpf-rs skeleton borrows a `MaybeUninit<OpenObject>` for its whole
//! life. Long-lived components (an attached filter, the generator) keep
//! their skeleton in a struct, which a borrow of a local cannot outlive;
//! [`object_storage`] gives a `'static` slot instead. The slot is one
//! pointer; the object itself is freed when the skeleton is dropped.

use std::mem::MaybeUninit;

use libbpf_rs::OpenObject;

/// A `'static` slot for one skeleton's object.
pub fn object_storage() -> &'static mut MaybeUninit<OpenObject> {
    Box::leak(Box::new(MaybeUninit::uninit()))
}
