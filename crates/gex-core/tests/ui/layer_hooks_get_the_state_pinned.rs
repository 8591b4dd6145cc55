//! A layer's own hooks get its state pinned too: a `!Unpin` state (one that relies on
//! not moving, e.g. through a pin projection) cannot be moved by the layer's safe
//! code either. The hooks took `&mut self` before, while the core handed the same
//! state out as `Pin<&mut L>` elsewhere (a pin promise safe code could break).
use gex_core::layer::{Attach, Layer};
use gex_core::spi::Conduit;
use gex_core::{Am, InitError, Token};
use std::marker::PhantomPinned;
use std::pin::Pin;

struct SelfRef {
    _pin: PhantomPinned,
}

impl Layer for SelfRef {
    const NAME: &'static str = "self-ref";
    fn attach<C: Conduit>(_: &mut Attach<'_, C, Self>) -> Result<Self, InitError> {
        Ok(SelfRef { _pin: PhantomPinned })
    }
    fn handle(self: Pin<&mut Self>, _h: u8, _t: &mut Token<'_>, _am: Am<'_>) {
        let mut other = SelfRef { _pin: PhantomPinned };
        std::mem::swap(&mut *self, &mut other);
    }
}

fn main() {}
