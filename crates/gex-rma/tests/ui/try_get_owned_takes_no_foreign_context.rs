//! `try_get_owned` trusted the caller to pair the RMA state with its own endpoint's
//! context: a state of endpoint `a` (`layer::state`) with the context of endpoint `b`
//! (`layer::with`) cached `b`'s mapping in `a`'s state, read past `b`'s smaller
//! segment and let a later plain put of `a` write `b`'s segment after `b`'s client
//! was dropped. The non-waiting get is now a free function of the context alone
//! (`gex_rma::try_get_owned(cx, ..)`, which reaches the state through the core, which
//! pairs them); the method is not public.
use gex_core::{boot::Singleton, layer, loopback::Loopback, ClientBuilder, EpAddr};
use gex_rma::{GlobalPtr, Rma};

fn main() {
    let new = |seg| {
        ClientBuilder::new()
            .layer::<Rma>()
            .segment_size(seg)
            .init::<Loopback>(Box::new(Singleton::new()))
            .unwrap()
    };
    let (big, small) = (new(1 << 20), new(4096));
    let mut a = big.endpoint(0).unwrap();
    let mut b = small.endpoint(0).unwrap();
    layer::state::<Rma, _, _>(&mut a, |sa| {
        let _ = layer::with::<Rma, _, _>(&mut b, |_, cx_b| {
            sa.try_get_owned(cx_b, vec![0u8; 8192], GlobalPtr::<u8>::new(EpAddr::rank(0), 0))
        });
    });
}
